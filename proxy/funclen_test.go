package proxy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is issue 24's bound on a serving-path function.
const maxFuncLines = 80

// TestFunctionLength fails when a function of the files held to the
// bound (the ones already carved to it) runs over maxFuncLines lines,
// counted from func to its closing brace. Add a file once its functions
// fit; watchetcd.go (etcdWatch.run) and serve.go are not there yet.
func TestFunctionLength(t *testing.T) {
	files := []string{"watch.go", "watchwriter.go", "request/*.go"}
	fset := token.NewFileSet()
	n := 0
	for _, pattern := range files {
		matches, err := filepath.Glob(pattern)
		if err != nil || len(matches) == 0 {
			t.Fatalf("%s: no files (%v)", pattern, err)
		}
		for _, file := range matches {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
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
	}
	if n == 0 {
		t.Fatal("no functions checked")
	}
}
