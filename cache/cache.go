// Package cache is lazyapi's byte-bounded watch cache: per resource, the
// values stored in etcd by key (a copy-on-write B+tree), kept current by an
// etcd watch, with an event history for watch resumption, under one global
// byte budget. It serves LIST/GET snapshots and WATCH streams; it has no
// HTTP types.
package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Sentinel errors, wrapped with %w; test them with errors.Is.
var (
	// ErrNotCached: the resource is not served from the cache (disabled,
	// filling, relisting, too large, evicted); read etcd instead. The error
	// is a *NotCachedError naming the state and reason.
	ErrNotCached = errors.New("cache: not cached")
	// ErrTooLarge: the cache did not reach the requested revision within
	// Config.WaitTimeout (kube-apiserver answers 504 Timeout with cause
	// ResourceVersionTooLarge and retryAfterSeconds 1).
	ErrTooLarge = errors.New("cache: too large resource version")
	// ErrNotCaughtUp: a consistent read could not confirm the cache holds
	// etcd's current revision in time; read etcd instead.
	ErrNotCaughtUp = errors.New("cache: not caught up with etcd")
	// ErrEtcdUnavailable: a consistent read could not get etcd's current
	// revision (it wraps ErrNotCaughtUp too). Reading etcd instead would
	// wait for it a second time: answer that etcd is unavailable.
	ErrEtcdUnavailable = errors.New("cache: etcd did not answer")
	// ErrSnapshotUnavailable: an Exact read (or a continue token) names a
	// revision the cache can no longer reconstruct; read etcd instead.
	ErrSnapshotUnavailable = errors.New("cache: snapshot not available")
	// ErrTooOld: a watch starts before the history; the error is a
	// *TooOldError (send a 410 Expired ERROR event).
	ErrTooOld = errors.New("cache: too old resource version")
	// ErrLagging: the watcher fell too far behind and was closed; end the
	// stream, the client re-watches.
	ErrLagging = errors.New("cache: watcher fell behind")
	// ErrClosed: the watch ended because the resource re-lists, was evicted
	// or the cache closed; end the stream, the client re-watches.
	ErrClosed = errors.New("cache: watch closed")
	// ErrFilling: the resource's one initial list (or re-list) did not
	// finish within Config.FillWait (WaitReady). kube-apiserver answers
	// requests to a watch cache that is still initializing with 429
	// "storage is (re)initializing" and Retry-After 1; every waiter shares
	// that one list instead of reading etcd on its own.
	ErrFilling = errors.New("cache: storage is (re)initializing")
)

// NotCachedError says why a resource is not served from the cache.
type NotCachedError struct {
	Resource string
	State    State
	Reason   string
}

func (e *NotCachedError) Error() string {
	return fmt.Sprintf("cache: %s not cached (%s): %s", e.Resource, e.State, e.Reason)
}

// Is reports whether target is ErrNotCached.
func (e *NotCachedError) Is(target error) bool { return target == ErrNotCached }

// TooOldError is the error of a watch from a revision older than the
// history. Message is kube-apiserver's Expired text.
type TooOldError struct {
	RV, Oldest int64
}

func (e *TooOldError) Error() string { return e.Message() }

// Message is the Status message: "too old resource version: RV (Oldest)".
func (e *TooOldError) Message() string {
	return fmt.Sprintf("too old resource version: %d (%d)", e.RV, e.Oldest)
}

// Is reports whether target is ErrTooOld.
func (e *TooOldError) Is(target error) bool { return target == ErrTooOld }

// State is a resource's cache state.
type State int32

const (
	// StateDisabled: caching is off for the resource (--watch-cache=false
	// or size 0 in --watch-cache-sizes).
	StateDisabled State = iota
	// StateFilling: the first paged list is running.
	StateFilling
	// StateReady: the cache serves reads and watches.
	StateReady
	// StateRelisting: the etcd watch broke (compaction, restart); a new
	// list is running.
	StateRelisting
	// StateRefused: the resource did not fit the budget; retried later.
	StateRefused
	// StateEvicted: the resource grew past the budget and was dropped;
	// retried later.
	StateEvicted
	// StateClosed: the cache was closed.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateDisabled:
		return "disabled"
	case StateFilling:
		return "filling"
	case StateReady:
		return "ready"
	case StateRelisting:
		return "relisting"
	case StateRefused:
		return "refused"
	case StateEvicted:
		return "evicted"
	case StateClosed:
		return "closed"
	}
	return "unknown"
}

// Spec identifies a resource to cache.
type Spec struct {
	// Name is "resource[.group]" as in Config.Sizes ("configmaps",
	// "deployments.apps", "widgets.example.com"); it also labels metrics.
	Name string
	// Prefix is the full etcd key prefix ending in "/", e.g.
	// "/registry/configmaps/".
	Prefix string
	// Namespaced says keys are Prefix + namespace + "/" + name.
	Namespaced bool
	// Fields are the field-selector paths besides metadata.name and
	// metadata.namespace whose values are derived for every object
	// ("spec.nodeName", "status.phase", "type").
	Fields []string
}

// Cache is the watch cache of all resources. It is safe for concurrent use.
// Resources are cached lazily: the first Resource call for a prefix starts
// filling it.
type Cache struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	used atomic.Int64 // budget in use
	// watchOpens counts the etcd watches opened (each on a gRPC stream of
	// its own), progressRequests the progress requests sent on them.
	watchOpens, progressRequests *metrics.Counter

	mu        sync.Mutex
	resources map[string]*Resource // by Spec.Prefix
	closed    bool
}

