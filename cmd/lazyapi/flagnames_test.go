package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLibraryMessagesNameRealFlags: where a library's message (a fill
// refusal, a Status, a log line) names one of lazyapi's flags, the flag
// exists under that name: renaming a flag cannot leave a message pointing
// at a flag that is gone. Only string literals of production code count.
func TestLibraryMessagesNameRealFlags(t *testing.T) {
	o, err := parseFlags([]string{"--help"})
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, name := range o.fss.Order {
		for _, f := range strings.Fields(o.fss.FlagSets[name].FlagUsages()) {
			if strings.HasPrefix(f, "--") {
				known[strings.TrimRight(strings.SplitN(f, "=", 2)[0], ",.[")] = true
			}
		}
	}
	flagRe := regexp.MustCompile(`--[a-z][a-z0-9]*(?:-[a-z0-9]+)+`)
	seen := 0
	for _, dir := range []string{"cache", "proxy", "store", "ratelimit", "authn", "authz", "audit", "encryption", "resource"} {
		err := filepath.WalkDir(filepath.Join("../..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				for _, name := range flagRe.FindAllString(s, -1) {
					seen++
					if !known[name] {
						t.Errorf("%s: a message names %s, which is not a lazyapi flag: %q", path, name, s)
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen == 0 {
		t.Fatal("no library message names a flag: the scan found nothing to check")
	}
}
