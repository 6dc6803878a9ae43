package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Failover defaults for FailoverConfig fields left zero.
const (
	DefaultProbeInterval = 500 * time.Millisecond
	DefaultProbeTimeout  = time.Second
	DefaultFailAfter     = 2
	DefaultRecoverAfter  = 3
	// DefaultSlowMargin is FailoverConfig.SlowMargin's default: etcd
	// itself warns of a request that took over 100 ms ("apply request
	// took too long").
	DefaultSlowMargin = 100 * time.Millisecond
	// slowWindow probes per member are kept; a member is judged on
	// their median once it has slowMinSamples of them, so one late
	// probe (a GC pause, a busy machine) moves nothing.
	slowWindow     = 5
	slowMinSamples = 3
)

// FailoverConfig configures a Failover.
type FailoverConfig struct {
	// Endpoints are every member's (--etcd-servers).
	Endpoints []string
	// Preferred, when set, is one of Endpoints to read from alone while it
	// answers (the local member, --etcd-preferred-server).
	Preferred string
	// TLS and DialTimeout are the probe clients' (the main client's own).
	TLS         *tls.Config
	DialTimeout time.Duration
	// ProbeInterval is the pause between rounds of probes; ProbeTimeout
	// bounds one probe. 0 means the defaults.
	ProbeInterval, ProbeTimeout time.Duration
	// FailAfter consecutive failed probes mark a member down;
	// RecoverAfter consecutive good ones mark it up. 0 means the defaults.
	FailAfter, RecoverAfter int
	// SlowMargin: a member that answers is left out as slow while the
	// median of its last 5 probes exceeds both the fastest member's
	// median plus SlowMargin and twice the fastest member's median; it
	// is back once its median is within half of both bounds
	// (SlowMargin/2, 1.5 times). The fastest member is never slow, so
	// some member is always read from. 0 means DefaultSlowMargin;
	// negative turns the latency choice off.
	SlowMargin time.Duration
	// Retry, when set, re-sends the client's reads in flight when the
	// client leaves an endpoint (see ReadRetry).
	Retry  *ReadRetry
	Logger *zap.Logger
	// Metrics receives lazyapi_etcd_members_excluded,
	// lazyapi_etcd_members_slow, lazyapi_etcd_endpoint_changes_total,
	// lazyapi_etcd_member_active{endpoint},
	// lazyapi_etcd_member_probe_seconds{endpoint} and, with Preferred,
	// lazyapi_etcd_preferred_member_active. Nil disables them.
	Metrics *metrics.Set
}

// Failover keeps an etcd client on the members that answer linearizable
// reads: on the preferred member alone (the one beside lazyapi) while it
// does, else on the others that do; without a preferred member, on every
// member that does. When none does, the client keeps every endpoint
// (nothing better is known).
//
// clientv3 has a single balancing policy: its resolver hard-codes gRPC
// round_robin over the endpoints (client/v3/internal/resolver), with no
// weights, no preferred endpoint and no health check beyond the
// connection. Failover therefore sets the client's endpoints
// (Client.SetEndpoints). Each member is probed every ProbeInterval with a
// linearizable read through a client of its own that knows only that
// member, so a probe fails both when the member is down and when it is up
// but cut off from the quorum (a linearizable read needs the leader's read
// index): a connection check would keep reading from a partitioned member,
// where every consistent read fails or waits out its bound. A member is
// down after FailAfter failed probes in a row (a failed probe of a member
// that answers is confirmed by the next round at once, not after
// ProbeInterval), up again after RecoverAfter good ones.
//
// Among the members that answer, a slow one is left out too (SlowMargin):
// the probes time each member's linearizable read through the same kind
// of connection the client reads through, and a member whose median is
// far above the fastest one's is not read from while the others answer
// quickly. The choice is bounded: judged on the median of 5 probes (at
// least 3 slow probes to leave a member out, 3 quick ones to read from it
// again), with a gap between the bounds, and never on the fastest member.
// etcd's client has no such balancer (round_robin only); kube-apiserver
// checks its etcd's health with a timeout (--etcd-healthcheck-timeout)
// but does not choose members by latency.
//
// A change of endpoints does not end the streams already open on the
// endpoints left (gRPC drains a removed connection gracefully): users of
// long-lived watches follow Moved and re-open them (the watch cache does).
type Failover struct {
	cli    *clientv3.Client
	cfg    FailoverConfig
	probes []*clientv3.Client // per cfg.Endpoints

	mu      sync.Mutex
	up      []bool            // per endpoint: answers linearizable reads
	slow    []bool            // per endpoint: up, but far slower than the fastest
	lat     [][]time.Duration // per endpoint: the last slowWindow good probes' latencies
	fails   []int
	goods   []int
	errs    []error
	current []string // the client's endpoints
	since   time.Time
	gen     uint64
	moved   chan struct{} // closed at the next change

	excluded *metrics.Gauge
	slowG    *metrics.Gauge
	active   *metrics.Gauge
	changes  *metrics.Counter
	used     []*metrics.Gauge // per endpoint: 1 while read from
	probeLat []*metrics.Gauge // per endpoint: median probe latency
}

