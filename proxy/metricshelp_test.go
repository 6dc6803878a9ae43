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
