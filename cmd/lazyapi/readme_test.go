package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// TestReadmeFlags: the flags table (README.md, or the docs/ page it moved
// to) has a row for every flag lazyapi has, and names no flag it does not
// have (issue 28: the docs and the code disagreed).
func TestReadmeFlags(t *testing.T) {
	docs, _ := filepath.Glob("../../docs/*.md")
	docs = append([]string{"../../README.md"}, docs...)
	c, err := parseFlags([]string{"--help"})
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, name := range c.fss.Order {
		c.fss.FlagSets[name].VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
	}
	if len(flags) < 40 {
		t.Fatalf("found %d flags in the sections, want them all: %q", len(flags), flags)
	}
	var rows []string // the flags named in the first cell of a table row
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("(?m)^\\| (`--[^|]*)\\|").FindAllStringSubmatch(string(text), -1) {
			for _, f := range regexp.MustCompile("`(--[a-z0-9-]+)").FindAllStringSubmatch(m[1], -1) {
				rows = append(rows, f[1])
			}
		}
	}
	for _, f := range flags {
		if f != "--help" && !slices.Contains(rows, f) {
			t.Errorf("flag %s has no row in the flags table (%q)", f, docs)
		}
	}
	for _, r := range rows {
		if !slices.Contains(flags, r) {
			t.Errorf("the flags table (%q) has %s, which lazyapi does not have", docs, r)
		}
	}
}
