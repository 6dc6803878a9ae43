package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
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

// collector accumulates one target's measurements; safe for concurrent use.
type collector struct {
	lat, ttfb                        *Histogram
	requests, errs, throttled, bytes atomic.Int64
	lists, complete, incomplete      atomic.Int64
	mu                               sync.Mutex
	codes                            map[string]int64
	firstErr                         string
}

func newCollector() *collector {
	return &collector{lat: NewHistogram(), ttfb: NewHistogram(), codes: map[string]int64{}}
}

func (c *collector) code(code string) {
	c.mu.Lock()
	c.codes[code]++
	c.mu.Unlock()
}

func (c *collector) fail(err error) {
	c.mu.Lock()
	if c.firstErr == "" {
		c.firstErr = err.Error()
	}
	c.mu.Unlock()
}

// client issues requests to one target and records them.
type client struct {
	t      Target
	http   *http.Client
	accept string
	c      *collector
}

// get issues one GET and returns the body in buf (reused) with the status.
func (cl *client) get(ctx context.Context, path string, buf []byte) ([]byte, int, error) {
	code, err := cl.do(ctx, path, func(r io.Reader, status int) (int64, []byte, error) {
		var err error
		buf, err = readAll(r, buf[:0])
		return int64(len(buf)), buf, err
	})
	return buf, code, err
}

// getList issues one LIST request and reads a 200 body as it streams
// (readList), never holding it: the list's info and the status.
func (cl *client) getList(ctx context.Context, path string) (listInfo, int, error) {
	var info listInfo
	code, err := cl.do(ctx, path, func(r io.Reader, status int) (int64, []byte, error) {
		if status != http.StatusOK {
			body, err := readAll(io.LimitReader(r, 4096), nil)
			n, _ := io.Copy(io.Discard, r)
			return int64(len(body)) + n, body, err
		}
		var n int64
		var err error
		info, n, err = readList(r)
		if err != nil {
			err = fmt.Errorf("LIST %s: %w", path, err)
		}
		return n, nil, err
	})
	return info, code, err
}

// do issues one GET of path, reads its body with read (given the status;
// it returns the bytes read and, for a failure message, the body or its
// start) and records the request in the collector: status, bytes, latency
// and time to first byte. A request cut by ctx is not recorded.
func (cl *client) do(ctx context.Context, path string, read func(r io.Reader, status int) (int64, []byte, error)) (int, error) {
	req, err := cl.t.newRequest(ctx, path, cl.accept)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var first time.Time
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotFirstResponseByte: func() { first = time.Now() },
	}))
	resp, err := cl.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		cl.c.requests.Add(1)
		cl.c.errs.Add(1)
		cl.c.code("error")
		cl.c.fail(err)
		return 0, err
	}
	n, body, err := read(resp.Body, resp.StatusCode)
	resp.Body.Close()
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err()
	}
	d := time.Since(start)
	cl.c.requests.Add(1)
	cl.c.bytes.Add(n)
	cl.c.code(strconv.Itoa(resp.StatusCode))
	if err != nil {
		cl.c.errs.Add(1)
		cl.c.fail(err)
		return resp.StatusCode, err
	}
	cl.c.lat.Record(d)
	if !first.IsZero() {
		cl.c.ttfb.Record(first.Sub(start))
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		cl.c.throttled.Add(1)
	case resp.StatusCode >= 300:
		cl.c.errs.Add(1)
		cl.c.fail(fmt.Errorf("GET %s: status %d: %.200s", path, resp.StatusCode, body))
	}
	return resp.StatusCode, nil
}

