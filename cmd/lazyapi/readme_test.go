package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// operatingDoc is where the flags table lives (docs/operating.md, ## Flags).
const operatingDoc = "../../docs/operating.md"

// TestReadmeFlags: the flags table of docs/operating.md has a row for
// every flag lazyapi has, and names no flag it does not have (issue 28:
// the docs and the code disagreed).
func TestReadmeFlags(t *testing.T) {
	doc, err := os.ReadFile(operatingDoc)
	if err != nil {
		t.Fatal(err)
	}
	flags := lazyapiFlags(t)
	var rows []string // the flags named in the first cell of a table row
	for _, m := range regexp.MustCompile("(?m)^\\| (`--[^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		for _, f := range regexp.MustCompile("`(--[a-z0-9-]+)").FindAllStringSubmatch(m[1], -1) {
			rows = append(rows, f[1])
		}
	}
	for _, f := range flags {
		if f != "--help" && !slices.Contains(rows, f) {
			t.Errorf("flag %s has no row in %s's flags table", f, operatingDoc)
		}
	}
	for _, r := range rows {
		if !slices.Contains(flags, r) {
			t.Errorf("%s's flags table has %s, which lazyapi does not have", operatingDoc, r)
		}
	}
}

// lazyapiFlags returns the flags --help lists, section by section.
func lazyapiFlags(t *testing.T) []string {
	t.Helper()
	c, err := parseFlags([]string{"--help"})
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	for _, name := range c.fss.Order {
		c.fss.FlagSets[name].VisitAll(func(f *pflag.Flag) { flags = append(flags, "--"+f.Name) })
	}
	if len(flags) < 40 {
		t.Fatalf("found %d flags in --help's sections, want them all: %q", len(flags), flags)
	}
	return flags
}

// docFiles are the documents whose links TestDocLinks checks: the README,
// everything in docs/, and bench/RESULTS.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("docs/ has %d documents, want operating, security, compatibility, storms, development", len(files))
	}
	return append([]string{"../../README.md", "../../bench/RESULTS.md"}, files...)
}

// TestDocLinks: every relative link of the README, docs/ and
// bench/RESULTS.md names a file or directory of the repository, and every
// #anchor a heading of the document it points into (as GitHub makes
// anchors from headings). A section moved or renamed breaks its links here,
// not for a reader.
func TestDocLinks(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = markdownAnchors(string(b))
		return anchors[path]
	}
	links := 0
	for _, doc := range docFiles(t) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(stripFences(string(b)), "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				links++
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %s: %v", doc, n+1, target, err)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not markdown", doc, n+1, target)
				} else if !anchorsOf(path)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", doc, n+1, target, path, anchor)
				}
			}
		}
	}
	if links < 50 {
		t.Errorf("found %d relative links in the docs, want the README's and docs' many", links)
	}
}

// stripFences blanks the lines inside ``` code blocks (keeping the line
// count), whose brackets and # lines are code, not links and headings.
func stripFences(s string) string {
	lines := strings.Split(s, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(l, "```") {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// markdownAnchors returns the anchors GitHub gives the headings of a
// markdown document: lower case, punctuation but '-' and '_' dropped,
// spaces as '-', a repeated one suffixed -1, -2, ...
func markdownAnchors(s string) map[string]bool {
	drop := regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
	heading := regexp.MustCompile(`^#{1,6} (.*)$`)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range strings.Split(stripFences(s), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[1])), ""), " ", "-")
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestResultsCoverReadme: every figure the README links into
// bench/RESULTS.md has its row in RESULTS.md's "Current figures" table
// (a row whose question starts "README:" and whose section link is the
// README's), so that no claim of the README lacks its current figure,
// command and date; and every number of a README table row citing it is
// in that row (a figure changed on one side only fails here).
func TestResultsCoverReadme(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := docSection(t, "../../bench/RESULTS.md", "Current figures")
	number := regexp.MustCompile(`\d[\d,]*(?:\.\d+)?`)
	rows := map[string][]map[string]bool{} // section anchor -> the numbers of each README row linking it
	for _, m := range regexp.MustCompile(`(?m)^\| README: (.*)\]\(#([^)]+)\) \|$`).FindAllStringSubmatch(s, -1) {
		nums := map[string]bool{}
		for _, n := range number.FindAllString(m[1], -1) {
			nums[strings.TrimRight(n, ",")] = true
		}
		rows[m[2]] = append(rows[m[2]], nums)
	}
	claims := 0
	for _, line := range strings.Split(string(readme), "\n") {
		for _, m := range regexp.MustCompile(`\]\(bench/RESULTS\.md#([^)]+)\)`).FindAllStringSubmatch(line, -1) {
			if m[1] == "current-figures" {
				continue
			}
			claims++
			if len(rows[m[1]]) == 0 {
				t.Errorf("README.md cites bench/RESULTS.md#%s, which has no README row in RESULTS.md's Current figures table", m[1])
				continue
			}
			// A figure in a README table row is one its RESULTS.md row has.
			if !strings.HasPrefix(line, "|") {
				continue
			}
			text := strings.Replace(line, m[0], "", 1)
			matched := false
			var missing []string
			for _, nums := range rows[m[1]] {
				missing = missing[:0]
				for _, n := range number.FindAllString(text, -1) {
					if n = strings.TrimRight(n, ","); !nums[n] {
						missing = append(missing, n)
					}
				}
				matched = matched || len(missing) == 0
			}
			if !matched {
				t.Errorf("README.md's row citing #%s has figures its RESULTS.md row does not (%s): %s", m[1], strings.Join(missing, ", "), line)
			}
		}
	}
	if claims < 3 {
		t.Errorf("README.md cites %d figures of bench/RESULTS.md, want its headline figures", claims)
	}
}

// foreignFlags are the flags the docs name that are not lazyapi's, with
// whose they are. TestDocFlags fails on any other flag lazyapi does not
// have: a renamed or misspelled flag in the docs.
var foreignFlags = map[string]string{
	"--authentication-config":            "kube-apiserver",
	"--cert-dir":                         "kube-apiserver",
	"--etcd-healthcheck-timeout":         "kube-apiserver",
	"--event-ttl":                        "kube-apiserver",
	"--insecure-port":                    "kube-apiserver (removed)",
	"--oidc-":                            "kube-apiserver (--oidc-*)",
	"--service-account-signing-key-file": "kube-apiserver",
	"--max-mutating-requests-inflight":   "kube-apiserver",
	"--proxy-client-cert-file":           "kube-apiserver (aggregation layer)",
	"--proxy-client-key-file":            "kube-apiserver (aggregation layer)",
	"--requestheader-client-ca-file":     "kube-apiserver",
	"--requestheader-allowed-names":      "kube-apiserver",
	"--strict":                           "helm lint",
	"--faults":                           "lazybench robustness",
	"--profile":                          "lazybench robustness",
	"--duration":                         "lazybench",
	"--requestheader-":                   "kube-apiserver (--requestheader-*)",
	"--server-side":                      "kubectl",
	"--list":                             "kubectl (auth can-i)",
	"--as":                               "kubectl",
	"--as-group":                         "kubectl",
	"--certificate-authority":            "kubectl",
	"--chunk-size":                       "kubectl",
	"--client-certificate":               "kubectl",
	"--client-key":                       "kubectl",
	"--raw":                              "kubectl",
	"--token":                            "kubectl, lazybench",
	"--dry-run":                          "helm",
	"--install":                          "helm",
	"--validate":                         "helm",
	"--prefix":                           "etcdctl",
	"--print-value-only":                 "etcdctl",
	"--client-go":                        "lazybench run",
	"--link-rate":                        "lazybench run",
	"--out":                              "lazybench",
	"--pid":                              "lazybench run",
	"--probe-process":                    "lazybench run",
}

// TestDocFlags: every flag the README and docs/ name in code spans is
// lazyapi's (or, ending in '-', the prefix of some of its flags, as
// `--tls-*`), or one of foreignFlags. The flags of lazybench command
// lines in code blocks are TestReadmeCommands' (cmd/lazybench).
func TestDocFlags(t *testing.T) {
	flags := lazyapiFlags(t)
	known := func(f string) bool {
		if _, ok := foreignFlags[f]; ok || slices.Contains(flags, f) {
			return true
		}
		return strings.HasSuffix(f, "-") && slices.ContainsFunc(flags, func(g string) bool { return strings.HasPrefix(g, f) })
	}
	span := regexp.MustCompile("`[^`\n]*`")
	flag := regexp.MustCompile(`(?:^|[^\w-])(--[a-z][a-z0-9-]*)`)
	named := 0
	guideLines(t, false, func(doc string, n int, line string) {
		for _, s := range span.FindAllString(line, -1) {
			for _, m := range flag.FindAllStringSubmatch(s, -1) {
				named++
				if !known(m[1]) {
					t.Errorf("%s:%d: %s is not a lazyapi flag (nor in foreignFlags): %s", doc, n, m[1], s)
				}
			}
		}
	})
	if named < 100 {
		t.Errorf("found %d flags named in the docs, want the many the docs name", named)
	}
}

// TestDocPaths: every repository path the README and docs/ name (a
// `dir/.../file.go`, .md, .yaml, .json or .sh anywhere, or a code span
// starting with a top-level directory) exists, so that a file or package
// moved leaves no reader looking for it.
func TestDocPaths(t *testing.T) {
	file := regexp.MustCompile(`(?:^|[^\w/.:-])((?:[a-z0-9_]+/)+[A-Za-z0-9_.-]+\.(?:go|md|yaml|json|sh))\b`)
	span := regexp.MustCompile("`((?:[a-z0-9_]+/)+[A-Za-z0-9_.-]*)`")
	checked := 0
	guideLines(t, true, func(doc string, n int, line string) {
		var paths []string
		for _, m := range file.FindAllStringSubmatch(line, -1) {
			paths = append(paths, m[1])
		}
		for _, m := range span.FindAllStringSubmatch(line, -1) {
			top, _, _ := strings.Cut(m[1], "/")
			if strings.Contains(m[1], "...") {
				continue // internal/...: a pattern
			}
			if st, err := os.Stat(filepath.Join("../..", top)); err == nil && st.IsDir() {
				paths = append(paths, m[1])
			}
		}
		slices.Sort(paths)
		for _, p := range slices.Compact(paths) {
			checked++
			if _, err := os.Stat(filepath.Join("../..", p)); err != nil {
				t.Errorf("%s:%d: %s does not exist", doc, n, p)
			}
		}
	})
	if checked < 50 {
		t.Errorf("checked %d paths in the docs, want the many they name", checked)
	}
}

// TestDocFuzzTargets: the fuzzing table of docs/development.md names every
// fuzz target of the module under its package, and no target that is not
// there.
func TestDocFuzzTargets(t *testing.T) {
	s := docSection(t, "../../docs/development.md", "Fuzzing")
	documented := map[string]string{} // target -> package directory
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/]+)` \\| (.*)\\|$").FindAllStringSubmatch(s, -1) {
		for _, f := range regexp.MustCompile("`(Fuzz[A-Za-z0-9]+)`").FindAllStringSubmatch(m[2], -1) {
			documented[f[1]] = m[1]
		}
	}
	found := map[string]string{}
	fuzz := regexp.MustCompile(`(?m)^func (Fuzz[A-Za-z0-9]+)\(`)
	err := filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel("../..", filepath.Dir(path))
		for _, m := range fuzz.FindAllStringSubmatch(string(src), -1) {
			found[m[1]] = filepath.ToSlash(dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 10 {
		t.Fatalf("found %d fuzz targets in the module, want its many", len(found))
	}
	for f, dir := range found {
		if documented[f] != dir {
			t.Errorf("fuzz target %s (in %s) is not in docs/development.md's table under `%s`", f, dir, dir)
		}
	}
	for f, dir := range documented {
		if found[f] == "" {
			t.Errorf("docs/development.md's fuzzing table names %s under `%s`, which does not exist", f, dir)
		}
	}
}

// docSection returns the "## heading" section of a markdown document, up to
// the next "## " heading.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## "+heading+"\n")
	if start < 0 {
		t.Fatalf("%s has no ## %s section", path, heading)
	}
	s = s[start+1:]
	if end := strings.Index(s, "\n## "); end >= 0 {
		s = s[:end]
	}
	return s
}

// guideLines calls fn with each line (numbered from 1) of the README and
// docs/, not of bench/RESULTS.md, a log whose flags and paths are those of
// its day; with code, the lines of code blocks too, else those are blank.
func guideLines(t *testing.T, code bool, fn func(doc string, n int, line string)) {
	t.Helper()
	for _, doc := range docFiles(t) {
		if strings.HasSuffix(doc, "RESULTS.md") {
			continue
		}
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if !code {
			text = stripFences(text)
		}
		for n, line := range strings.Split(text, "\n") {
			fn(doc, n+1, line)
		}
	}
}
