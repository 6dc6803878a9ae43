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
	// Preferred is the endpoint to read from while it answers (the local
	// member, --etcd-preferred-server).
	Preferred string
	// Others are the endpoints to read from while it does not (the rest of
	// --etcd-servers). With none, the client stays on Preferred.
	Others []string
	// TLS and DialTimeout are the probe client's (the main client's own).
	TLS         *tls.Config
	DialTimeout time.Duration
	// ProbeInterval is the pause between probes of Preferred; ProbeTimeout
	// bounds one probe. 0 means the defaults.
	ProbeInterval, ProbeTimeout time.Duration
	// FailAfter consecutive failed probes move the client to Others;
	// RecoverAfter consecutive good ones move it back. 0 means the defaults.
	FailAfter, RecoverAfter int
	Logger                  *zap.Logger
	// Metrics receives lazyapi_etcd_preferred_member_active and
	// lazyapi_etcd_failovers_total. Nil disables them.
	Metrics *metrics.Set
}

// Failover keeps an etcd client on a preferred member (the one beside
// lazyapi) while that member answers linearizable reads, and on the other
// members while it does not.
//
// clientv3 has a single balancing policy: its resolver hard-codes gRPC
// round_robin over the endpoints (client/v3/internal/resolver), with no
// weights and no preferred endpoint. Failover therefore sets the client's
// endpoints (Client.SetEndpoints): Preferred alone while its probe passes,
// Others after FailAfter failed probes in a row, Preferred again after
// RecoverAfter good ones. The probe is a linearizable read through a
// client of its own that knows only Preferred, so it fails both when the
// member is down and when it is up but cut off from the quorum (a
// linearizable read needs the leader's read index): a connection check
// (gRPC health, pick_first) would keep reading from a partitioned member,
// where every consistent read fails.
//
// A switch does not end the streams already open on the endpoints left
// (gRPC drains a removed connection gracefully): users of long-lived
// watches follow Moved and re-open them (the watch cache does).
type Failover struct {
	cli, probe *clientv3.Client
	cfg        FailoverConfig

	mu        sync.Mutex
	preferred bool // the client reads from Preferred
	since     time.Time
	lastErr   error
	gen       uint64
	moved     chan struct{} // closed at the next switch

	active    *metrics.Gauge
	failovers *metrics.Counter
}

// NewFailover probes cfg.Preferred once and points cli at it, or at
// cfg.Others when it does not answer; Run keeps doing so. Close the
// Failover after Run returned.
func NewFailover(ctx context.Context, cli *clientv3.Client, cfg FailoverConfig) (*Failover, error) {
	if cfg.Preferred == "" {
		return nil, errors.New("store: failover without a preferred endpoint")
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
	cfg.Others = slices.DeleteFunc(slices.Clone(cfg.Others), func(s string) bool { return s == cfg.Preferred })
	probe, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{cfg.Preferred},
		DialTimeout: cfg.DialTimeout,
		TLS:         cfg.TLS,
		Logger:      zap.NewNop(), // its errors are the probe's result
	})
	if err != nil {
		return nil, fmt.Errorf("cannot create the etcd client of the preferred member %s: %w", cfg.Preferred, err)
	}
	f := &Failover{cli: cli, probe: probe, cfg: cfg, moved: make(chan struct{})}
	if cfg.Metrics != nil {
		f.active = cfg.Metrics.GetOrCreateGauge("lazyapi_etcd_preferred_member_active", nil)
		f.failovers = cfg.Metrics.GetOrCreateCounter("lazyapi_etcd_failovers_total")
	}
	err = f.check(ctx)
	f.preferred = err == nil || len(cfg.Others) == 0
	f.since, f.lastErr = time.Now(), err
	f.setMetrics()
	if f.preferred {
		cli.SetEndpoints(cfg.Preferred)
	} else {
		cli.SetEndpoints(cfg.Others...)
		cfg.Logger.Warn("preferred etcd member does not answer: reading from the others",
			zap.String("preferred", cfg.Preferred), zap.Strings("others", cfg.Others), zap.Error(err))
	}
	return f, nil
}

// setMetrics sets the gauge and counts a move away from Preferred.
func (f *Failover) setMetrics() {
	if f.active == nil {
		return
	}
	if f.preferred {
		f.active.Set(1)
	} else {
		f.active.Set(0)
		f.failovers.Inc()
	}
}

// check is one probe: a linearizable read of a key no one writes.
func (f *Failover) check(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, f.cfg.ProbeTimeout)
	defer cancel()
	_, err := f.probe.Get(pctx, "\x00lazyapi-probe", clientv3.WithCountOnly())
	return err
}

// Run probes the preferred member every ProbeInterval until ctx ends and
// moves the client's endpoints as the probes say.
func (f *Failover) Run(ctx context.Context) {
	if len(f.cfg.Others) == 0 {
		<-ctx.Done()
		return
	}
	var fails, goods int
	t := time.NewTimer(f.cfg.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := f.check(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			fails, goods = fails+1, 0
		} else {
			fails, goods = 0, goods+1
		}
		f.mu.Lock()
		f.lastErr = err
		switch {
		case f.preferred && fails >= f.cfg.FailAfter:
			f.switchLocked(false)
			f.cfg.Logger.Warn("preferred etcd member does not answer linearizable reads: reading from the others",
				zap.String("preferred", f.cfg.Preferred), zap.Strings("others", f.cfg.Others), zap.Error(err))
		case !f.preferred && goods >= f.cfg.RecoverAfter:
			down := time.Since(f.since)
			f.switchLocked(true)
			f.cfg.Logger.Info("preferred etcd member answers again: reading from it",
				zap.String("preferred", f.cfg.Preferred), zap.Duration("away", down))
		}
		f.mu.Unlock()
		t.Reset(f.cfg.ProbeInterval)
	}
}

func (f *Failover) switchLocked(preferred bool) {
	f.preferred, f.since = preferred, time.Now()
	f.setMetrics()
	if preferred {
		f.cli.SetEndpoints(f.cfg.Preferred)
	} else {
		f.cli.SetEndpoints(f.cfg.Others...)
	}
	f.gen++
	close(f.moved)
	f.moved = make(chan struct{})
}

// FailoverStatus is where a Failover's client reads.
type FailoverStatus struct {
	Preferred string
	// OnPreferred: the client reads from Preferred; else from Others.
	OnPreferred bool
	Others      []string
	// Since is when the client last moved (or the Failover started).
	Since time.Time
	// LastErr is the last probe's error.
	LastErr error
}

// Status returns where the client reads.
func (f *Failover) Status() FailoverStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FailoverStatus{Preferred: f.cfg.Preferred, OnPreferred: f.preferred, Others: f.cfg.Others,
		Since: f.since, LastErr: f.lastErr}
}

// Moved returns the number of switches so far and a channel closed at the
// next one.
func (f *Failover) Moved() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.moved
}

// Close closes the probe client.
func (f *Failover) Close() error { return f.probe.Close() }
