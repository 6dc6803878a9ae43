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

// CostConfig configures RunCost: server CPU per byte served, lazyapi and
// kube-apiserver side by side over TLS on the same etcd and data.
type CostConfig struct {
	// Repo is the lazyapi source tree (go build ./cmd/lazyapi,
	// bench/kube-apiserver.sh, bench/RESULTS.md).
	Repo string
	// Out is the results folder.
	Out string
	// EtcdServers is an external etcd; empty starts an embedded one.
	EtcdServers []string
	// Prefix is the etcd prefix.
	Prefix string
	// Objects and Size describe the ConfigMaps seeded (config text), spread
	// over Namespaces namespaces (0 means 1); the phases read the first
	// namespace, so the others only grow the servers' caches and live
	// heaps (e.g. to a heap the garbage cap of --memory-limit binds on).
	Objects    int
	Namespaces int
	Size       SizeDist
	// Clients is the number of concurrent clients per phase; Duration the
	// length of each phase.
	Clients  int
	Duration time.Duration
	// LinkRate is the throttled link of the gzip phases, bytes/s.
	LinkRate float64
	// LazyAPIFlags are extra lazyapi flags.
	LazyAPIFlags []string
	// LazyAPIVariants, when set, run lazyapi once per entry, each a
	// space-separated list of flags added to LazyAPIFlags ("" for none), in
	// this order and before kube-apiserver: e.g. {"--memory-limit=1Gi", ""}
	// measures the garbage cap's cost in the same run. A variant's target is
	// named "lazyapi" followed by its flags.
	LazyAPIVariants []string
	// SkipKube leaves kube-apiserver out.
	SkipKube bool
	// UpdateResults rewrites the ## serving cost section of
	// bench/RESULTS.md.
	UpdateResults bool
	// Command is the command line, for the report.
	Command string
	// Log receives progress lines.
	Log io.Writer
}

// DefaultCostConfig: 200 ConfigMaps of 4 KiB, 2 clients, 8 s per phase, a
// 1 Gbit/s link for the gzip phases.
func DefaultCostConfig() CostConfig {
	return CostConfig{
		Repo:     ".",
		Out:      filepath.Join(os.TempDir(), "lazybench-cost"),
		Prefix:   "/registry",
		Objects:  200,
		Size:     SizeDist{Kind: "fixed", Size: 4 << 10},
		Clients:  2,
		Duration: 8 * time.Second,
		LinkRate: 125e6,
	}
}

// costPhases are the phases RunCost runs against each target. Reads are
// served from the watch caches (resourceVersion=0).
func costPhases(cfg CostConfig, kind Kind, ns string) []Scenario {
	base := Scenario{Kind: kind, Namespace: ns, Concurrency: cfg.Clients, Duration: cfg.Duration, ResourceVersion: "0", Idle: 500 * time.Millisecond}
	with := func(f func(s *Scenario)) Scenario { s := base; f(&s); return s }
	return []Scenario{
		with(func(s *Scenario) { s.Name, s.Accept = ScenarioList, "json" }),
		with(func(s *Scenario) { s.Name, s.Accept = ScenarioList, "protobuf" }),
		with(func(s *Scenario) { s.Name, s.Accept = ScenarioList, "table" }),
		with(func(s *Scenario) { s.Name, s.Accept = ScenarioGet, "json" }),
		with(func(s *Scenario) { s.Name, s.Accept, s.ClientGo, s.LinkRate = ScenarioList, "json", true, cfg.LinkRate }),
		with(func(s *Scenario) { s.Name, s.Accept, s.LinkRate = ScenarioList, "json", cfg.LinkRate }),
	}
}

// costLabel names a cost phase in the report.
func costLabel(s Scenario) string {
	what := "LIST"
	if s.Name == ScenarioGet {
		what = "GET"
	}
	l := what + " " + s.Accept
	switch {
	case s.ClientGo:
		l += ", client-go transport (gzip)"
	case s.LinkRate > 0:
		l += ", no compression"
	}
	if s.LinkRate > 0 {
		l += fmt.Sprintf(", link %.0f Mbit/s", s.LinkRate*8/1e6)
	}
	return l
}