func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// listOnce performs one full LIST (following continue tokens when paged)
// and judges its completeness.
func (cl *client) listOnce(ctx context.Context, s *Scenario, path string, expected int64) {
	q := url.Values{}
	if s.Limit > 0 {
		q.Set("limit", strconv.Itoa(s.Limit))
	}
	if s.LabelSelector != "" {
		q.Set("labelSelector", s.LabelSelector)
	}
	if s.ResourceVersion != "" {
		q.Set("resourceVersion", s.ResourceVersion)
	}
	total := 0
	ok := true
	for {
		p := path
		if len(q) > 0 {
			p += "?" + q.Encode()
		}
		info, code, err := cl.getList(ctx, p)
		if ctx.Err() != nil {
			return // cut off by the end of the run: not counted
		}
		if err != nil || code != http.StatusOK {
			ok = false
			break
		}
		total += info.Items
		if info.Continue == "" || s.Limit == 0 {
			break
		}
		q.Set("continue", info.Continue)
		q.Del("resourceVersion")
	}
	cl.c.lists.Add(1)
	if ok && (expected < 0 || int64(total) == expected) {
		cl.c.complete.Add(1)
	} else {
		if ok {
			cl.c.fail(fmt.Errorf("LIST %s returned %d items, want %d", path, total, expected))
		}
		cl.c.incomplete.Add(1)
	}
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

func newLimiter(r float64) *rate.Limiter {
	if r <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(r), max(1, int(r/10)))
}

func workers(ctx context.Context, n int, lim *rate.Limiter, fn func(ctx context.Context, w int, r *rand.Rand)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for ctx.Err() == nil {
				if lim != nil && lim.Wait(ctx) != nil {
					return
				}
				fn(ctx, w, r)
			}
		})
	}
	wg.Wait()
}

func runLists(ctx context.Context, cl *client, s *Scenario, expected int64) error {
	path := s.Kind.Path(s.Namespace)
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, _ *rand.Rand) {
		cl.listOnce(ctx, s, path, expected)
	})
	return nil
}

// runListFlood runs the lists and, when etcd is known, a GET probe beside
// them (see RunProbe; in its own process with Env.ProbeCommand).
func runListFlood(ctx context.Context, env Env, t Target, cl *client, s *Scenario, expected int64) (*ProbeResult, error) {
	if env.Etcd == nil {
		return nil, runLists(ctx, cl, s, expected)
	}
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = s.Kind.Path(n[0]) + "/" + n[1]
	}
	wait := startProbe(ctx, env, t, cl.accept, paths)
	err = runLists(ctx, cl, s, expected)
	probe, perr := wait()
	if err == nil {
		err = perr
	}
	return probe, err
}

// objectNames returns namespace/name of the kind's objects in etcd (in ns
// when set), at most max.
func objectNames(ctx context.Context, env Env, k Kind, ns string, limit int64) ([][2]string, error) {
	if env.Etcd == nil {
		return nil, errors.New("this scenario needs --etcd-servers to find object names")
	}
	p := strings.TrimSuffix(env.Prefix, "/") + "/" + k.KeyPrefix + "/"
	if ns != "" {
		p += ns + "/"
	}
	resp, err := env.Etcd.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("cannot read keys under %q: %w", p, err)
	}
	var out [][2]string
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), strings.TrimSuffix(env.Prefix, "/")+"/"+k.KeyPrefix+"/")
		ns, name, ok := strings.Cut(rest, "/")
		if ok {
			out = append(out, [2]string{ns, name})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s in etcd under %q: seed first", k.Resource, p)
	}
	return out, nil
}

func runGets(ctx context.Context, env Env, cl *client, s *Scenario) error {
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return err
	}
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, r *rand.Rand) {
		n := names[r.IntN(len(names))]
		p := s.Kind.Path(n[0]) + "/" + n[1]
		if s.ResourceVersion != "" {
			p += "?resourceVersion=" + url.QueryEscape(s.ResourceVersion)
		}
		_, _, _ = cl.get(ctx, p, nil)
	})
	return nil
}

