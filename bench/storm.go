package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Informer storms: many clients start reading one collection at once, as
// the informers of a rollout's restarted pods do. A row is one kind of
// client at one count: client-go informers (protobuf, client-go's default), or raw streams that
// check and discard what they read (1,024 real informers would need the
// collection in the harness's memory 1,024 times): WatchList (watch with
// sendInitialEvents=true until the initial-events-end bookmark, counting
// the ADDED events) or LIST+WATCH (a reflector's LIST with
// resourceVersion=0, its items counted, then a watch from its
// resourceVersion until the response headers). Each row runs against a
// just-started server (cold) and then again against the same process
// (warm). A 429 is counted and retried as a reflector would (get).
//
// A stream is synced at its initial-events-end bookmark (WatchList) or when
// its watch's response headers arrive (LIST+WATCH), and then stays open, as
// a reflector's watch does (timeoutSeconds drawn from 5 to 10 minutes,
// client-go's minWatchTimeout to twice it), its events read and discarded,
// until the row ends (every stream synced or failed, or the row's timeout):
// the streams still syncing compete with every watch already synced, as
// after a restart of a server under real informers. Hold instead keeps each
// stream, and each informer, that long after its own sync (issue 29's
// storm: watches held 150 s), and the row ends when the last one's hold
// does. CloseStreams closes each stream as soon as it is synced instead
// (the storm table's older rows, labelled "closing streams").

// Storm modes.
const (
	StormInformers = "informers"
	StormWatchList = "watchlist"
	StormListWatch = "listwatch"
)

// StormRow is one row of a storm: a mode and a client count.
type StormRow struct {
	Mode    string `json:"mode"`
	Clients int    `json:"clients"`
}

// StormConfig configures RunStorm.
type StormConfig struct {
	Repo, Out   string
	EtcdServers []string
	Prefix      string
	// Kind, Objects and Size describe the seeded collection (one
	// namespace).
	Kind    Kind
	Objects int
	Size    SizeDist
	// Rows are run in order, each against a freshly started server.
	Rows []StormRow
	// Timeout bounds one run of a row.
	Timeout time.Duration
	// InformerTransform is what the informers of the informers rows keep
	// of each object (InformerTransformNone: all of it, client-go's
	// default; InformerTransformStripData: its metadata, its data counted
	// and checked against etcd's).
	InformerTransform string
	// OwnConnections gives each informer its own transport, so its own
	// connection, as informers in different pods have. Without it the
	// informers share client-go's cached transport (identical configs):
	// one HTTP/2 connection for all of them to a server that speaks
	// HTTP/2 (kube-apiserver), one HTTP/1.1 connection each to one that
	// does not (lazyapi).
	OwnConnections bool
	// DistinctAddresses gives each informer its own connection (as
	// OwnConnections) from its own loopback address (stormLocalAddr: 127.0.1.1
	// on), as informers in different pods connect from different
	// addresses: lazyapi's fair shares count an unauthenticated client per
	// address.
	DistinctAddresses bool
	// Gzip leaves compression on for the WatchList and LIST+WATCH streams,
	// as client-go has it: Go's transport asks for gzip and decodes a
	// compressed response (StormResult.Gzipped counts them). Without it
	// they ask for none.
	Gzip bool
	// CloseStreams closes each WatchList and LIST+WATCH stream once it is
	// synced, instead of holding it open to the end of the row.
	CloseStreams bool
	// Hold, when positive, keeps each synced stream and each synced
	// informer open that long after its sync (bounded by Timeout), and the
	// row lasts until every hold has ended; zero holds them to the end of
	// the row (every stream synced or failed). Ignored with CloseStreams.
	Hold time.Duration
	// LazyAPIFlags are extra lazyapi flags (e.g. --memory-limit).
	LazyAPIFlags []string
	SkipKube     bool
	SkipLazyAPI  bool
	// Profile saves lazyapi's heap profile and metrics at the peak RSS of
	// every run (profileAtPeak) to Out/profiles; it adds --profiling to
	// lazyapi's flags.
	Profile bool
	// UpdateResults rewrites the ## informer storm section of
	// bench/RESULTS.md.
	UpdateResults bool
	Command       string
	Log           io.Writer
}