// RunCost seeds cfg.Objects ConfigMaps, then starts lazyapi and
// kube-apiserver (with its watch cache) one after the other over TLS and
// runs costPhases against each, measuring the server's CPU from /proc.
func RunCost(ctx context.Context, cfg CostConfig) (*Report, error) {
	h, err := newHarness(cfg.Out, cfg.EtcdServers, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer h.close()
	logf, logDir, cli, etcd := h.logf, h.logDir, h.cli, h.etcd
	rep := &Report{Date: time.Now().UTC().Truncate(time.Second), Command: cfg.Command, Machine: ThisMachine()}
	kind := Kinds[0]
	sr, err := h.seed(ctx, SeedConfig{Prefix: cfg.Prefix, Kind: kind, Count: cfg.Objects, Namespaces: max(cfg.Namespaces, 1), Size: cfg.Size, Seed: 1}, true)
	if err != nil {
		return nil, err
	}
	rep.Seed = &sr
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	rep.Data = fmt.Sprintf("%d ConfigMaps of config text in namespace %s, sizes %s, %s stored (protobuf)", sr.Objects, ns, cfg.Size, HumanBytes(sr.Bytes))
	if sr.Namespaces > 1 {
		rep.Data = fmt.Sprintf("%d ConfigMaps of config text in %d namespaces, sizes %s, %s stored (protobuf); the phases read namespace %s (%d objects)",
			sr.Objects, sr.Namespaces, cfg.Size, HumanBytes(sr.Bytes), ns, (sr.Objects+sr.Namespaces-1)/sr.Namespaces)
	}
	if n := commitNote(ctx, cfg.Repo); n != "" {
		rep.Notes = append(rep.Notes, n)
	}
	variants := cfg.LazyAPIVariants
	if len(variants) == 0 {
		variants = []string{""}
	}
	var starters []starter
	for _, v := range variants {
		name, flags := "lazyapi", append([]string(nil), cfg.LazyAPIFlags...)
		if f := strings.Fields(v); len(f) > 0 {
			name, flags = name+" "+strings.Join(f, " "), append(flags, f...)
		}
		starters = append(starters, starter{name, "/readyz", func() (*Proc, error) {
			bin, err := BuildLazyAPI(ctx, cfg.Repo, cfg.Out)
			if err != nil {
				return nil, err
			}
			p, err := StartLazyAPI(bin, etcd, cfg.Prefix, logDir, flags...)
			if p != nil {
				p.Target.Name = name
			}
			return p, err
		}})
	}
	script := filepath.Join(cfg.Repo, "bench", "kube-apiserver.sh")
	if kubeBin, kerr := KubeAPIServerBinary(ctx, script); kerr == nil && !cfg.SkipKube {
		rep.Peer = "kube-apiserver v1.37.2 (" + kubeBin + ") with its watch cache, over TLS"
		starters = append(starters, starter{"kube-apiserver", "/readyz", func() (*Proc, error) {
			return StartKubeAPIServer(script, etcd, cfg.Prefix, logDir, true)
		}})
	} else if kerr != nil {
		rep.Peer = "none: " + kerr.Error()
	}
	env := Env{Etcd: cli, Prefix: cfg.Prefix}
	for _, st := range starters {
		if ctx.Err() != nil {
			break
		}
		p, err := h.startReady(ctx, st)
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s could not be started: %v", st.name, err))
			continue
		}
		warm := Scenario{Name: ScenarioList, Kind: kind, Namespace: ns, Concurrency: 1, Duration: 60 * time.Second}
		if err := runUntilOneList(ctx, p.Target, warm); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: warm-up LIST failed: %v", st.name, err))
		}
		for _, s := range costPhases(cfg, kind, ns) {
			if ctx.Err() != nil {
				break
			}
			gc0 := costGCMetrics(ctx, p.Target)
			r, err := RunScenario(ctx, env, p.Target, s)
			if err != nil {
				logf("  %s %s: %v", p.Target.Name, costLabel(s), err)
			}
			if gc0 != nil {
				if gc1 := costGCMetrics(ctx, p.Target); gc1 != nil {
					r.GCCycles = int64(gc1[gcCyclesMetric] - gc0[gcCyclesMetric])
					r.GCCPU = gc1[gcCPUMetric] - gc0[gcCPUMetric]
					r.GCPercent = gc1[gcPercentMetric]
				}
			}
			logf("  %s %s: %s MiB, server CPU %.2f s, %.0f MiB per CPU-second, %d GCs (%.2f s, GOGC %.0f)", p.Target.Name, costLabel(s), mib(r.Bytes),
				r.ServerCPU.Seconds(), r.MiBPerCPUSecond, r.GCCycles, r.GCCPU, r.GCPercent)
			rep.Results = append(rep.Results, r)
		}
		p.Stop()
	}
	if _, err := rep.WriteFiles(cfg.Out); err != nil {
		return rep, err
	}
	if cfg.UpdateResults {
		if err := UpdateResultsSection(filepath.Join(cfg.Repo, "bench", "RESULTS.md"), "serving cost", rep.CostMarkdown()); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

// The Go runtime metrics lazyapi's /metrics exposes that costGCMetrics
// reads.
const (
	gcCyclesMetric  = "go_gc_duration_seconds_count"
	gcCPUMetric     = "go_gc_cpu_seconds_total"
	gcPercentMetric = "lazyapi_gc_percent"
)

// costGCMetrics scrapes lazyapi's collector figures from t's /metrics; nil
// for other targets or when the scrape fails.
func costGCMetrics(ctx context.Context, t Target) map[string]float64 {
	if !strings.HasPrefix(t.Name, "lazyapi") {
		return nil
	}
	m, err := scrapeMetrics(ctx, t, gcCyclesMetric, gcCPUMetric, gcPercentMetric)
	if err != nil || len(m) < 3 {
		return nil
	}
	return m
}

// CostMarkdown renders the ## serving cost section: per phase, each
// target's server CPU per MiB served and lazyapi's ratio to the peer.
func (r *Report) CostMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Date: %s. Machine: %s.\n\nCommand:\n\n    %s\n\nPeer: %s.\n\nData: %s.\n\n", r.Date.Format("2006-01-02 15:04 UTC"), r.Machine, r.Command, r.Peer, r.Data)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	b.WriteString("\nServer CPU = utime+stime of the server process (/proc) during the phase; MiB = response bytes after decoding (uncompressed); wire = bytes read from the connections (TLS, HTTP, gzip included).\n\n")
	b.WriteString("| phase | target | requests | MiB served | wire MiB | server CPU s | MiB per CPU-s | lazyapi ÷ kube-apiserver | GCs (GC CPU s, GOGC) | p50 ms | p99 ms | codes |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	peer := map[string]float64{}
	for _, res := range r.Results {
		if !strings.HasPrefix(res.Target, "lazyapi") {
			peer[costLabel(res.Scenario)] = res.MiBPerCPUSecond
		}
	}
	for _, res := range r.Results {
		ratio, gc := "-", "-"
		if p := peer[costLabel(res.Scenario)]; strings.HasPrefix(res.Target, "lazyapi") && p > 0 && res.MiBPerCPUSecond > 0 {
			ratio = f1(res.MiBPerCPUSecond/p) + "×"
		}
		if res.GCPercent != 0 {
			gc = fmt.Sprintf("%d (%s, %.0f)", res.GCCycles, f2(res.GCCPU), res.GCPercent)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", costLabel(res.Scenario), res.Target, res.Requests,
			mib(res.Bytes), mib(res.WireBytes), f2(res.ServerCPU.Seconds()), f1(res.MiBPerCPUSecond), ratio, gc, f1(res.Latency.P50), f1(res.Latency.P99), codes(res.StatusCodes))
	}
	return b.String()
}