// runMixed: 70% GETs, 20% LISTs of one namespace paged by 500, 10% full
// LISTs of the scenario's scope.
func runMixed(ctx context.Context, env Env, cl *client, s *Scenario, expected int64) error {
	names, err := objectNames(ctx, env, s.Kind, s.Namespace, 100000)
	if err != nil {
		return err
	}
	paged := *s
	paged.Limit = 500
	nsCount := map[string]int64{}
	if s.LabelSelector == "" {
		for _, n := range names {
			nsCount[n[0]]++
		}
	}
	var nss []string
	for ns := range nsCount {
		nss = append(nss, ns)
	}
	workers(ctx, s.Concurrency, newLimiter(s.Rate), func(ctx context.Context, _ int, r *rand.Rand) {
		switch x := r.Float64(); {
		case x < 0.7:
			n := names[r.IntN(len(names))]
			_, _, _ = cl.get(ctx, s.Kind.Path(n[0])+"/"+n[1], nil)
		case x < 0.9 && len(nss) > 0:
			ns := nss[r.IntN(len(nss))]
			want := nsCount[ns]
			if len(names) >= 100000 {
				want = -1
			}
			cl.listOnce(ctx, &paged, s.Kind.Path(ns), want)
		default:
			cl.listOnce(ctx, s, s.Kind.Path(s.Namespace), expected)
		}
	})
	return nil
}