// StormResult is one run of a row against one target.
type StormResult struct {
	Target  string   `json:"target"`
	Row     StormRow `json:"row"`
	Warm    bool     `json:"warm"`
	Synced  int      `json:"synced"`
	Wrong   int      `json:"wrong"` // synced with an item count other than etcd's
	AllTime time.Duration
	P50     time.Duration
	// Ended is when the row ended (every stream synced or failed, and
	// with Hold every hold over), from its start.
	Ended time.Duration `json:"ended"`
	// Throttled counts 429 answers (each retried after Retry-After);
	// NoRetryAfter those without the header.
	Throttled    int64 `json:"throttled"`
	NoRetryAfter int64 `json:"no_retry_after"`
	Errors       int64 `json:"errors"`
	// Gzipped counts the LIST responses that came compressed (Gzip).
	Gzipped    int64  `json:"gzipped"`
	FirstError string `json:"first_error,omitempty"`
	IdleRSS    int64  `json:"idle_rss_bytes"`
	PeakRSS    int64  `json:"peak_rss_bytes"`
	// CacheBytes is lazyapi's watch cache budget in use before the run
	// (lazyapi_cache_used_bytes; -1 for other servers).
	CacheBytes int64 `json:"cache_bytes"`
	// DataBytes is the data the informers' strip-data transforms counted,
	// all informers together (0 without a transform).
	DataBytes int64 `json:"data_bytes"`
	// The harness process's own RSS (the informers and clients; the
	// embedded etcd too when no --etcd-servers) before and during the run,
	// and the peak of its Go heap live after a collection
	// (runtime/metrics /gc/heap/live:bytes).
	HarnessIdleRSS  int64 `json:"harness_idle_rss_bytes"`
	HarnessPeakRSS  int64 `json:"harness_peak_rss_bytes"`
	HarnessPeakLive int64 `json:"harness_peak_live_heap_bytes"`
}

// StormReport is a storm's results.
type StormReport struct {
	Date    time.Time     `json:"date"`
	Command string        `json:"command"`
	Machine Machine       `json:"machine"`
	Data    string        `json:"data"`
	Notes   []string      `json:"notes,omitempty"`
	Results []StormResult `json:"results"`
}