// NewFailover probes every member once and points cli at the ones that
// answer; Run keeps doing so. Close the Failover after Run returned.
func NewFailover(ctx context.Context, cli *clientv3.Client, cfg FailoverConfig) (*Failover, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("store: failover without endpoints")
	}
	if cfg.Preferred != "" && !slices.Contains(cfg.Endpoints, cfg.Preferred) {
		return nil, fmt.Errorf("store: preferred endpoint %s is not one of %v", cfg.Preferred, cfg.Endpoints)
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.FailAfter <= 0 {
		cfg.FailAfter = DefaultFailAfter
	}
	if cfg.RecoverAfter <= 0 {
		cfg.RecoverAfter = DefaultRecoverAfter
	}
	if cfg.SlowMargin == 0 {
		cfg.SlowMargin = DefaultSlowMargin
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	n := len(cfg.Endpoints)
	f := &Failover{cli: cli, cfg: cfg, moved: make(chan struct{}),
		up: make([]bool, n), slow: make([]bool, n), lat: make([][]time.Duration, n),
		fails: make([]int, n), goods: make([]int, n), errs: make([]error, n)}
	for _, ep := range cfg.Endpoints {
		p, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{ep},
			DialTimeout: cfg.DialTimeout,
			TLS:         cfg.TLS,
			Logger:      zap.NewNop(), // its errors are the probe's result
		})
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("cannot create the etcd client of %s: %w", ep, err)
		}
		f.probes = append(f.probes, p)
	}
	if m := cfg.Metrics; m != nil {
		f.excluded = m.GetOrCreateGauge("lazyapi_etcd_members_excluded", nil)
		f.changes = m.GetOrCreateCounter("lazyapi_etcd_endpoint_changes_total")
		f.slowG = m.GetOrCreateGauge("lazyapi_etcd_members_slow", nil)
		if cfg.Preferred != "" {
			f.active = m.GetOrCreateGauge("lazyapi_etcd_preferred_member_active", nil)
		}
		for _, ep := range cfg.Endpoints {
			l := `{endpoint=` + strconv.Quote(ep) + `}`
			f.used = append(f.used, m.GetOrCreateGauge("lazyapi_etcd_member_active"+l, nil))
			f.probeLat = append(f.probeLat, m.GetOrCreateGauge("lazyapi_etcd_member_probe_seconds"+l, nil))
		}
	}
	// The first round decides at once: one probe marks a member (its
	// speed is judged once it has slowMinSamples probes).
	errs, lats := f.round(ctx)
	f.mu.Lock()
	for i, err := range errs {
		f.up[i], f.errs[i] = err == nil, err
		if err == nil {
			f.lat[i] = append(f.lat[i], lats[i])
		}
	}
	f.current = f.chooseLocked()
	f.since = time.Now()
	f.setMetricsLocked()
	cli.SetEndpoints(f.current...)
	f.mu.Unlock()
	if len(f.current) != 1 || f.current[0] != cfg.Preferred {
		f.logChoice()
	}
	return f, nil
}

