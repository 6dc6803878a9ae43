package bench

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Scenario names.
const (
	ScenarioList      = "list"
	ScenarioGet       = "get"
	ScenarioWatch     = "watch"
	ScenarioListFlood = "listflood"
	ScenarioInformers = "informers"
	ScenarioMixed     = "mixed"
)

// Scenarios lists every scenario name.
var Scenarios = []string{ScenarioList, ScenarioGet, ScenarioWatch, ScenarioListFlood, ScenarioInformers, ScenarioMixed}

// Scenario configures one load scenario. Zero fields take defaults in
// setDefaults.
type Scenario struct {
	// Name is one of Scenarios.
	Name string `json:"name"`
	// Kind is the resource read.
	Kind Kind `json:"kind"`
	// Namespace restricts requests to one namespace; "" reads all
	// namespaces (the watch writer then writes into the first seeded one).
	Namespace string `json:"namespace,omitempty"`
	// Concurrency is the number of concurrent clients (list, get, listflood,
	// mixed), watchers (watch) or informers (informers).
	Concurrency int `json:"concurrency"`
	// Duration bounds the load phase; informers stop earlier once synced.
	Duration time.Duration `json:"duration_ns"`
	// Rate caps requests/s over all clients (0: as fast as answered); for
	// watch it is the number of changes written to etcd per second.
	Rate float64 `json:"rate,omitempty"`
	// Limit pages LISTs with ?limit= and follows continue tokens (0: full).
	Limit int `json:"limit,omitempty"`
	// Accept is json, protobuf or table.
	Accept string `json:"accept"`
	// LabelSelector is sent with LISTs and watches when set.
	LabelSelector string `json:"label_selector,omitempty"`
	// ResourceVersion is sent with LISTs when set ("0": from a watch cache).
	ResourceVersion string `json:"resource_version,omitempty"`
	// Idle is how long memory is sampled before the load starts.
	Idle time.Duration `json:"idle_ns"`
	// SampleEvery is the memory sampling period; 0 means 200ms.
	SampleEvery time.Duration `json:"-"`
	// ClientGo reads with client-go's default transport (rest.HTTPClientFor:
	// HTTP/2 over TLS, Accept-Encoding: gzip added and decoded by Go's
	// transport) instead of the harness's HTTP/1.1 client without
	// compression. Bytes then count the decoded body; WireBytes what came
	// over the connections.
	ClientGo bool `json:"client_go,omitempty"`
	// LinkRate throttles the bytes read from the target over all the
	// scenario's connections to this many bytes/s (0: unthrottled), as a
	// link of that speed: 125e6 is 1 Gbit/s.
	LinkRate float64 `json:"link_rate,omitempty"`
}

func (s *Scenario) setDefaults() {
	if s.Concurrency <= 0 {
		switch s.Name {
		case ScenarioListFlood:
			s.Concurrency = 16
		case ScenarioList, ScenarioInformers:
			s.Concurrency = 1
		default:
			s.Concurrency = 4
		}
	}
	if s.Duration <= 0 {
		s.Duration = 10 * time.Second
	}
	if s.Accept == "" {
		s.Accept = "json"
	}
	if s.Kind.Resource == "" {
		s.Kind = Kinds[0]
	}
	if s.SampleEvery <= 0 {
		s.SampleEvery = 200 * time.Millisecond
	}
	if s.Name == ScenarioWatch && s.Rate <= 0 {
		s.Rate = 10
	}
}

// Env is what scenarios share besides the target: etcd (for expected
// counts, object names and watch writes) and where progress goes.
type Env struct {
	// Etcd is optional; without it completeness is judged by parsing only
	// and get/watch cannot run.
	Etcd *clientv3.Client
	// Prefix is the etcd prefix; "" means /registry.
	Prefix string
	// NamespacePrefix of the seeded namespaces; "" means the default.
	NamespacePrefix string
	// Status, when not nil, receives a status line about once a second.
	Status io.Writer
	// StatusTTY rewrites the status line in place.
	StatusTTY bool
	// ProbeCommand, when set, runs the listflood GET probe in a process of
	// its own: the command (e.g. the lazybench binary and "probe") to which
	// the probe flags are appended (see RunProbe).
	ProbeCommand []string
}

