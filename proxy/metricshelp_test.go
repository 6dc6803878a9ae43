package proxy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMetricHelpCoversSources: every lazyapi_ metric name written in the
// module's (non-test) sources has a help text in metricHelp, including the
// families a scrape shows only in some configurations (webhooks,
// encryption, several etcd members). A name that is only a prefix
// (prefix + "_requests_total") must prefix an entry.
func TestMetricHelpCoversSources(t *testing.T) {
	name := regexp.MustCompile("[`\"](lazyapi_[a-z0-9_]+)")
	var missing []string
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(src, -1) {
			n := string(m[1])
			if metricHelp[n] != "" {
				continue
			}
			prefix := false
			for k := range metricHelp {
				prefix = prefix || strings.HasPrefix(k, n+"_")
			}
			if !prefix {
				missing = append(missing, path+": "+n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("metric names without help in metricHelp:\n%s", strings.Join(missing, "\n"))
	}
	for k, v := range metricHelp {
		if strings.TrimSpace(v) == "" || strings.ContainsAny(v, "\\\n") {
			t.Errorf("metricHelp[%q] = %q: want one line of text", k, v)
		}
	}
}

// TestMetricsDocumented: every lazyapi_ family in metricHelp has a row in
// the metrics table of docs/operating.md (## Metrics, a name in the row's
// first cell), and the table names no family lazyapi does not have.
func TestMetricsDocumented(t *testing.T) {
	const doc = "../docs/operating.md"
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\n## Metrics\n")
	if start < 0 {
		t.Fatalf("%s has no ## Metrics section", doc)
	}
	s = s[start+1:]
	if end := strings.Index(s, "\n## "); end >= 0 {
		s = s[:end]
	}
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| ([^|]*`lazyapi_[^|]*)\\|")
	name := regexp.MustCompile("`(lazyapi_[a-z0-9_]+)`")
	for _, m := range row.FindAllStringSubmatch(s, -1) {
		for _, n := range name.FindAllStringSubmatch(m[1], -1) {
			documented[n[1]] = true
		}
	}
	if len(documented) < 50 {
		t.Fatalf("found %d metrics in %s's table, want every one", len(documented), doc)
	}
	for k := range metricHelp {
		if strings.HasPrefix(k, "lazyapi_") && !documented[k] {
			t.Errorf("metric %s has no row in %s's metrics table", k, doc)
		}
	}
	for n := range documented {
		if metricHelp[n] == "" {
			t.Errorf("%s's metrics table has %s, which has no help text in metricHelp (not a metric lazyapi serves?)", doc, n)
		}
	}
}
