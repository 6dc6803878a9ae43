package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SuiteConfig configures the standard suite. Zero fields take the defaults
// of DefaultSuiteConfig.
type SuiteConfig struct {
	// Repo is the lazyapi source tree (for go build ./cmd/lazyapi) and
	// where bench/kube-apiserver.sh and bench/RESULTS.md are.
	Repo string
	// Out is the results folder.
	Out string
	// EtcdServers is an external etcd; empty starts an embedded one.
	EtcdServers []string
	// Prefix is the etcd prefix.
	Prefix string
	// Objects, Namespaces and Size describe the seeded ConfigMaps.
	Objects    int
	Namespaces int
	Size       SizeDist
	// ListDuration is the single-client LIST phase (time to first byte).
	ListDuration time.Duration
	// FloodDuration and FloodConcurrency shape the concurrent full LISTs.
	FloodDuration    time.Duration
	FloodConcurrency int
	// Informers is the number of informers started in the informers phase
	// (0 skips it).
	Informers int
	// Watchers is the number of watchers in the watch phase, which writes
	// 20 objects/s for 8 s (0 skips it).
	Watchers int
	// Idle is how long idle memory is sampled before the first phase.
	Idle time.Duration
	// Reference adds the bench reference server as a target even when
	// kube-apiserver is available.
	Reference bool
	// SkipLazyAPI leaves lazyapi out (to measure only the peers).
	SkipLazyAPI bool
	// UpdateResults rewrites the ## suite section of bench/RESULTS.md.
	UpdateResults bool
	// Command is the command line, for the report.
	Command string
	// Self is the lazybench binary (for the reference server child).
	Self string
	// Log receives progress lines; Status gets the per-second status line.
	Log       io.Writer
	Status    io.Writer
	StatusTTY bool
}

// DefaultSuiteConfig is sized for 2 cores and 24 GiB in under 15 minutes.
func DefaultSuiteConfig() SuiteConfig {
	return SuiteConfig{
		Repo:             ".",
		Out:              filepath.Join(os.TempDir(), "lazybench-suite"),
		Prefix:           "/registry",
		Objects:          2000,
		Namespaces:       10,
		Size:             SizeDist{Kind: "lognormal", Size: 16 << 10, Sigma: 0.5},
		ListDuration:     10 * time.Second,
		FloodDuration:    30 * time.Second,
		FloodConcurrency: 16,
		Informers:        4,
		Watchers:         8,
		Idle:             3 * time.Second,
	}
}