// New validates cfg and returns a Cache. Close it to stop its goroutines.
func New(cfg Config) (*Cache, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cache{
		cfg:       cfg,
		ctx:       ctx,
		cancel:    cancel,
		resources: make(map[string]*Resource),
	}
	cfg.Metrics.GetOrCreateGauge("lazyapi_cache_budget_bytes", func() float64 { return float64(cfg.MemoryBytes) })
	cfg.Metrics.GetOrCreateGauge("lazyapi_cache_used_bytes", func() float64 { return float64(c.used.Load()) })
	c.watchOpens = cfg.Metrics.GetOrCreateCounter("lazyapi_cache_etcd_watches_opened_total")
	c.progressRequests = cfg.Metrics.GetOrCreateCounter("lazyapi_cache_etcd_progress_requests_total")
	return c, nil
}

// Close stops every resource and waits for the cache's goroutines.
// Watchers end with ErrClosed; resources report StateClosed.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	rs := make([]*Resource, 0, len(c.resources))
	for _, r := range c.resources {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	for _, r := range rs {
		r.reset(StateClosed, "cache closed")
	}
	return nil
}

// UsedBytes returns the bytes of the budget in use.
func (c *Cache) UsedBytes() int64 { return c.used.Load() }

// Resource returns the cache of the resource s.Prefix names, starting to
// fill it on the first call. The handle is never nil: a resource that is not
// cached answers its reads with ErrNotCached.
func (c *Cache) Resource(s Spec) *Resource {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.resources[s.Prefix]; r != nil {
		return r
	}
	name := strings.ToLower(s.Name)
	size, ok := c.cfg.Sizes[name]
	if !ok {
		size = c.cfg.DefaultHistory
	}
	r := newResource(c, s, size)
	c.resources[s.Prefix] = r
	switch {
	case c.closed:
		r.setState(StateClosed, "cache closed")
	case c.cfg.Disabled:
		r.setState(StateDisabled, "the cache is disabled (Disabled)")
	case size == 0:
		r.setState(StateDisabled, fmt.Sprintf("its history size is 0 (Sizes[%q])", name))
	case !strings.HasSuffix(s.Prefix, "/"):
		r.setState(StateDisabled, fmt.Sprintf("prefix %q does not end in /", s.Prefix))
	default:
		r.setState(StateFilling, "first list running")
		ctx, cancel := context.WithCancel(c.ctx)
		r.cancel, r.done = cancel, make(chan struct{})
		c.wg.Add(1)
		go r.run(ctx)
	}
	return r
}

// Drop stops caching the resource with this prefix (e.g. its CRD was
// deleted), returns its budget and ends its watchers with ErrClosed. A
// later Resource call starts it afresh.
func (c *Cache) Drop(prefix string) {
	c.mu.Lock()
	r := c.resources[prefix]
	delete(c.resources, prefix)
	c.mu.Unlock()
	if r == nil {
		return
	}
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	r.reset(StateClosed, "dropped")
}

// reserve takes n bytes of the budget, or reports that they do not fit.
func (c *Cache) reserve(n int64) bool {
	if c.used.Add(n) > c.cfg.MemoryBytes {
		c.used.Add(-n)
		return false
	}
	return true
}

func (c *Cache) release(n int64) { c.used.Add(-n) }

// MemoryBytes returns the budget (--watch-cache-memory); 0 when disabled.
func (c *Cache) MemoryBytes() int64 {
	if c.cfg.Disabled {
		return 0
	}
	return c.cfg.MemoryBytes
}

// ReserveBelow takes n bytes of the budget for data derived from the
// cache and kept beside it (proxy's rendered JSON), only if the budget in
// use stays at most limit afterwards, so that such data never takes the
// room the cached resources need; it reports whether it did. Release
// returns the bytes.
func (c *Cache) ReserveBelow(n, limit int64) bool {
	if c.used.Add(n) > min(limit, c.cfg.MemoryBytes) {
		c.used.Add(-n)
		return false
	}
	return true
}

// Release returns n bytes taken by ReserveBelow.
func (c *Cache) Release(n int64) { c.release(n) }

// etcdMoved returns Config.EtcdMoved's answer, or 0 and nil without it.
func (c *Cache) etcdMoved() (uint64, <-chan struct{}) {
	if c.cfg.EtcdMoved == nil {
		return 0, nil
	}
	return c.cfg.EtcdMoved()
}

// metricName returns name{resource="r"[,extra]}.
func metricName(name, resource, extra string) string {
	if extra != "" {
		return fmt.Sprintf("%s{resource=%q,%s}", name, resource, extra)
	}
	return fmt.Sprintf("%s{resource=%q}", name, resource)
}

// ResourceStatus is one resource's line in Cache.Statuses.
type ResourceStatus struct {
	Name, Prefix string
	State        State
	Reason       string
	Bytes        int64 // budget charged
	Objects      int64
	Revision     int64 // the revision the cache reflects (0 unless ready)
	Watchers     int64
}

// Statuses reports every resource the cache was asked for, in no order
// (for logs and a debug endpoint).
func (c *Cache) Statuses() []ResourceStatus {
	c.mu.Lock()
	rs := make([]*Resource, 0, len(c.resources))
	for _, r := range c.resources {
		rs = append(rs, r)
	}
	c.mu.Unlock()
	out := make([]ResourceStatus, 0, len(rs))
	for _, r := range rs {
		st, reason := r.Status()
		out = append(out, ResourceStatus{Name: r.name, Prefix: r.spec.Prefix, State: st, Reason: reason,
			Bytes: r.bytes.Load(), Objects: r.objects.Load(), Revision: r.curRev.Load(), Watchers: r.nwatch.Load()})
	}
	return out
}
