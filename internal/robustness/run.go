// Package robustness checks an API server serving Kubernetes reads from
// etcd (lazyapi, or kube-apiserver as the reference) the way etcd's own
// robustness tests check etcd: it drives realistic traffic and random
// faults from a seed, records etcd's history (a watch from the first
// revision) and every answer the server gave, and validates each answer
// against that history: LISTs and GETs hold etcd's state at their
// revision, consistent reads are at least as new as every acknowledged
// write, watches are ordered, unique, reliable and resumable, 410 only for
// compacted revisions, no error but the documented ones, RSS under the
// memory limit.
package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/bench"
)

// Config configures a run.
type Config struct {
	// Seed draws the traffic and the fault schedule: the same seed replays
	// the same requests and faults at the same times (their interleaving
	// with the servers' goroutines is the scheduler's).
	Seed uint64
	// Duration of the traffic.
	Duration time.Duration
	// Cluster is the etcd under the server. Required.
	Cluster Cluster
	// Prefix is --etcd-prefix; default /registry.
	Prefix string
	// Start starts the server under test on the cluster's endpoints, after
	// the custom resource's definition is written. Required.
	Start func(ctx context.Context, endpoints []string) (Server, error)
	// Out is the directory for the history files. Required.
	Out string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Faults are the fault kinds to inject (DefaultFaults by default; those
	// the cluster cannot take, e.g. member faults on one member, are left
	// out); FaultEvery is the mean time between two (default 5 s).
	Faults     []string
	FaultEvery time.Duration
	// Writers, Readers and Watchers are the concurrent clients (default
	// 3, 4, 6).
	Writers, Readers, Watchers int
	// MemoryLimit bounds the server's RSS; 0: not checked.
	MemoryLimit int64
	// BigValues lets writers write values up to 1 MiB (else up to 64 KiB).
	BigValues bool
	// ReorderHold, when set, starts the server on one endpoint: a
	// ReorderProxy in front of the first member, which holds a new
	// watch's events for ReorderHold and passes progress notifications on
	// ahead of them.
	ReorderHold time.Duration
}

// Report is a run's outcome.
type Report struct {
	Seed       uint64
	Duration   time.Duration
	Ops        int64            // answers checked
	ByVerb     map[string]int64 // answers checked by verb and mode
	Events     int64            // watch events checked
	Writes     int64            // writes etcd acknowledged
	Faults     []fault
	Answers    map[string]int64 // refusals and transport errors, counted
	MaxRSS     int64
	Overtakes  int64 // progress notifications the ReorderProxy passed ahead of events
	Violations []violation
	History    string // the history file: every op, then etcd's history
}

// Failed reports whether a guarantee was violated.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

// String is the report a failure prints: seed, fault schedule, the first
// violated guarantee with its history slice, and where the whole history is.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "robustness seed %d, %s: %d answers checked (%s), %d watch events, %d writes, %d faults, max RSS %.1f MiB, %d violations\n",
		r.Seed, r.Duration.Round(time.Second), r.Ops, mapString(r.ByVerb), r.Events, r.Writes, len(r.Faults), float64(r.MaxRSS)/(1<<20), len(r.Violations))
	if r.Overtakes > 0 {
		fmt.Fprintf(&b, "progress notifications passed ahead of a new watch's events: %d\n", r.Overtakes)
	}
	if len(r.Answers) > 0 {
		fmt.Fprintf(&b, "refusals and errors counted: %s\n", mapString(r.Answers))
	}
	if r.Failed() {
		b.WriteString("fault schedule:\n")
		for _, f := range r.Faults {
			b.WriteString("  " + f.String() + "\n")
		}
		b.WriteString("first violation:\n" + r.Violations[0].String())
		if len(r.Violations) > 1 {
			fmt.Fprintf(&b, "(%d more in the history file)\n", len(r.Violations)-1)
		}
	}
	fmt.Fprintf(&b, "history: %s (replay: the same seed)\n", r.History)
	return b.String()
}

func mapString(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

type stats struct {
	ops, events, faults                 atomic.Int64
	writes, writeErrors, writeConflicts atomic.Int64
	mu                                  sync.Mutex
	byVerb, answers                     map[string]int64
}

func (s *stats) count(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers == nil {
		s.answers = map[string]int64{}
	}
	s.answers[what]++
}

func (s *stats) verb(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byVerb == nil {
		s.byVerb = map[string]int64{}
	}
	s.byVerb[what]++
}

// harness is one run's state.
type harness struct {
	cfg       Config
	prefix    string
	cli       *clientv3.Client
	cluster   Cluster
	server    Server
	clients   *clients
	model     *model
	acked     acked
	compacted atomic.Int64
	gen       atomic.Int64 // the server's restarts
	stats     stats
	faults    []fault
	ids       atomic.Int64
	ops       chan *op
	history   *os.File
	enc       *json.Encoder

	mu         sync.Mutex
	violations []violation
	fatalErr   error
	maxRSS     int64
}

func (h *harness) nextID() int64 { return h.ids.Add(1) }

func (h *harness) logf(format string, args ...any) {
	if h.cfg.Log != nil {
		fmt.Fprintf(h.cfg.Log, "robustness: "+format+"\n", args...)
	}
}

func (h *harness) fatal(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fatalErr == nil {
		h.fatalErr = err
	}
}

func (h *harness) violate(v violation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, v)
	if len(h.violations) <= 3 {
		h.logf("VIOLATION %s", v.String())
	}
}

