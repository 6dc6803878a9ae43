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

// TestLibraryMessagesNameNoFlag: no library message (a fill refusal, a
// Status, a log line, a metric's help) names one of lazyapi's flags.
// Libraries take Configs, not flags, and name the Config field or the
// concept; cmd/lazyapi and docs/operating.md map those to the flags. Only
// string literals of production code count. (A flag of another program,
// such as kube-apiserver's --requestheader-client-ca-file that forward
// names as "kube-apiserver's --requestheader-client-ca-file", is not
// lazyapi's and may be named so.)
func TestLibraryMessagesNameNoFlag(t *testing.T) {
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
	flagRe := regexp.MustCompile(`(kube-apiserver's )?--[a-z][a-z0-9]*(?:-[a-z0-9]+)*`)
	literals := 0
	for _, dir := range []string{"cache", "proxy", "store", "ratelimit", "authn", "authz", "audit", "encryption", "resource", "forward", "codec", "openapi"} {
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
				literals++
				for _, name := range flagRe.FindAllString(s, -1) {
					if known[name] { // "kube-apiserver's --x" is never a key of known
						t.Errorf("%s: a message names the flag %s: %q; name the Config field or the concept", path, name, s)
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
	if literals < 1000 {
		t.Fatalf("the scan found %d string literals in the libraries: it did not read their sources", literals)
	}
}
