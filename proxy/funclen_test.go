package proxy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 24's bounds on the serving path: a function of at most
// maxFuncLines lines, a file of at most maxFileLines.
const (
	maxFuncLines = 80
	maxFileLines = 700
)

// servingPath is the tree the bounds hold for, relative to this
// directory: proxy and its sub-packages, the upstream forwarder, the
// etcd store, the watch cache, the codec and the command that builds and
// starts them.
var servingPath = []string{".", "../forward", "../store", "../cache", "../codec", "../cmd/lazyapi"}

// servingFiles lists the non-test Go files under servingPath (testdata
// skipped).
func servingFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, root := range servingPath {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == "testdata":
				return filepath.SkipDir
			case !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go"):
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", root, err)
		}
	}
	if len(files) == 0 {
		t.Fatal("no files")
	}
	return files
}

// TestFunctionLength fails when a function of the serving path runs over
// maxFuncLines lines, counted from func to its closing brace, or a file
// over maxFileLines lines.
func TestFunctionLength(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, file := range servingFiles(t) {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if lines := fset.File(f.Pos()).LineCount(); lines > maxFileLines {
			t.Errorf("%s is %d lines (bound %d): split it by concept", file, lines, maxFileLines)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n++
			if lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; lines > maxFuncLines {
				t.Errorf("%s: %s is %d lines (bound %d)", fset.Position(fd.Pos()), fd.Name.Name, lines, maxFuncLines)
			}
		}
	}
	if n == 0 {
		t.Fatal("no functions checked")
	}
}