// round probes every member at once: a linearizable read of a key no one
// writes. It returns each probe's error and latency.
func (f *Failover) round(ctx context.Context) ([]error, []time.Duration) {
	errs := make([]error, len(f.probes))
	lats := make([]time.Duration, len(f.probes))
	var wg sync.WaitGroup
	for i, p := range f.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, f.cfg.ProbeTimeout)
			defer cancel()
			start := time.Now()
			_, errs[i] = p.Get(pctx, "\x00lazyapi-probe", clientv3.WithCountOnly())
			lats[i] = time.Since(start)
			if errs[i] != nil {
				errs[i] = f.probeError(ctx, i, errs[i])
			}
		}()
	}
	wg.Wait()
	return errs, lats
}

// probeError is the error of member i's failed probe: the cause of its
// connection failure when it does not connect (store.DialCause, within a
// quarter of ProbeTimeout: refused and DNS failures answer at once), else
// err, with "no answer within ProbeTimeout" for a deadline.
func (f *Failover) probeError(ctx context.Context, i int, err error) error {
	dctx, cancel := context.WithTimeout(ctx, f.cfg.ProbeTimeout/4)
	defer cancel()
	if cause := DialCause(dctx, f.cfg.Endpoints[i], f.cfg.TLS); cause != nil && dctx.Err() == nil {
		return cause
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("connects, but a linearizable read got no answer within %s", f.cfg.ProbeTimeout)
	}
	return err
}

// median returns the median of d (0 when empty).
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// judgeSlowLocked marks the members that answer far more slowly than the
// fastest one (FailoverConfig.SlowMargin).
func (f *Failover) judgeSlowLocked() {
	best := time.Duration(-1)
	for i, up := range f.up {
		if up && len(f.lat[i]) >= slowMinSamples {
			if m := median(f.lat[i]); best < 0 || m < best {
				best = m
			}
		}
	}
	for i, up := range f.up {
		if !up || f.cfg.SlowMargin < 0 || best < 0 || len(f.lat[i]) < slowMinSamples {
			f.slow[i] = false
			continue
		}
		m := median(f.lat[i])
		if f.slow[i] {
			f.slow[i] = m > best+f.cfg.SlowMargin/2 && m > best*3/2
		} else {
			f.slow[i] = m > best+f.cfg.SlowMargin && m > 2*best
		}
	}
}

// chooseLocked returns the endpoints to read from.
func (f *Failover) chooseLocked() []string {
	if p := f.cfg.Preferred; p != "" {
		if i := slices.Index(f.cfg.Endpoints, p); f.up[i] && !f.slow[i] {
			return []string{p}
		}
	}
	var up []string
	for i, ep := range f.cfg.Endpoints {
		if f.up[i] && !f.slow[i] && ep != f.cfg.Preferred {
			up = append(up, ep)
		}
	}
	if len(up) == 0 {
		return slices.Clone(f.cfg.Endpoints) // nothing answers: try everything
	}
	return up
}

// Run probes the members every ProbeInterval until ctx ends and moves the
// client's endpoints as the probes say.
func (f *Failover) Run(ctx context.Context) {
	t := time.NewTimer(f.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		errs, lats := f.round(ctx)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		suspect := false // a member that answers failed a probe: confirm at once
		for i, err := range errs {
			f.errs[i] = err
			if err != nil {
				f.fails[i], f.goods[i] = f.fails[i]+1, 0
				if f.up[i] && f.fails[i] >= f.cfg.FailAfter {
					f.up[i] = false
					f.lat[i] = f.lat[i][:0] // judged afresh when back
				}
				suspect = suspect || f.up[i]
			} else {
				f.fails[i], f.goods[i] = 0, f.goods[i]+1
				if !f.up[i] && f.goods[i] >= f.cfg.RecoverAfter {
					f.up[i] = true
				}
				if len(f.lat[i]) == slowWindow {
					f.lat[i] = append(f.lat[i][:0], f.lat[i][1:]...)
				}
				f.lat[i] = append(f.lat[i], lats[i])
			}
		}
		f.judgeSlowLocked()
		changed := false
		if next := f.chooseLocked(); !slices.Equal(next, f.current) {
			left := slices.ContainsFunc(f.current, func(ep string) bool { return !slices.Contains(next, ep) })
			f.current, f.since = next, time.Now()
			f.cli.SetEndpoints(next...)
			if left && f.cfg.Retry != nil {
				// The balancer picks from next now: re-send the reads
				// still waiting on the endpoints left.
				f.cfg.Retry.moved()
			}
			f.gen++
			close(f.moved)
			f.moved = make(chan struct{})
			if f.changes != nil {
				f.changes.Inc()
			}
			changed = true
		}
		f.setMetricsLocked()
		f.mu.Unlock()
		if changed {
			f.logChoice()
		}
		if suspect {
			t.Reset(0)
		} else {
			t.Reset(f.cfg.ProbeInterval)
		}
	}
}