// record queues a finished op for validation.
func (h *harness) record(o *op) { h.ops <- o }

// Run runs the traffic and faults for cfg.Duration and validates every
// answer. The error is the harness's own failure; violations are in the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Cluster == nil || cfg.Start == nil || cfg.Out == "" {
		return nil, errors.New("robustness: Config.Cluster, Start and Out are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry"
	}
	if cfg.Faults == nil {
		cfg.Faults = DefaultFaults
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = 5 * time.Second
	}
	cfg.Writers, cfg.Readers, cfg.Watchers = cmp(cfg.Writers, 3), cmp(cfg.Readers, 4), cmp(cfg.Watchers, 6)
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	eps := cfg.Cluster.Endpoints()
	h := &harness{cfg: cfg, prefix: cfg.Prefix, cluster: cfg.Cluster, model: newModel(), ops: make(chan *op, 4096)}
	h.faults = schedule(cfg.Seed, cfg.Duration, cfg.FaultEvery, usable(cfg.Faults, len(eps)), len(eps))
	var err error
	writeEps := eps
	if slices.Contains(cfg.Faults, FaultPartitionServed) && len(eps) > 1 {
		writeEps = eps[1:] // the first is the server's, cut off by the fault
	}
	if h.cli, err = newEtcdClient(writeEps); err != nil {
		return nil, err
	}
	defer h.cli.Close()
	path := filepath.Join(cfg.Out, fmt.Sprintf("history-seed%d.jsonl", cfg.Seed))
	if h.history, err = os.Create(path); err != nil {
		return nil, err
	}
	defer h.history.Close()
	h.enc = json.NewEncoder(h.history)

	rctx, stopRecorder := context.WithCancel(context.Background())
	defer stopRecorder()
	recorded := make(chan struct{})
	go func() { defer close(recorded); h.recordEtcd(rctx, eps) }()

	// The custom resource's definition first, so the server serves Widgets.
	key, val, err := bench.CRD(cfg.Prefix, rand.New(rand.NewPCG(cfg.Seed, 1)), time.Unix(1764892800, 0))
	if err != nil {
		return nil, err
	}
	if _, err := h.cli.Put(ctx, key, string(val)); err != nil {
		return nil, fmt.Errorf("cannot write the CRD: %w", err)
	}
	srvEps := eps
	var px *ReorderProxy
	if cfg.ReorderHold > 0 {
		if px, err = StartReorderProxy(strings.TrimPrefix(eps[0], "http://"), cfg.ReorderHold); err != nil {
			return nil, err
		}
		defer px.Close()
		srvEps = []string{px.Endpoint()}
	}
	if h.server, err = cfg.Start(ctx, srvEps); err != nil {
		return nil, err
	}
	defer h.server.Stop()
	if h.clients, err = newClients(h.server); err != nil {
		return nil, err
	}

	validated := make(chan struct{})
	go func() { defer close(validated); h.validateLoop() }()

	start := time.Now()
	h.logf("seed %d: %s of traffic, %d faults, server %s, etcd %v", cfg.Seed, cfg.Duration, len(h.faults), h.server.URL(), eps)
	tctx, stopTraffic := context.WithTimeout(ctx, cfg.Duration)
	defer stopTraffic()
	var wg sync.WaitGroup
	seeds := rand.New(rand.NewPCG(cfg.Seed, 2))
	for i := range cfg.Writers {
		w := &writer{id: i, cli: h.cli, prefix: cfg.Prefix, rng: rand.New(rand.NewPCG(seeds.Uint64(), 0)), acked: &h.acked, stats: &h.stats, big: cfg.BigValues}
		wg.Go(func() { w.run(tctx) })
	}
	for i := range cfg.Readers {
		r := &reader{client{h: h, id: i, rng: rand.New(rand.NewPCG(seeds.Uint64(), 0))}}
		wg.Go(func() { r.run(tctx) })
	}
	for i := range cfg.Watchers {
		w := &watcher{client{h: h, id: i, rng: rand.New(rand.NewPCG(seeds.Uint64(), 0))}}
		wg.Go(func() { w.run(tctx) })
	}
	wg.Go(func() { h.inject(tctx, start) })
	wg.Go(func() { h.supervise(tctx) })
	wg.Wait()
	close(h.ops)
	<-validated
	stopRecorder()
	<-recorded
	h.writeEtcdHistory()

	h.mu.Lock()
	defer h.mu.Unlock()
	h.stats.mu.Lock()
	defer h.stats.mu.Unlock()
	r := &Report{Seed: cfg.Seed, Duration: time.Since(start), Ops: h.stats.ops.Load(), ByVerb: h.stats.byVerb, Events: h.stats.events.Load(),
		Writes: h.stats.writes.Load(), Faults: h.faults, Answers: h.stats.answers, MaxRSS: h.maxRSS, Violations: h.violations, History: path}
	if px != nil {
		r.Overtakes = px.Overtakes()
	}
	if h.fatalErr != nil {
		return r, h.fatalErr
	}
	return r, nil
}