// Result is one scenario's measurements against one target.
type Result struct {
	Target      string           `json:"target"`
	TargetNote  string           `json:"target_note,omitempty"`
	Scenario    Scenario         `json:"scenario"`
	Elapsed     time.Duration    `json:"elapsed_ns"`
	Requests    int64            `json:"requests"`
	Errors      int64            `json:"errors"` // transport errors and non-2xx other than 429
	Throttled   int64            `json:"throttled"`
	StatusCodes map[string]int64 `json:"status_codes"`
	Bytes       int64            `json:"bytes"`
	RPS         float64          `json:"requests_per_s"`
	MBps        float64          `json:"mb_per_s"`
	Latency     Percentiles      `json:"latency"`
	TTFB        Percentiles      `json:"ttfb"`
	LatencyCDF  []CDFPoint       `json:"latency_cdf,omitempty"`
	// Lists counts complete LIST operations attempted (a paged list is one);
	// Complete are those whose bodies parsed and whose item count matched.
	Lists         int64 `json:"lists,omitempty"`
	Complete      int64 `json:"complete,omitempty"`
	Incomplete    int64 `json:"incomplete,omitempty"`
	ExpectedItems int64 `json:"expected_items"` // -1 when unknown

	Watch     *WatchResult    `json:"watch,omitempty"`
	Informers *InformerResult `json:"informers,omitempty"`
	// Probe is the listflood GET probe: one more client, on its own
	// connection, GETting single objects while the lists run.
	Probe *ProbeResult `json:"probe,omitempty"`

	// ServerCPU is the target's CPU time (user + system) during the load
	// phase, from /proc when the target is a local process (0: unknown);
	// MiBPerCPUSecond is Bytes per second of it.
	ServerCPU       time.Duration `json:"server_cpu_ns,omitempty"`
	MiBPerCPUSecond float64       `json:"mib_per_cpu_s,omitempty"`
	// WireBytes are the bytes read from the target's connections (TLS,
	// headers, framing, compression included).
	WireBytes int64 `json:"wire_bytes,omitempty"`
	// GCCycles and GCCPU are the collections the target's Go runtime ran
	// and their CPU during the phase, scraped from its /metrics before and
	// after (lazybench cost, lazyapi only; 0: not scraped); GCPercent is
	// GOGC at the end of the phase (lazyapi_gc_percent).
	GCCycles  int64   `json:"gc_cycles,omitempty"`
	GCCPU     float64 `json:"gc_cpu_s,omitempty"`
	GCPercent float64 `json:"gc_percent,omitempty"`

	Memory      []MemSample `json:"memory,omitempty"`
	IdleRSS     int64       `json:"idle_rss_bytes"`
	PeakRSS     int64       `json:"peak_rss_bytes"`
	MemoryError string      `json:"memory_error,omitempty"`
	Error       string      `json:"error,omitempty"`
	FirstError  string      `json:"first_error,omitempty"`
}

// WatchResult measures event delivery.
type WatchResult struct {
	Watchers  int         `json:"watchers"`
	Writes    int64       `json:"writes"`
	Expected  int64       `json:"expected_events"`
	Received  int64       `json:"received_events"`
	Latency   Percentiles `json:"delivery_latency"`
	CDF       []CDFPoint  `json:"delivery_cdf,omitempty"`
	Reconnect int64       `json:"reconnects"`
	// Opened counts watchers whose response headers arrived within 2 s of
	// the request, before any write.
	Opened int `json:"opened_before_writes"`
}

// ProbeResult measures the GET probe that runs beside a listflood: is a
// small request still served while the big ones saturate the server?
type ProbeResult struct {
	Where       string           `json:"where"` // ProbeInProcess or ProbeOwnProcess
	Requests    int64            `json:"requests"`
	Errors      int64            `json:"errors"` // transport errors and non-2xx other than 429
	Throttled   int64            `json:"throttled"`
	StatusCodes map[string]int64 `json:"status_codes"`
	Latency     Percentiles      `json:"latency"`
	FirstError  string           `json:"first_error,omitempty"`
}

// probeRate is the listflood GET probe's request rate (one at a time).
const probeRate = 20

// InformerResult measures informer start-up.
type InformerResult struct {
	Informers int         `json:"informers"`
	Synced    int         `json:"synced"`
	Complete  int         `json:"complete"` // synced with the expected item count
	SyncTime  Percentiles `json:"sync_time"`
}