// RunStorm seeds the collection and runs every row against lazyapi and
// kube-apiserver (over TLS), cold then warm.
func RunStorm(ctx context.Context, cfg StormConfig) (*StormReport, error) {
	h, err := newHarness(cfg.Out, cfg.EtcdServers, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer h.close()
	logf, logDir, etcd := h.logf, h.logDir, h.etcd
	rep := &StormReport{Date: time.Now().UTC().Truncate(time.Second), Command: cfg.Command, Machine: ThisMachine()}
	sr, err := h.seed(ctx, SeedConfig{Prefix: cfg.Prefix, Kind: cfg.Kind, Count: cfg.Objects, Namespaces: 1, Size: cfg.Size, Seed: 1}, true)
	if err != nil {
		return nil, err
	}
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	rep.Data = fmt.Sprintf("%d %s (%s) in namespace %s, %s stored (protobuf); informers read protobuf (client-go's default), WatchList and LIST+WATCH streams JSON", sr.Objects, cfg.Kind.Resource, cfg.Size, ns, HumanBytes(sr.Bytes))
	if n := commitNote(ctx, cfg.Repo); n != "" {
		rep.Notes = append(rep.Notes, n)
	}
	if err := CheckInformerTransform(cfg.InformerTransform); err != nil {
		return rep, err
	}
	expectedData := int64(-1)
	if cfg.InformerTransform != InformerTransformNone && slices.ContainsFunc(cfg.Rows, func(r StormRow) bool { return r.Mode == StormInformers }) {
		if expectedData, err = storedDataBytes(ctx, h.cli, cfg.Prefix, cfg.Kind, ns); err != nil {
			return rep, err
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("informer transform %s: each informer keeps its objects' metadata only; each must count %s of data (decoded from etcd as kube-apiserver does)",
			cfg.InformerTransform, HumanBytes(expectedData)))
	}
	if len(cfg.EtcdServers) == 0 {
		rep.Notes = append(rep.Notes, "harness RSS includes the embedded etcd (--etcd-servers: a separate one)")
	}
	if slices.ContainsFunc(cfg.Rows, func(r StormRow) bool { return r.Mode == StormInformers }) {
		if cfg.DistinctAddresses {
			rep.Notes = append(rep.Notes, "informers: a transport and connection each, each from its own loopback address 127.0.x.y (--distinct-addresses)")
		} else if cfg.OwnConnections {
			rep.Notes = append(rep.Notes, "informers: a transport and connection each (--informer-own-connections)")
		} else {
			rep.Notes = append(rep.Notes, "informers: client-go's shared transport (one HTTP/2 connection for all to kube-apiserver, one HTTP/1.1 connection each to lazyapi)")
		}
	}
	if cfg.CloseStreams {
		rep.Notes = append(rep.Notes, "closing streams (--close-streams): each WatchList and LIST+WATCH stream is closed once synced, which no reflector does")
	} else if cfg.Hold > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("each stream and informer held open %s after its own sync (--hold; watches' timeoutSeconds 300-599 as reflectors'); the row ends when the last hold does", cfg.Hold))
	} else {
		rep.Notes = append(rep.Notes, "streams held open after sync to the end of the row, as reflectors' watches (timeoutSeconds 300-599)")
	}
	if cfg.Gzip {
		rep.Notes = append(rep.Notes, "WatchList and LIST+WATCH streams ask for gzip as client-go does (--gzip: Accept-Encoding: gzip, a compressed response decoded)")
	}
	var starters []starter
	if !cfg.SkipLazyAPI {
		bin, err := BuildLazyAPI(ctx, cfg.Repo, cfg.Out)
		if err != nil {
			return nil, err
		}
		starters = append(starters, starter{"lazyapi", "/readyz", func() (*Proc, error) {
			flags := cfg.LazyAPIFlags
			if cfg.Profile {
				flags = append(append([]string(nil), flags...), "--profiling")
			}
			return StartLazyAPI(bin, etcd, cfg.Prefix, logDir, flags...)
		}})
	}
	script := filepath.Join(cfg.Repo, "bench", "kube-apiserver.sh")
	if _, kerr := KubeAPIServerBinary(ctx, script); kerr == nil && !cfg.SkipKube {
		starters = append(starters, starter{"kube-apiserver", "/readyz", func() (*Proc, error) {
			return StartKubeAPIServer(script, etcd, cfg.Prefix, logDir, true)
		}})
	} else if kerr != nil {
		rep.Notes = append(rep.Notes, "kube-apiserver: "+kerr.Error())
	}
	expected := int64(sr.Objects)
	for _, row := range cfg.Rows {
		for _, st := range starters {
			if ctx.Err() != nil {
				break
			}
			p, err := h.startReady(ctx, st)
			if err != nil {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s could not be started: %v", st.name, err))
				continue
			}
			pctx, pstop := context.WithCancel(ctx)
			var pwg sync.WaitGroup
			if cfg.Profile && st.name == "lazyapi" && p.Target.PID != 0 {
				// The whole life of the server, between runs too (the
				// cache's fill may end there).
				dir := filepath.Join(cfg.Out, "profiles")
				if err := os.MkdirAll(dir, 0o755); err == nil {
					pwg.Go(func() { profileAtPeak(pctx, p.Target, dir, fmt.Sprintf("%s-%d-server", row.Mode, row.Clients)) })
				}
			}
			for _, warm := range []bool{false, true} {
				r := runStormRow(ctx, p.Target, cfg, row, warm, ns, expected, expectedData)
				r.Warm = warm
				phase := "cold"
				if warm {
					phase = "warm"
				}
				logf("%s %s %d %s: %d/%d synced (%d wrong) in %s, peak RSS %s MiB (idle %s, cache %s), 429: %d, errors %d, gzipped LISTs %d; harness RSS %s -> %s MiB (live heap %s), data counted %s MiB, row ended at %s %s", r.Target, row.Mode, row.Clients, phase,
					r.Synced, row.Clients, r.Wrong, r.AllTime.Round(time.Millisecond), mib(r.PeakRSS), mib(r.IdleRSS), mib(r.CacheBytes), r.Throttled, r.Errors, r.Gzipped,
					mib(r.HarnessIdleRSS), mib(r.HarnessPeakRSS), mib(r.HarnessPeakLive), mib(r.DataBytes), r.Ended.Round(time.Millisecond), r.FirstError)
				rep.Results = append(rep.Results, r)
			}
			pstop()
			pwg.Wait()
			p.Stop()
		}
	}
	if cfg.UpdateResults {
		if err := UpdateResultsSection(filepath.Join(cfg.Repo, "bench", "RESULTS.md"), "informer storm ("+cfg.Kind.Resource+")", rep.Markdown()); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

// Markdown renders the report as a section body.
func (r *StormReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Date: %s. Machine: %s.\n\nCommand:\n\n    %s\n\nData: %s.\n\n", r.Date.Format("2006-01-02 15:04 UTC"), r.Machine, r.Command, r.Data)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	b.WriteString("\n| clients | target | phase | synced (wrong count) | time to all synced s | p50 s | row ended s | idle RSS MiB | peak RSS MiB | cache MiB | 429 (without Retry-After) | errors | harness RSS MiB idle → peak (live heap) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, res := range r.Results {
		phase := "cold"
		if res.Warm {
			phase = "warm"
		}
		fmt.Fprintf(&b, "| %d %s | %s | %s | %d/%d (%d) | %s | %s | %s | %s | %s | %s | %d (%d) | %d | %s → %s (%s) |\n", res.Row.Clients, res.Row.Mode, res.Target, phase,
			res.Synced, res.Row.Clients, res.Wrong, f1(res.AllTime.Seconds()), f1(res.P50.Seconds()), f1(res.Ended.Seconds()), mib(res.IdleRSS), mib(res.PeakRSS), mib(res.CacheBytes),
			res.Throttled, res.NoRetryAfter, res.Errors, mib(res.HarnessIdleRSS), mib(res.HarnessPeakRSS), mib(res.HarnessPeakLive))
	}
	return b.String()
}

// stormState collects one run's clients.
type stormState struct {
	mu                       sync.Mutex
	times                    []time.Duration
	wrong                    int
	throttled, noRetry, errs atomic.Int64
	gzipped                  atomic.Int64 // LIST responses that came compressed
	firstErr                 string
	start                    time.Time
	expected                 int64
	// transform and expectedData: the informers' transform and the data
	// each must count with it (-1: not checked); dataRead adds up all.
	transform    string
	expectedData int64
	dataRead     atomic.Int64
	ownConns     bool
	distinct     bool // DistinctAddresses
	target       Target
	client       *http.Client
	path         string
	deadline     time.Time
	// closeStreams: CloseStreams; holdFor: Hold; held are the synced
	// streams kept open (closed by closeHeld at the row's end, or each
	// holdFor after its sync).
	closeStreams bool
	holdFor      time.Duration
	heldMu       sync.Mutex
	held         []io.Closer
	heldWG       sync.WaitGroup
}

// hold keeps a synced stream open, reading and discarding its events, as
// a reflector's watch stays open, until closeHeld (or the server ends
// it), or with holdFor until holdFor has passed or ctx ends; with
// closeStreams it closes it at once.
func (s *stormState) hold(ctx context.Context, r io.Reader, c io.Closer) {
	if s.closeStreams {
		c.Close()
		return
	}
	if s.holdFor > 0 {
		s.heldWG.Go(func() {
			s.holdOpen(ctx)
			c.Close()
		})
	} else {
		s.heldMu.Lock()
		s.held = append(s.held, c)
		s.heldMu.Unlock()
	}
	s.heldWG.Go(func() { _, _ = io.Copy(io.Discard, r) })
}

// holdOpen waits holdFor, or until ctx ends.
func (s *stormState) holdOpen(ctx context.Context) {
	t := time.NewTimer(s.holdFor)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// closeHeld closes the streams held open to the row's end and waits for
// every held stream's reader (with holdFor: for their holds to end).
func (s *stormState) closeHeld() {
	s.heldMu.Lock()
	for _, c := range s.held {
		c.Close()
	}
	s.held = nil
	s.heldMu.Unlock()
	s.heldWG.Wait()
}

func (s *stormState) fail(err error) {
	s.errs.Add(1)
	s.mu.Lock()
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
	s.mu.Unlock()
}

func (s *stormState) synced(items int64) {
	d := time.Since(s.start)
	s.mu.Lock()
	s.times = append(s.times, d)
	if s.expected >= 0 && items != s.expected {
		s.wrong++
	}
	s.mu.Unlock()
}

// syncedWrong records a client synced with the wrong data.
func (s *stormState) syncedWrong() {
	d := time.Since(s.start)
	s.mu.Lock()
	s.times = append(s.times, d)
	s.wrong++
	s.mu.Unlock()
}

func runStormRow(ctx context.Context, t Target, cfg StormConfig, row StormRow, warm bool, ns string, expected, expectedData int64) StormResult {
	res := StormResult{Target: t.Name, Row: row, CacheBytes: -1}
	if t.Name == "lazyapi" {
		res.CacheBytes = scrapeMetric(ctx, t, "lazyapi_cache_used_bytes")
	}
	sampler, err := newMemSampler(t, 100*time.Millisecond)
	if err != nil {
		res.FirstError = err.Error()
		return res
	}
	sctx, stop := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() { sampler.run(sctx) })
	self := &selfSampler{idle: true}
	swg.Go(func() { self.run(sctx, 100*time.Millisecond) })
	time.Sleep(300 * time.Millisecond) // idle samples
	idleEnd := time.Since(sampler.start)
	self.idleEnd()

	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if cfg.Profile && t.Name == "lazyapi" && t.PID != 0 {
		dir := filepath.Join(cfg.Out, "profiles")
		if err := os.MkdirAll(dir, 0o755); err == nil {
			phase := "cold"
			if warm {
				phase = "warm"
			}
			swg.Go(func() { profileAtPeak(sctx, t, dir, fmt.Sprintf("%s-%d-%s", row.Mode, row.Clients, phase)) })
		}
	}
	st := &stormState{start: time.Now(), expected: expected, target: t, path: cfg.Kind.Path(ns), deadline: time.Now().Add(cfg.Timeout),
		transform: cfg.InformerTransform, expectedData: expectedData, ownConns: cfg.OwnConnections, distinct: cfg.DistinctAddresses, closeStreams: cfg.CloseStreams}
	if !cfg.CloseStreams {
		st.holdFor = cfg.Hold
	}
	if row.Mode == StormInformers {
		st.runInformers(rctx, cfg.Kind, ns, row.Clients)
		res.Ended = time.Since(st.start)
	} else {
		tr := &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: row.Clients,
			DisableCompression:  !cfg.Gzip,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback benchmark targets
			ReadBufferSize:      32 << 10,
			WriteBufferSize:     4 << 10,
		}
		st.client = &http.Client{Transport: tr}
		var wg sync.WaitGroup
		for range row.Clients {
			wg.Go(func() {
				var err error
				var items int64
				if row.Mode == StormWatchList {
					items, err = st.watchList(rctx)
				} else {
					items, err = st.listWatch(rctx)
				}
				if err != nil {
					st.fail(err)
					return
				}
				st.synced(items)
			})
		}
		wg.Wait()
		st.closeHeld()
		res.Ended = time.Since(st.start)
		tr.CloseIdleConnections()
	}
	stop()
	swg.Wait()
	mem, _ := sampler.result()
	res.IdleRSS, res.PeakRSS = idlePeak(mem, idleEnd)
	res.Synced = len(st.times)
	res.Wrong = st.wrong
	for _, d := range st.times {
		res.AllTime = max(res.AllTime, d)
	}
	if n := len(st.times); n > 0 {
		ts := append([]time.Duration(nil), st.times...)
		for i := range ts { // insertion sort is enough for <= a few thousand
			for j := i; j > 0 && ts[j] < ts[j-1]; j-- {
				ts[j], ts[j-1] = ts[j-1], ts[j]
			}
		}
		res.P50 = ts[n/2]
	}
	res.Throttled, res.NoRetryAfter, res.Errors = st.throttled.Load(), st.noRetry.Load(), st.errs.Load()
	res.Gzipped = st.gzipped.Load()
	res.FirstError = st.firstErr
	res.DataBytes = st.dataRead.Load()
	res.HarnessIdleRSS, res.HarnessPeakRSS, res.HarnessPeakLive = self.result()
	return res
}
