package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
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
	Logger                  *zap.Logger
	// Metrics receives lazyapi_etcd_members_excluded,
	// lazyapi_etcd_endpoint_changes_total and, with Preferred,
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
// down after FailAfter failed probes in a row, up again after
// RecoverAfter good ones.
//
// A change of endpoints does not end the streams already open on the
// endpoints left (gRPC drains a removed connection gracefully): users of
// long-lived watches follow Moved and re-open them (the watch cache does).
type Failover struct {
	cli    *clientv3.Client
	cfg    FailoverConfig
	probes []*clientv3.Client // per cfg.Endpoints

	mu      sync.Mutex
	up      []bool // per endpoint: answers linearizable reads
	fails   []int
	goods   []int
	errs    []error
	current []string // the client's endpoints
	since   time.Time
	gen     uint64
	moved   chan struct{} // closed at the next change

	excluded *metrics.Gauge
	active   *metrics.Gauge
	changes  *metrics.Counter
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
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cfg.Endpoints = slices.Clone(cfg.Endpoints)
	n := len(cfg.Endpoints)
	f := &Failover{cli: cli, cfg: cfg, moved: make(chan struct{}),
		up: make([]bool, n), fails: make([]int, n), goods: make([]int, n), errs: make([]error, n)}
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
		if cfg.Preferred != "" {
			f.active = m.GetOrCreateGauge("lazyapi_etcd_preferred_member_active", nil)
		}
	}
	// The first round decides at once: one probe marks a member.
	errs := f.round(ctx)
	f.mu.Lock()
	for i, err := range errs {
		f.up[i], f.errs[i] = err == nil, err
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
// writes.
func (f *Failover) round(ctx context.Context) []error {
	errs := make([]error, len(f.probes))
	var wg sync.WaitGroup
	for i, p := range f.probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, f.cfg.ProbeTimeout)
			defer cancel()
			_, errs[i] = p.Get(pctx, "\x00lazyapi-probe", clientv3.WithCountOnly())
		}()
	}
	wg.Wait()
	return errs
}

// chooseLocked returns the endpoints to read from.
func (f *Failover) chooseLocked() []string {
	if p := f.cfg.Preferred; p != "" && f.up[slices.Index(f.cfg.Endpoints, p)] {
		return []string{p}
	}
	var up []string
	for i, ep := range f.cfg.Endpoints {
		if f.up[i] && ep != f.cfg.Preferred {
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
		errs := f.round(ctx)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		for i, err := range errs {
			f.errs[i] = err
			if err != nil {
				f.fails[i], f.goods[i] = f.fails[i]+1, 0
				if f.up[i] && f.fails[i] >= f.cfg.FailAfter {
					f.up[i] = false
				}
			} else {
				f.fails[i], f.goods[i] = 0, f.goods[i]+1
				if !f.up[i] && f.goods[i] >= f.cfg.RecoverAfter {
					f.up[i] = true
				}
			}
		}
		changed := false
		if next := f.chooseLocked(); !slices.Equal(next, f.current) {
			f.current, f.since = next, time.Now()
			f.cli.SetEndpoints(next...)
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
		t.Reset(f.cfg.ProbeInterval)
	}
}

func (f *Failover) setMetricsLocked() {
	if f.excluded == nil {
		return
	}
	down := 0
	for _, up := range f.up {
		if !up {
			down++
		}
	}
	f.excluded.Set(float64(down))
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
	fields := []zap.Field{zap.Strings("reading from", st.Current), zap.Strings("not answering", st.Down)}
	for i, ep := range f.cfg.Endpoints {
		if err := st.errs[i]; err != nil {
			fields = append(fields, zap.NamedError(ep, err))
		}
	}
	switch {
	case st.Preferred != "" && st.OnPreferred:
		f.cfg.Logger.Info("etcd: reading from the preferred member", append(fields, zap.String("preferred", st.Preferred))...)
	case len(st.Down) > 0:
		f.cfg.Logger.Warn("etcd: members do not answer linearizable reads; reading from the others", fields...)
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
	// fail; Members how many there are.
	Current, Down []string
	Members       int
	// Since is when the client's endpoints last changed (or the Failover
	// started).
	Since time.Time
	errs  []error
}

// Degraded says whether a member is left out.
func (s FailoverStatus) Degraded() bool { return len(s.Down) > 0 }

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
