package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeCommands: every lazybench command line in README.md,
// docs/development.md and bench/RESULTS.md's current figures (the dated
// log keeps the flags of its day) uses flags its subcommand has, and gives --token,
// --kubeconfig and --pid as NAME=VALUE (issue 28: the README's
// "run listflood ... --token TOKEN" failed with "want NAME=VALUE").
func TestReadmeCommands(t *testing.T) {
	usage := map[string]string{}
	flagRe := regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*)(?:[= ](\S+))?`)
	for _, doc := range []string{"../../README.md", "../../docs/development.md", "../../bench/RESULTS.md"} {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if strings.HasSuffix(doc, "RESULTS.md") {
			start := strings.Index(text, "\n## Current figures\n")
			if start < 0 {
				t.Fatalf("%s has no ## Current figures section", doc)
			}
			text = text[start+1:]
			if end := strings.Index(text, "\n## "); end >= 0 {
				text = text[:end]
			}
		}
		// Join continuation lines.
		text = strings.ReplaceAll(text, "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			i := strings.Index(line, "lazybench ")
			if i < 0 || !strings.Contains(line[i:], " --") {
				continue
			}
			fields := strings.Fields(line[i:])
			if len(fields) < 2 || strings.HasPrefix(fields[1], "-") {
				continue
			}
			sub := fields[1]
			u, ok := usage[sub]
			if !ok {
				var out bytes.Buffer
				if err := run(context.Background(), []string{sub, "--help"}, &out, &out); err != nil {
					continue // prose naming no subcommand
				}
				u, usage[sub] = out.String(), out.String()
			}
			cmd := line[i:]
			if j := strings.Index(cmd, "#"); j >= 0 {
				cmd = cmd[:j]
			}
			for _, m := range flagRe.FindAllStringSubmatch(cmd, -1) {
				if m[1] == "--help" {
					continue
				}
				if !regexp.MustCompile(regexp.QuoteMeta(m[1]) + `[ \[]`).MatchString(u) {
					t.Errorf("%s: lazybench %s has no flag %s: %s", doc, sub, m[1], strings.TrimSpace(line))
				}
				switch m[1] {
				case "--token", "--kubeconfig", "--pid":
					if !strings.Contains(m[2], "=") {
						t.Errorf("%s: %s %s wants NAME=VALUE: %s", doc, m[1], m[2], strings.TrimSpace(line))
					}
				}
			}
		}
	}
	if len(usage) < 3 {
		t.Errorf("found commands of %d subcommands in the docs, want several", len(usage))
	}
}