// runWatch opens s.Concurrency watches, writes s.Rate new objects per second
// into etcd, and measures the time from the start of each write to each
// watcher's receipt of its event. The written objects are deleted after
// the watchers stop.
func runWatch(ctx context.Context, env Env, cl *client, s *Scenario) (*WatchResult, error) {
	if env.Etcd == nil {
		return nil, errors.New("the watch scenario needs --etcd-servers to write changes")
	}
	writeNS := s.Namespace
	if writeNS == "" {
		writeNS = NamespaceName(env.NamespacePrefix, 0)
	}
	rev, err := env.Etcd.Get(ctx, "lazybench-revision-probe", clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("cannot read etcd revision: %w", err)
	}
	startRV := rev.Header.Revision
	wr := &WatchResult{Watchers: s.Concurrency}
	lat := NewHistogram()

	var (
		mu       sync.Mutex
		written  = map[int64]time.Time{} // revision -> write start
		pending  = map[int64][]time.Time{}
		received atomic.Int64
		recon    atomic.Int64
	)
	deliver := func(rv int64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if t0, ok := written[rv]; ok {
			lat.Record(at.Sub(t0))
			received.Add(1)
			return
		}
		pending[rv] = append(pending[rv], at)
	}

	wctx, stopWatchers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatchers()
	var wg sync.WaitGroup
	ready := make(chan struct{}, s.Concurrency)
	for range s.Concurrency {
		wg.Go(func() {
			lastRV := startRV
			first := true
			for wctx.Err() == nil {
				q := url.Values{"watch": {"true"}, "resourceVersion": {strconv.FormatInt(lastRV, 10)}, "allowWatchBookmarks": {"false"}}
				if s.LabelSelector != "" {
					q.Set("labelSelector", s.LabelSelector)
				}
				if !first {
					recon.Add(1)
				}
				err := cl.watch(wctx, s.Kind.Path(s.Namespace)+"?"+q.Encode(), func() {
					if first {
						first = false
						ready <- struct{}{}
					}
				}, func(ev watchEvent) {
					rv, err := strconv.ParseInt(ev.ResourceVersion, 10, 64)
					if err != nil || ev.Type == "BOOKMARK" || ev.Type == "ERROR" {
						return
					}
					lastRV = rv
					if ev.Type == "ADDED" {
						deliver(rv, time.Now())
					}
				})
				if err != nil && wctx.Err() == nil {
					cl.c.fail(err)
					select {
					case <-wctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	// Wait up to 2 s for every watcher's response headers; a server may
	// hold them until the first event, so writing starts regardless.
	readyBy := time.After(2 * time.Second)
wait:
	for range s.Concurrency {
		select {
		case <-ready:
			wr.Opened++
		case <-ctx.Done():
			break wait
		case <-readyBy:
			break wait
		}
	}

	// Writer: new objects at s.Rate per second.
	var keys []string
	r := rand.New(rand.NewPCG(7, 7))
	cfg := SeedConfig{Namespaces: 1, NamespacePrefix: env.NamespacePrefix, Size: SizeDist{Kind: "fixed", Size: 1024}}
	cfg.setDefaults()
	tick := time.NewTicker(time.Duration(float64(time.Second) / s.Rate))
	seq := int(time.Now().UnixNano() % 1e9)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		seq++
		spec := newSpec(s.Kind, seq, &cfg, r, time.Now())
		spec.namespace = writeNS
		spec.name = "watch-" + suffix(seq)
		spec.labels[GroupLabel] = "g" + strconv.Itoa(seq%10)
		val, err := encode(s.Kind, build(s.Kind, spec, r, 512), false)
		if err != nil {
			return wr, err
		}
		key := storagefmt.Key(env.Prefix, s.Kind.KeyPrefix, writeNS, spec.name)
		t0 := time.Now()
		resp, err := env.Etcd.Put(ctx, key, string(val))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return wr, fmt.Errorf("cannot write %q: %w", key, err)
		}
		keys = append(keys, key)
		wr.Writes++
		mu.Lock()
		written[resp.Header.Revision] = t0
		for _, at := range pending[resp.Header.Revision] {
			lat.Record(at.Sub(t0))
			received.Add(1)
		}
		delete(pending, resp.Header.Revision)
		mu.Unlock()
	}
	tick.Stop()
	// Give in-flight events up to a second to arrive.
	deadline := time.Now().Add(time.Second)
	want := wr.Writes * int64(s.Concurrency)
	if s.LabelSelector != "" {
		want = -1
	}
	for time.Now().Before(deadline) && received.Load() < want {
		time.Sleep(10 * time.Millisecond)
	}
	stopWatchers()
	wg.Wait()
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer dcancel()
	for _, k := range keys {
		if _, err := env.Etcd.Delete(dctx, k); err != nil {
			return wr, fmt.Errorf("cannot delete %q: %w", k, err)
		}
	}
	wr.Expected = want
	wr.Received = received.Load()
	wr.Latency = lat.Summary()
	wr.CDF = lat.CDF(200)
	wr.Reconnect = recon.Load()
	return wr, nil
}

// watch streams one watch request, calling opened once the response
// headers arrive and fn per event, until the stream or ctx ends.
func (cl *client) watch(ctx context.Context, path string, opened func(), fn func(watchEvent)) error {
	req, err := cl.t.newRequest(ctx, path, cl.accept)
	if err != nil {
		return err
	}
	if cl.accept == acceptHeaders["protobuf"] {
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot watch %s: %w", path, err)
	}
	defer resp.Body.Close()
	cl.c.requests.Add(1)
	cl.c.code(strconv.Itoa(resp.StatusCode))
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		cl.c.errs.Add(1)
		return fmt.Errorf("cannot watch %s: status %d: %s", path, resp.StatusCode, b)
	}
	opened()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	proto := strings.Contains(resp.Header.Get("Content-Type"), "protobuf")
	var frame []byte
	for {
		var ev watchEvent
		if proto {
			var hdr [4]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return streamEnd(ctx, err)
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if cap(frame) < int(n) {
				frame = make([]byte, n)
			}
			frame = frame[:n]
			if _, err := io.ReadFull(br, frame); err != nil {
				return streamEnd(ctx, err)
			}
			cl.c.bytes.Add(int64(n) + 4)
			ev, err = parseProtoEvent(frame)
			if err != nil {
				return err
			}
		} else {
			line, err := br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				frame = append(frame[:0], line...)
				for errors.Is(err, bufio.ErrBufferFull) {
					line, err = br.ReadSlice('\n')
					frame = append(frame, line...)
				}
				line = frame
			}
			if err != nil {
				return streamEnd(ctx, err)
			}
			cl.c.bytes.Add(int64(len(line)))
			ev, err = parseJSONEvent(line)
			if err != nil {
				return err
			}
		}
		fn(ev)
	}
}

func streamEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