func cmp(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func newEtcdClient(eps []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallSendMsgSize: 2 << 20})
	if err != nil {
		return nil, fmt.Errorf("cannot connect to etcd %v: %w", eps, err)
	}
	return cli, nil
}

// recordEtcd watches the prefix from the first revision on a client and
// gRPC stream of its own, re-watching from where it stopped when a member
// goes away, and asks for progress notifications so the model knows how
// far it is complete while no write comes.
func (h *harness) recordEtcd(ctx context.Context, eps []string) {
	cli, err := newEtcdClient(eps)
	if err != nil {
		h.model.fail(err)
		return
	}
	defer cli.Close()
	var next int64 = 1
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, h.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithProgressNotify())
		tick := time.NewTicker(200 * time.Millisecond)
	loop:
		for {
			select {
			case <-tick.C:
				_ = cli.RequestProgress(wctx)
			case resp, ok := <-wch:
				if !ok {
					break loop
				}
				if resp.CompactRevision != 0 {
					h.model.fail(fmt.Errorf("the recorder's watch from %d was compacted at %d", next, resp.CompactRevision))
					h.fatal(fmt.Errorf("etcd's history is incomplete: compacted at %d before the recorder read %d", resp.CompactRevision, next))
					cancel()
					tick.Stop()
					return
				}
				if resp.Err() != nil {
					break loop
				}
				for _, ev := range resp.Events {
					h.model.apply(string(ev.Kv.Key), ev.Kv.ModRevision, ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
					next = ev.Kv.ModRevision + 1
				}
				if len(resp.Events) > 0 {
					h.model.progress(next - 1)
				} else if resp.IsProgressNotify() {
					h.model.progress(resp.Header.Revision)
					next = max(next, resp.Header.Revision+1)
				}
			}
		}
		tick.Stop()
		cancel()
		sleep(ctx, 100*time.Millisecond) // before watching again
	}
}

// validateLoop validates ops in the order they finished and appends
// them to the history file.
func (h *harness) validateLoop() {
	for o := range h.ops {
		h.stats.ops.Add(1)
		h.stats.verb(o.Verb + " " + o.Mode)
		if v := h.validate(o); v != nil {
			h.violate(*v)
			_ = h.enc.Encode(map[string]any{"violation": v})
		}
		_ = h.enc.Encode(map[string]any{"op": o})
	}
}

// supervise samples the server's RSS and notices a server that exited on
// its own (a violation; it is restarted).
func (h *harness) supervise(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	overLimit := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rss := h.server.RSS()
		h.mu.Lock()
		h.maxRSS = max(h.maxRSS, rss)
		h.mu.Unlock()
		if h.cfg.MemoryLimit > 0 && rss > h.cfg.MemoryLimit && !overLimit {
			overLimit = true // once a run
			h.violate(violation{Guarantee: "RSS below --memory-limit", Detail: fmt.Sprintf("RSS %d > %d", rss, h.cfg.MemoryLimit), Op: &op{Start: time.Now(), End: time.Now()}})
		}
		if err := h.server.Exited(); err != nil {
			h.violate(violation{Guarantee: "the server does not crash", Detail: err.Error(), Op: &op{Start: time.Now(), End: time.Now()}})
			h.gen.Add(1)
			_, err := h.server.Kill(ctx)
			h.gen.Add(1)
			if err != nil {
				h.fatal(err)
				return
			}
		}
	}
}

// writeEtcdHistory appends etcd's history to the history file, and the
// fault schedule.
func (h *harness) writeEtcdHistory() {
	for _, f := range h.faults {
		_ = h.enc.Encode(map[string]any{"fault": f})
	}
	h.model.mu.Lock()
	defer h.model.mu.Unlock()
	for _, c := range h.model.changes {
		_ = h.enc.Encode(map[string]any{"etcd": map[string]any{"rev": c.Rev, "key": c.Key, "version": c.Cur}})
	}
}