// RunScenario runs s against t and returns its measurements. A scenario
// that cannot run returns a Result with Error set and an error.
func RunScenario(ctx context.Context, env Env, t Target, s Scenario) (Result, error) {
	s.setDefaults()
	if env.Prefix == "" {
		env.Prefix = "/registry"
	}
	if env.NamespacePrefix == "" {
		env.NamespacePrefix = DefaultNamespacePrefix
	}
	res := Result{Target: t.Name, TargetNote: t.Note, Scenario: s, ExpectedItems: -1}
	fail := func(err error) (Result, error) {
		res.Error = err.Error()
		return res, err
	}
	if err := t.resolve(); err != nil {
		return fail(err)
	}
	accept, err := AcceptHeader(s.Accept)
	if err != nil {
		return fail(err)
	}
	ln := newLink(s.LinkRate)
	hc, err := t.scenarioClient(s, ln)
	if err != nil {
		return fail(err)
	}
	defer hc.CloseIdleConnections()
	col := newCollector()
	cl := &client{t: t, http: hc, accept: accept, c: col}

	if env.Etcd != nil {
		n, _, err := CountObjects(ctx, env.Etcd, env.Prefix, s.Kind, s.Namespace)
		if err != nil {
			return fail(err)
		}
		if s.LabelSelector == "" {
			res.ExpectedItems = n
		}
	}

	// Memory: sample from before the idle phase to the end.
	sampler, err := newMemSampler(t, s.SampleEvery)
	if err != nil {
		return fail(err)
	}
	sctx, stopSampler := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() { sampler.run(sctx) })
	defer func() { stopSampler(); swg.Wait() }()
	if s.Idle > 0 {
		select {
		case <-time.After(s.Idle):
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	idleEnd := time.Since(sampler.start)

	lctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	cpu0, cpuErr := time.Duration(0), error(nil)
	if t.PID != 0 {
		cpu0, cpuErr = ProcCPU(t.PID)
	}
	wire0 := ln.read.Load()
	start := time.Now()
	status := startStatus(lctx, env, t, &s, col, start)

	var runErr error
	switch s.Name {
	case ScenarioList:
		runErr = runLists(lctx, cl, &s, res.ExpectedItems)
	case ScenarioListFlood:
		res.Probe, runErr = runListFlood(lctx, env, t, cl, &s, res.ExpectedItems)
	case ScenarioGet:
		runErr = runGets(lctx, env, cl, &s)
	case ScenarioMixed:
		runErr = runMixed(lctx, env, cl, &s, res.ExpectedItems)
	case ScenarioWatch:
		res.Watch, runErr = runWatch(lctx, env, cl, &s)
	case ScenarioInformers:
		res.Informers, runErr = runInformers(lctx, t, &s, res.ExpectedItems)
	default:
		runErr = fmt.Errorf("unknown scenario %q (want one of %s)", s.Name, strings.Join(Scenarios, ", "))
	}
	res.Elapsed = time.Since(start)
	if t.PID != 0 && cpuErr == nil {
		if cpu1, err := ProcCPU(t.PID); err == nil {
			res.ServerCPU = cpu1 - cpu0
		}
	}
	res.WireBytes = ln.read.Load() - wire0
	cancel()
	status.Wait()

	stopSampler()
	swg.Wait()
	mem, merr := sampler.result()
	res.Memory = mem
	if merr != nil {
		res.MemoryError = merr.Error()
	}
	res.IdleRSS, res.PeakRSS = idlePeak(mem, idleEnd)

	res.Requests = col.requests.Load()
	res.Errors = col.errs.Load()
	res.Throttled = col.throttled.Load()
	res.Bytes = col.bytes.Load()
	res.MiBPerCPUSecond = MiBPerCPUSecond(res.Bytes, res.ServerCPU)
	res.StatusCodes = col.codes
	if secs := res.Elapsed.Seconds(); secs > 0 {
		res.RPS = float64(res.Requests) / secs
		res.MBps = float64(res.Bytes) / secs / 1e6
	}
	res.Latency = col.lat.Summary()
	res.TTFB = col.ttfb.Summary()
	res.LatencyCDF = col.lat.CDF(200)
	res.Lists = col.lists.Load()
	res.Complete = col.complete.Load()
	res.Incomplete = col.incomplete.Load()
	res.FirstError = col.firstErr
	if runErr != nil {
		return fail(runErr)
	}
	return res, nil
}

// idlePeak returns the last RSS sampled before idleEnd (or the first
// sample) and the largest RSS after it.
func idlePeak(mem []MemSample, idleEnd time.Duration) (idle, peak int64) {
	for i, m := range mem {
		if m.T <= idleEnd || i == 0 {
			idle = m.RSS
		}
		if m.T >= idleEnd || len(mem) == 1 {
			peak = max(peak, m.RSS)
		}
	}
	return idle, peak
}

type statusLine struct{ wg sync.WaitGroup }

func (s *statusLine) Wait() { s.wg.Wait() }

func startStatus(ctx context.Context, env Env, t Target, s *Scenario, c *collector, start time.Time) *statusLine {
	sl := &statusLine{}
	if env.Status == nil {
		return sl
	}
	sl.wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		every := 1
		if !env.StatusTTY {
			every = 5
		}
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				if env.StatusTTY {
					fmt.Fprint(env.Status, "\r\033[K")
				}
				return
			case <-tick.C:
			}
			if n%every != 0 {
				continue
			}
			el := time.Since(start)
			p := c.lat.Summary()
			line := fmt.Sprintf("%-16s %-10s %5.0fs/%.0fs  req %d  %.1f req/s  %.1f MB/s  p99 %.1fms  errors %d  429 %d",
				t.Name, s.Name, el.Seconds(), s.Duration.Seconds(), c.requests.Load(),
				float64(c.requests.Load())/el.Seconds(), float64(c.bytes.Load())/el.Seconds()/1e6, p.P99, c.errs.Load(), c.throttled.Load())
			if env.StatusTTY {
				fmt.Fprint(env.Status, "\r\033[K"+line)
			} else {
				fmt.Fprintln(env.Status, line)
			}
		}
	})
	return sl
}
