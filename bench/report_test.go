package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func sampleReport() *Report {
	mk := func(target string, base int64, scale float64) Result {
		h := NewHistogram()
		for i := 1; i <= 500; i++ {
			h.Record(time.Duration(float64(i)*scale) * time.Millisecond)
		}
		var mem []MemSample
		for i := range 40 {
			mem = append(mem, MemSample{T: time.Duration(i) * 200 * time.Millisecond, RSS: base + int64(i)*(1<<20)})
		}
		return Result{
			Target: target, TargetNote: "note for " + target,
			Scenario: Scenario{Name: ScenarioListFlood, Concurrency: 8, Accept: "json", Duration: 5 * time.Second},
			Elapsed:  5 * time.Second, Requests: 500, Bytes: 500 << 20, RPS: 100, MBps: 104.9,
			StatusCodes: map[string]int64{"200": 490, "429": 10}, Throttled: 10,
			Latency: h.Summary(), TTFB: h.Summary(), LatencyCDF: h.CDF(100),
			Lists: 490, Complete: 490, ExpectedItems: 1000,
			Memory: mem, IdleRSS: base, PeakRSS: base + 39<<20,
		}
	}
	return &Report{
		Date:    time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
		Command: "lazybench run listflood --target a=http://x",
		Machine: Machine{NumCPU: 2, MemTotal: 24 << 30, GoVersion: "go1.26.8", OS: "linux/amd64"},
		Peer:    "reference server",
		Data:    "1000 configmaps",
		Results: []Result{mk("lazyapi", 50<<20, 1), mk("kube-apiserver", 400<<20, 3)},
	}
}

func TestReportFiles(t *testing.T) {
	r := sampleReport()
	dir := t.TempDir()
	if keep := os.Getenv("LAZYBENCH_KEEP_PLOTS"); keep != "" {
		dir = keep // to look at the plots
	}
	paths, err := r.WriteFiles(dir)
	if err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	// JSON round-trips.
	f, err := os.Open(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	back, err := ReadReport(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Errorf("results.json does not round-trip:\n got %+v\nwant %+v", back, r)
	}
	// Markdown has the table with one row per result.
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| target | scenario | req | req/s |", "|---|", "| lazyapi | listflood c=8 json |", "| kube-apiserver | listflood c=8 json |", "peer: reference server", "`lazybench run listflood --target a=http://x`"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// PNGs are valid and of the configured size.
	var pngs int
	for _, p := range paths {
		if !strings.HasSuffix(p, ".png") {
			continue
		}
		pngs++
		pf, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(pf)
		pf.Close()
		if err != nil {
			t.Fatalf("%s is not a valid PNG: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 250 {
			t.Errorf("%s is %dx%d, too small to read", p, b.Dx(), b.Dy())
		}
	}
	if pngs != 2 {
		t.Errorf("wrote %d PNGs, want 2 (memory and latency): %v", pngs, paths)
	}
	var term bytes.Buffer
	if err := r.WriteTerminal(&term); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(term.String(), "kube-apiserver") || !strings.Contains(term.String(), "peak RSS MiB") {
		t.Errorf("terminal table lacks rows or header:\n%s", term.String())
	}
}

func TestUpdateResultsSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "RESULTS.md")
	head := "# lazyapi benchmark results\n\nintro\n\n"
	other := "## ratelimit\n\nkeep | this\n"
	if err := os.WriteFile(p, []byte(head+other), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name, body, want string
	}{
		{"suite", "first", head + other + "\n## suite\n\nfirst\n"},
		{"suite", "second\nline", head + other + "\n## suite\n\nsecond\nline\n"},
		{"ratelimit", "new rl", head + "## ratelimit\n\nnew rl\n\n## suite\n\nsecond\nline\n"},
	}
	for _, s := range steps {
		if err := UpdateResultsSection(p, s.name, s.body); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != s.want {
			t.Fatalf("after updating %s with %q:\n%q\nwant\n%q", s.name, s.body, got, s.want)
		}
	}
}

func TestSuiteMarkdown(t *testing.T) {
	r := sampleReport()
	md := r.SuiteMarkdown()
	for _, want := range []string{
		"Command:\n\n    lazybench run listflood --target a=http://x\n",
		"Peer: reference server.",
		"| lazyapi | - | 89.0 | 100.0 | 104.9 | 0.0 | 250.1 / 495.1 | 490/490 lists | 10 |",
		"| kube-apiserver | - | 439.0 |",
		"| lazyapi | listflood c=8 json | 500 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("suite section lacks %q:\n%s", want, md)
		}
	}
}

// TestReportLinksExist: every file results.md links exists, also for a
// run whose target answered nothing (issue 28: results.md linked a PNG
// that was never written).
func TestReportLinksExist(t *testing.T) {
	r := sampleReport()
	empty := r.Results[0]
	empty.Scenario.Name, empty.Memory, empty.LatencyCDF = ScenarioGet, nil, nil
	r.Results = append(r.Results, empty)
	dir := t.TempDir()
	if _, err := r.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^)]+)\)`).FindAllStringSubmatch(string(md), -1)
	if len(links) != 2 {
		t.Errorf("results.md links %d files, want 2 (the listflood plots):\n%s", len(links), md)
	}
	for _, l := range links {
		if _, err := os.Stat(filepath.Join(dir, l[1])); err != nil {
			t.Errorf("results.md links %s: %v", l[1], err)
		}
	}
}

// TestUnitTicks: axis ticks are round values labelled with their unit,
// about five of them (issue 28: the memory axis had two labels, 0.00 and
// 2500.00).
func TestUnitTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		unit   string
		want   []string
	}{
		{0, 2500, "MiB", []string{"0 MiB", "500 MiB", "1000 MiB", "1500 MiB", "2000 MiB", "2500 MiB"}},
		{0, 1, "", []string{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{0, 7.8, "s", []string{"0 s", "2 s", "4 s", "6 s"}},
	} {
		var got []string
		for _, tk := range (unitTicks{tc.unit}).Ticks(tc.lo, tc.hi) {
			if tk.Label != "" {
				got = append(got, tk.Label)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("unitTicks{%q}.Ticks(%g, %g) = %q, want %q", tc.unit, tc.lo, tc.hi, got, tc.want)
		}
	}
}