func (f *Failover) setMetricsLocked() {
	if f.excluded == nil {
		return
	}
	down, slow := 0, 0
	for i, up := range f.up {
		if !up {
			down++
		}
		if f.slow[i] {
			slow++
		}
		used := 0.0
		if slices.Contains(f.current, f.cfg.Endpoints[i]) {
			used = 1
		}
		f.used[i].Set(used)
		f.probeLat[i].Set(median(f.lat[i]).Seconds())
	}
	f.excluded.Set(float64(down))
	f.slowG.Set(float64(slow))
	if f.active != nil {
		v := 0.0
		if len(f.current) == 1 && f.current[0] == f.cfg.Preferred {
			v = 1
		}
		f.active.Set(v)
	}
}

func (f *Failover) logChoice() {
	st := f.Status()
	fields := []zap.Field{zap.Strings("reading from", st.Current), zap.Strings("not answering", st.Down), zap.Strings("slow", st.Slow)}
	for i, ep := range f.cfg.Endpoints {
		if err := st.errs[i]; err != nil {
			fields = append(fields, zap.NamedError(ep, err))
		}
	}
	switch {
	case len(st.Down) == len(f.cfg.Endpoints):
		// chooseLocked tries every member: none is "reading from".
		f.cfg.Logger.Warn("etcd: no member answers linearizable reads; trying every one", fields[1:]...)
	case st.Preferred != "" && st.OnPreferred:
		f.cfg.Logger.Info("etcd: reading from the preferred member", append(fields, zap.String("preferred", st.Preferred))...)
	case len(st.Down) > 0:
		f.cfg.Logger.Warn("etcd: members do not answer linearizable reads; reading from the others", fields...)
	case len(st.Slow) > 0:
		f.cfg.Logger.Warn("etcd: members answer slowly; reading from the others", fields...)
	default:
		f.cfg.Logger.Info("etcd: every member answers again", fields...)
	}
}

// FailoverStatus is where a Failover's client reads.
type FailoverStatus struct {
	// Preferred is FailoverConfig.Preferred; OnPreferred says the client
	// reads from it alone.
	Preferred   string
	OnPreferred bool
	// Current are the client's endpoints; Down the members whose probes
	// fail; Slow those that answer but far more slowly than the fastest
	// (FailoverConfig.SlowMargin); Members how many there are.
	Current, Down, Slow []string
	Members             int
	// Latency is each member's median probe latency (per
	// FailoverConfig.Endpoints; 0 while it has no good probe).
	Latency []time.Duration
	// Since is when the client's endpoints last changed (or the Failover
	// started).
	Since time.Time
	errs  []error
}

// Degraded says whether a member is left out.
func (s FailoverStatus) Degraded() bool { return len(s.Down) > 0 || len(s.Slow) > 0 }

// Status returns where the client reads.
func (f *Failover) Status() FailoverStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := FailoverStatus{Preferred: f.cfg.Preferred, Current: slices.Clone(f.current), Members: len(f.cfg.Endpoints),
		Since: f.since, errs: slices.Clone(f.errs)}
	st.OnPreferred = st.Preferred != "" && len(f.current) == 1 && f.current[0] == st.Preferred
	for i, ep := range f.cfg.Endpoints {
		if !f.up[i] {
			st.Down = append(st.Down, ep)
		}
		if f.slow[i] {
			st.Slow = append(st.Slow, ep)
		}
		st.Latency = append(st.Latency, median(f.lat[i]))
	}
	return st
}

// Moved returns the number of endpoint changes so far and a channel closed
// at the next one.
func (f *Failover) Moved() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.moved
}

// Close closes the probe clients.
func (f *Failover) Close() error {
	var err error
	for _, p := range f.probes {
		err = errors.Join(err, p.Close())
	}
	return err
}
