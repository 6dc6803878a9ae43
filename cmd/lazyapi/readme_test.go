package main

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestReadmeFlags: the README's flags table has a row for every flag
// lazyapi has, and names no flag it does not have (issue 28: the docs and
// the code disagreed).
func TestReadmeFlags(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseFlags([]string{"--help"})
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z0-9-]+)`).FindAllStringSubmatch(c.usage, -1) {
		flags = append(flags, m[1])
	}
	if len(flags) < 40 {
		t.Fatalf("found %d flags in --help, want them all:\n%s", len(flags), c.usage)
	}
	var rows []string // the flags named in the first cell of a table row
	for _, m := range regexp.MustCompile("(?m)^\\| (`--[^|]*)\\|").FindAllStringSubmatch(string(readme), -1) {
		for _, f := range regexp.MustCompile("`(--[a-z0-9-]+)").FindAllStringSubmatch(m[1], -1) {
			rows = append(rows, f[1])
		}
	}
	for _, f := range flags {
		if f != "--help" && !slices.Contains(rows, f) {
			t.Errorf("flag %s has no row in README.md's flags table", f)
		}
	}
	for _, r := range rows {
		if !slices.Contains(flags, r) {
			t.Errorf("README.md's flags table has %s, which lazyapi does not have", r)
		}
	}
}