// RunSuite seeds etcd, starts each target in turn (lazyapi, kube-apiserver
// with and without its watch cache, or the reference server when
// kube-apiserver is not built), runs the standard phases against it, stops
// it, and writes the report.
func RunSuite(ctx context.Context, cfg SuiteConfig) (*Report, error) {
	h, err := newHarness(cfg.Out, cfg.EtcdServers, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer h.close()
	logf, logDir, cli, etcd := h.logf, h.logDir, h.cli, h.etcd
	rep := &Report{Date: time.Now().UTC().Truncate(time.Second), Command: cfg.Command, Machine: ThisMachine()}

	// Data.
	kind := Kinds[0]
	logf("seeding %d %s (%s) over %d namespaces", cfg.Objects, kind.Resource, cfg.Size, cfg.Namespaces)
	sr, err := h.seed(ctx, SeedConfig{Prefix: cfg.Prefix, Kind: kind, Count: cfg.Objects, Namespaces: cfg.Namespaces, Size: cfg.Size, Seed: 1}, false)
	if err != nil {
		return nil, err
	}
	rep.Seed = &sr
	rep.Data = fmt.Sprintf("%d ConfigMaps in %d namespaces, sizes %s, %s stored (protobuf), seeded in %s",
		sr.Objects, sr.Namespaces, cfg.Size, HumanBytes(sr.Bytes), sr.Duration.Round(time.Millisecond))
	logf("%s", rep.Data)

	if n := commitNote(ctx, cfg.Repo); n != "" && !cfg.SkipLazyAPI {
		rep.Notes = append(rep.Notes, n)
	}

	// Targets, each a func that starts it.
	var starters []starter
	if !cfg.SkipLazyAPI {
		starters = append(starters, starter{"lazyapi", kind.Path("") + "?limit=1", func() (*Proc, error) {
			bin, err := BuildLazyAPI(ctx, cfg.Repo, cfg.Out)
			if err != nil {
				return nil, err
			}
			return StartLazyAPI(bin, etcd, cfg.Prefix, logDir)
		}})
	}
	script := filepath.Join(cfg.Repo, "bench", "kube-apiserver.sh")
	kubeBin, kubeErr := KubeAPIServerBinary(ctx, script)
	if kubeErr == nil {
		rep.Peer = "kube-apiserver v1.37.2 built from its Go module (" + kubeBin + "), with and without its watch cache"
		for _, wc := range []bool{true, false} {
			starters = append(starters, starter{"kube-apiserver --watch-cache=" + fmt.Sprint(wc), "/readyz", func() (*Proc, error) {
				return StartKubeAPIServer(script, etcd, cfg.Prefix, logDir, wc)
			}})
		}
	} else {
		rep.Peer = "bench reference server (kube-apiserver unavailable: " + kubeErr.Error() + ")"
		rep.Notes = append(rep.Notes, "kube-apiserver was not available: "+kubeErr.Error()+"; the reference server stands in for it")
	}
	if kubeErr != nil || cfg.Reference {
		if kubeErr == nil {
			rep.Peer += "; plus the bench reference server"
		}
		starters = append(starters, starter{"reference", "/healthz", func() (*Proc, error) {
			return StartRefServerProc(cfg.Self, etcd, cfg.Prefix, logDir)
		}})
	}

	env := Env{Etcd: cli, Prefix: cfg.Prefix, Status: cfg.Status, StatusTTY: cfg.StatusTTY}
	started := 0
	for _, st := range starters {
		if ctx.Err() != nil {
			break
		}
		p, err := h.startReady(ctx, st)
		if err != nil {
			msg := fmt.Sprintf("%s could not be started: %v", st.name, err)
			if st.name == "lazyapi" {
				msg = "lazyapi's command is not usable yet: " + err.Error()
			}
			logf("%s", msg)
			rep.Notes = append(rep.Notes, msg)
			continue
		}
		started++
		results, err := runSuitePhases(ctx, env, p.Target, kind, cfg, logf)
		rep.Results = append(rep.Results, results...)
		p.Stop()
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", p.Target.Name, err))
		}
	}
	if _, err := Clean(context.WithoutCancel(ctx), cli, CleanConfig{Prefix: cfg.Prefix}); err != nil {
		rep.Notes = append(rep.Notes, "clean after the suite failed: "+err.Error())
	}
	if _, err := rep.WriteFiles(cfg.Out); err != nil {
		return rep, err
	}
	if started == 0 {
		return rep, ErrNoTarget
	}
	if cfg.UpdateResults {
		if err := UpdateResultsSection(filepath.Join(cfg.Repo, "bench", "RESULTS.md"), "suite", rep.SuiteMarkdown()); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

func runSuitePhases(ctx context.Context, env Env, t Target, kind Kind, cfg SuiteConfig, logf func(string, ...any)) ([]Result, error) {
	// Warm up: one full LIST (fills any cache that fills on first use).
	warm := Scenario{Name: ScenarioList, Kind: kind, Concurrency: 1, Duration: 60 * time.Second, Accept: "json"}
	if err := runUntilOneList(ctx, t, warm); err != nil {
		return nil, fmt.Errorf("warm-up LIST failed: %w", err)
	}
	phases := []Scenario{
		{Name: ScenarioList, Kind: kind, Concurrency: 1, Duration: cfg.ListDuration, Accept: "json", Idle: cfg.Idle},
		{Name: ScenarioListFlood, Kind: kind, Concurrency: cfg.FloodConcurrency, Duration: cfg.FloodDuration, Accept: "json", Idle: time.Second},
		{Name: ScenarioListFlood, Kind: kind, Concurrency: cfg.FloodConcurrency, Duration: cfg.FloodDuration / 2, Accept: "protobuf", Idle: time.Second},
	}
	if cfg.Watchers > 0 {
		phases = append(phases, Scenario{Name: ScenarioWatch, Kind: kind, Concurrency: cfg.Watchers, Rate: 20, Duration: 8 * time.Second, Accept: "json", Idle: time.Second})
	}
	if cfg.Informers > 0 {
		phases = append(phases, Scenario{Name: ScenarioInformers, Kind: kind, Concurrency: cfg.Informers, Duration: 60 * time.Second, Accept: "protobuf", Idle: time.Second})
	}
	var out []Result
	for _, s := range phases {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		logf("  %s: %s", t.Name, scenarioLabel(withDefaults(s)))
		r, err := RunScenario(ctx, env, t, s)
		out = append(out, r)
		if err != nil {
			logf("  %s: %v", t.Name, err)
		}
	}
	return out, nil
}

func withDefaults(s Scenario) Scenario { s.setDefaults(); return s }

// runUntilOneList issues full LISTs until one returns 200.
func runUntilOneList(ctx context.Context, t Target, s Scenario) error {
	deadline := time.Now().Add(s.Duration)
	for {
		hc, err := t.httpClient(1)
		if err != nil {
			return err
		}
		cl := &client{t: t, http: hc, accept: "application/json", c: newCollector()}
		_, code, err := cl.get(ctx, s.Kind.Path(""), nil)
		hc.CloseIdleConnections()
		if err == nil && code == 200 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("status %d, %v", code, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// SuiteMarkdown renders the ## suite section body: the headline figures
// per target, then the full table.
func (r *Report) SuiteMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Date: %s. Machine: %s.\n\n", r.Date.Format("2006-01-02 15:04 UTC"), r.Machine)
	fmt.Fprintf(&b, "Command:\n\n    %s\n\n", r.Command)
	fmt.Fprintf(&b, "Peer: %s.\n\nData: %s.\n\n", r.Peer, r.Data)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("| target | idle RSS MiB (objects cached) | listflood peak RSS MiB | listflood req/s | listflood MB/s | listflood MiB per server CPU-s | listflood p50 / p99 ms | complete | 429 | TTFB p50 / p99 ms (1 client) | informer sync p50 ms | watch delivery p50 / p99 ms (events) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	type agg struct {
		idle, peak          int64
		rps, mbps, p50, p99 float64
		cpuMiB              float64
		complete            string
		throttled           int64
		ttfb50, ttfb99      float64
		sync                float64
		watch50, watch99    float64
		events              string
	}
	var order []string
	m := map[string]*agg{}
	for _, res := range r.Results {
		a, ok := m[res.Target]
		if !ok {
			a = &agg{complete: "-"}
			m[res.Target] = a
			order = append(order, res.Target)
		}
		switch {
		case res.Scenario.Name == ScenarioList && res.Scenario.Concurrency == 1:
			a.idle = res.IdleRSS
			a.ttfb50, a.ttfb99 = res.TTFB.P50, res.TTFB.P99
		case res.Scenario.Name == ScenarioListFlood && res.Scenario.Accept == "json":
			a.peak = res.PeakRSS
			a.rps, a.mbps, a.p50, a.p99 = res.RPS, res.MBps, res.Latency.P50, res.Latency.P99
			a.cpuMiB = res.MiBPerCPUSecond
			a.complete = completeness(res)
			a.throttled = res.Throttled
		case res.Scenario.Name == ScenarioInformers && res.Informers != nil:
			a.sync = res.Informers.SyncTime.P50
		case res.Scenario.Name == ScenarioWatch && res.Watch != nil:
			a.watch50, a.watch99 = res.Watch.Latency.P50, res.Watch.Latency.P99
			a.events = completeness(res)
		}
	}
	for _, name := range order {
		a := m[name]
		if a.events == "" {
			a.events = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s / %s | %s | %d | %s / %s | %s | %s / %s (%s) |\n", name, mib(a.idle), mib(a.peak), f1(a.rps), f1(a.mbps), f1(a.cpuMiB),
			f1(a.p50), f1(a.p99), a.complete, a.throttled, f1(a.ttfb50), f1(a.ttfb99), f1(a.sync), f1(a.watch50), f1(a.watch99), a.events)
	}
	b.WriteString("\nAll phases (listflood = concurrent full LISTs of all namespaces; complete = 200, parsed, item count equal to etcd's):\n\n")
	r.writeMarkdownTable(&b)
	b.WriteString("\nlazyapi is served over TLS like kube-apiserver (self-signed certificates). Server CPU = utime+stime of the server process during the phase.\nListflood figures are json unless the scenario says protobuf. Targets run one at a time on the same etcd; each is stopped before the next starts.\n")
	return b.String()
}

// UpdateResultsSection replaces the body of "## name" in the Markdown file
// at path (up to the next "## " heading) with body, appending the section
// when it is missing and creating the file when needed. Other sections are
// left byte for byte.
func UpdateResultsSection(path, name, body string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("cannot read %q: %w", path, err)
	}
	text := string(old)
	if text == "" {
		text = "# lazyapi benchmark results\n\nEach area owns its `## <area>` section; commands, dates and medians.\n"
	}
	heading := "## " + name + "\n"
	section := heading + "\n" + strings.TrimRight(body, "\n") + "\n"
	start := -1
	if strings.HasPrefix(text, heading) {
		start = 0
	} else if i := strings.Index(text, "\n"+heading); i >= 0 {
		start = i + 1
	}
	if start < 0 {
		text = strings.TrimRight(text, "\n") + "\n\n" + section
	} else {
		end := len(text)
		if j := strings.Index(text[start+len(heading):], "\n## "); j >= 0 {
			end = start + len(heading) + j + 1
			section += "\n"
		}
		text = text[:start] + section + text[end:]
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return fmt.Errorf("cannot write %q: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
