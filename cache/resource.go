package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Resource is the cache of one resource. It is safe for concurrent use.
//
// One goroutine (run) fills the tree from a paged etcd list at revision R
// (fill.go), then applies the etcd watch from R+1 (watchloop.go): it is the
// only writer of t, ring and rev, and writes them holding mu. Readers take
// mu briefly to cut a snapshot or read the ring; they never hold it while a
// client writes.
type Resource struct {
	c       *Cache
	cancel  context.CancelFunc // stops run; nil when run never started
	done    chan struct{}      // closed when run returns
	spec    Spec
	name    string
	history int // ring capacity in events

	state  atomic.Int32
	reason atomic.Pointer[string]

	mu       sync.RWMutex
	t        *tree                 // guarded by mu; nil until filled (Ready once replayed)
	ring     ring                  // guarded by mu
	rev      int64                 // guarded by mu: every event <= rev is applied
	notify   chan struct{}         // guarded by mu: closed and replaced when rev or state changes
	watchers map[*Watcher]struct{} // guarded by mu
	// Dispatch (dispatch.go), guarded by mu: scan holds the watchers
	// that read every change through their cursor, index the others;
	// busy the indexed watchers that may have changes queued.
	scan  map[*Watcher]struct{}
	index watchIndex
	busy  map[*Watcher]struct{}
	// bookmarkWaiters are idle indexed watchers whose bookmark is due,
	// woken by the next change or progress (guarded by bmu, taken after
	// mu; registered under mu's read lock).
	bmu             sync.Mutex
	bookmarkWaiters map[*Watcher]struct{}
	// recent are snapshots handed out lately, newest first, all at
	// revisions >= ring.startRev (guarded by mu).
	recent [recentSnapshots]*Snapshot

	bytes   atomic.Int64 // budget charged by this resource (written by run only)
	objects atomic.Int64
	etcdRev atomic.Int64 // newest etcd revision seen
	oldest  atomic.Int64
	newest  atomic.Int64
	curRev  atomic.Int64
	nwatch  atomic.Int64
	nindex  atomic.Int64 // indexed watchers (dispatch.go)

	// lastRefusal is what the last fill refused for the budget measured
	// (zero when the last fill was not refused); sampleMean the mean size
	// of the values the current fill sampled. Both are used by run only.
	lastRefusal refusal
	sampleMean  int64
	// progressReq asks run for an etcd progress notification soon
	// (requestProgress; coalesced).
	progressReq chan struct{}

	hits, misses, fallbacks, lagging, refused, evicted, relists, replaysIncomplete *metrics.Counter
	// fillRead counts the key and value bytes fills read with ranges and
	// samples; replayed those of the events a fill replays from etcd's
	// watch before the resource is ready; refusedUnread the refusals
	// decided without reading values (beyond a few samples), from the last
	// refusal's measure or from an estimate (tooLargeByEstimate);
	// refusedEstimated those decided from an estimate.
	fillRead, replayed, refusedUnread, refusedEstimated *metrics.Counter
}

// refusal is what a fill refused for the budget measured: the cost of
// the objects it charged, and the mean sampled value size at the time.
// An estimated refusal holds the estimate of the cost of all the objects
// (tooLargeByEstimate) instead of a measure.
type refusal struct {
	objects, bytes, sampleMean int64
	estimated                  bool
}

func newResource(c *Cache, s Spec, history int) *Resource {
	r := &Resource{c: c, spec: s, name: s.Name, history: history,
		notify: make(chan struct{}), watchers: make(map[*Watcher]struct{}), progressReq: make(chan struct{}, 1),
		scan: make(map[*Watcher]struct{}), index: make(watchIndex), busy: make(map[*Watcher]struct{}),
		bookmarkWaiters: make(map[*Watcher]struct{})}
	m := c.cfg.Metrics
	n := r.name
	m.GetOrCreateGauge(metricName("lazyapi_cache_bytes", n, ""), func() float64 { return float64(r.bytes.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_objects", n, ""), func() float64 { return float64(r.objects.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_history_oldest_revision", n, ""), func() float64 { return float64(r.oldest.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_history_newest_revision", n, ""), func() float64 { return float64(r.newest.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_watchers", n, ""), func() float64 { return float64(r.nwatch.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_watchers_indexed", n, ""), func() float64 { return float64(r.nindex.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_state", n, ""), func() float64 { return float64(r.state.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_lag_revisions", n, ""), func() float64 {
		if State(r.state.Load()) != StateReady {
			return 0
		}
		return float64(max(0, r.etcdRev.Load()-r.curRev.Load()))
	})
	r.hits = m.GetOrCreateCounter(metricName("lazyapi_cache_requests_total", n, `result="hit"`))
	r.misses = m.GetOrCreateCounter(metricName("lazyapi_cache_requests_total", n, `result="miss"`))
	r.fallbacks = m.GetOrCreateCounter(metricName("lazyapi_cache_requests_total", n, `result="fallback"`))
	r.lagging = m.GetOrCreateCounter(metricName("lazyapi_cache_watchers_lagging_total", n, ""))
	r.refused = m.GetOrCreateCounter(metricName("lazyapi_cache_not_cached_total", n, `reason="too_large"`))
	r.evicted = m.GetOrCreateCounter(metricName("lazyapi_cache_not_cached_total", n, `reason="evicted"`))
	r.relists = m.GetOrCreateCounter(metricName("lazyapi_cache_relists_total", n, ""))
	r.replaysIncomplete = m.GetOrCreateCounter(metricName("lazyapi_cache_replay_incomplete_total", n, ""))
	r.fillRead = m.GetOrCreateCounter(metricName("lazyapi_cache_fill_read_bytes_total", n, ""))
	r.replayed = m.GetOrCreateCounter(metricName("lazyapi_cache_replay_bytes_total", n, ""))
	r.refusedUnread = m.GetOrCreateCounter(metricName("lazyapi_cache_refused_unread_total", n, ""))
	r.refusedEstimated = m.GetOrCreateCounter(metricName("lazyapi_cache_refused_estimated_total", n, ""))
	return r
}

// Spec returns the resource's spec.
func (r *Resource) Spec() Spec { return r.spec }

// Ready reports whether reads are served from the cache.
func (r *Resource) Ready() bool { return State(r.state.Load()) == StateReady }

// Status returns the state and the reason of the last state change.
func (r *Resource) Status() (State, string) {
	s := State(r.state.Load())
	if p := r.reason.Load(); p != nil {
		return s, *p
	}
	return s, ""
}

// Bytes returns the budget bytes the resource holds.
func (r *Resource) Bytes() int64 { return r.bytes.Load() }

// Objects returns the number of objects cached (0 when not ready).
func (r *Resource) Objects() int64 { return r.objects.Load() }

// Count returns the number of objects cached under prefix (a namespace's
// keys), and false when the resource is not ready. It reads no etcd.
func (r *Resource) Count(prefix string) (int64, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.t == nil || !r.Ready() {
		return 0, false
	}
	return int64(count(r.t.root, prefix, clientv3.GetPrefixRangeEnd(prefix))), true
}

// Revision returns the revision the cache reflects (0 when not ready).
func (r *Resource) Revision() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.t == nil || !r.Ready() {
		return 0
	}
	return r.rev
}

// Filling reports whether the resource's initial list or a re-list is
// running, so that it will be ready soon (WaitReady waits for it).
func (r *Resource) Filling() bool {
	s := State(r.state.Load())
	return s == StateFilling || s == StateRelisting
}

// WaitReady waits until the resource is ready when it is filling or
// re-listing: every request that needs the cache waits for that one list
// rather than reading etcd on its own. It returns nil when the resource
// is ready; at once a *NotCachedError (ErrNotCached) when it will not be
// ready soon (disabled, refused, evicted, closed); after Config.FillWait
// an error wrapping ErrFilling; ctx.Err() when ctx ends first.
func (r *Resource) WaitReady(ctx context.Context) error {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.RLock()
		ch := r.notify
		r.mu.RUnlock()
		if r.Ready() {
			return nil
		}
		if !r.Filling() {
			return r.notCached()
		}
		if timer == nil {
			timer = time.NewTimer(r.c.cfg.FillWait)
		}
		select {
		case <-ch:
		case <-timer.C:
			_, reason := r.Status()
			return fmt.Errorf("%w: %s not ready after %s (%s)", ErrFilling, r.name, r.c.cfg.FillWait, reason)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Resource) setState(s State, reason string) {
	r.reason.Store(&reason)
	r.state.Store(int32(s))
}

func (r *Resource) notCached() error {
	s, reason := r.Status()
	return &NotCachedError{Resource: r.name, State: s, Reason: reason}
}

// broadcastLocked wakes everyone waiting on the resource. r.mu must be held
// for writing.
func (r *Resource) broadcastLocked() {
	close(r.notify)
	r.notify = make(chan struct{})
}

var (
	errRefused = errors.New("does not fit the budget")
	errEvicted = errors.New("grew past the budget")
)

// run fills the resource and follows the etcd watch until ctx ends,
// re-listing after a broken watch and retrying after RetryInterval when the
// resource does not fit.
func (r *Resource) run(ctx context.Context) {
	defer r.c.wg.Done()
	defer close(r.done)
	log := r.c.cfg.Logger.With(zap.String("resource", r.name))
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	refusals := 0 // consecutive: each doubles the wait before the next try
	for ctx.Err() == nil {
		filled, err := r.fillAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if filled {
			backoff = minBackoff
		}
		wait := backoff
		switch {
		case errors.Is(err, errRefused), errors.Is(err, errEvicted):
			reason := err.Error()
			st := StateRefused
			if errors.Is(err, errEvicted) {
				st = StateEvicted
				r.evicted.Inc()
				log.Warn("resource evicted from the cache: it grew past the budget; served from etcd", zap.String("reason", reason), zap.Int64("MemoryBytes", r.c.cfg.MemoryBytes))
			} else {
				r.refused.Inc()
				log.Warn("resource not cached: it does not fit the budget; served from etcd", zap.String("reason", reason), zap.Int64("MemoryBytes", r.c.cfg.MemoryBytes))
			}
			r.reset(st, reason)
			wait = r.c.cfg.RetryInterval << min(refusals, 5)
			refusals++
		default:
			r.relists.Inc()
			log.Info("re-listing resource", zap.Error(err))
			r.reset(StateRelisting, fmt.Sprintf("re-listing after: %v", err))
			backoff = min(2*backoff, maxBackoff)
		}
		if filled && !errors.Is(err, errEvicted) {
			refusals = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// reset drops the resource's data, returns its budget and ends its
// watchers; the state becomes s.
func (r *Resource) reset(s State, reason string) {
	r.mu.Lock()
	r.t = nil
	r.ring = ring{}
	r.recent = [recentSnapshots]*Snapshot{}
	r.rev = 0
	for w := range r.watchers {
		w.closeWith(fmt.Errorf("%w: %s %s", ErrClosed, r.name, s))
		r.removeLocked(w)
	}
	r.nwatch.Store(0)
	r.setState(s, reason)
	r.broadcastLocked()
	r.mu.Unlock()
	r.c.release(r.bytes.Swap(0))
	r.objects.Store(0)
	r.oldest.Store(0)
	r.newest.Store(0)
	r.curRev.Store(0)
}

// charge takes n bytes of the global budget for this resource.
func (r *Resource) charge(n int64) bool {
	if !r.c.reserve(n) {
		return false
	}
	r.bytes.Add(n)
	return true
}

func (r *Resource) uncharge(n int64) {
	r.bytes.Add(-n)
	r.c.release(n)
}

func (r *Resource) deriver() *deriver {
	d := &deriver{schema: r.c.cfg.Schema, prefix: r.spec.Prefix, ns: r.spec.Namespaced, fields: r.spec.Fields}
	if dec := r.c.cfg.Decrypt; dec != nil {
		name, ctx := r.spec.Name, r.c.ctx
		d.decrypt = func(key, value []byte) ([]byte, error) { return dec(ctx, name, key, value) }
		d.hold = r.c.cfg.HoldDecrypted
	}
	return d
}

// progress records that etcd sent everything up to rev.
func (r *Resource) progress(rev int64) {
	r.mu.Lock()
	if r.t != nil && rev > r.rev {
		r.rev = rev
		r.broadcastLocked()
		r.wakeBookmarkWaitersLocked()
		r.curRev.Store(rev)
	}
	r.mu.Unlock()
}

// apply adds one watch response's events to the tree and the history.
// When the budget is short it drops the oldest history first; when the
// history is empty and it is still short, the resource is evicted.
func (r *Resource) apply(d *deriver, evs []*clientv3.Event) error {
	type change struct {
		key string
		e   *entry // nil: delete
		rev int64
	}
	changes := make([]change, len(evs))
	for i, ev := range evs {
		ch := change{key: string(ev.Kv.Key), rev: ev.Kv.ModRevision}
		if ev.Type == mvccpb.PUT {
			ch.e = d.newEntry(ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
		}
		changes[i] = ch
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t == nil {
		return errors.New("BUG: apply without a tree")
	}
	for _, ch := range changes {
		need := int64(eventOverhead)
		if ch.e != nil {
			need += ch.e.cost()
		}
		for !r.charge(need) {
			if r.ring.n == 0 {
				return fmt.Errorf("%w: %s holds %d bytes with an empty history and needs %d more of the budget (MemoryBytes=%d)",
					errEvicted, r.name, r.bytes.Load(), need, r.c.cfg.MemoryBytes)
			}
			r.dropLocked(r.ring.popOldest())
		}
		var ev *event
		if ch.e != nil {
			old := r.t.put(ch.e)
			ev = &event{cur: ch.e, prev: old, rev: ch.rev}
		} else {
			old := r.t.delete(ch.key)
			if old == nil { // not in the cache: nothing to tell anyone
				r.uncharge(need)
				continue
			}
			ev = &event{prev: old, rev: ch.rev}
		}
		dropped := r.ring.push(ev)
		if dropped != ev {
			r.dispatchLocked(ev, r.ring.head()-1)
		}
		r.dropLocked(dropped)
		r.rev = max(r.rev, ch.rev)
	}
	r.wakeBookmarkWaitersLocked()
	r.sweepLocked()
	r.forgetOldLocked()
	r.broadcastLocked()
	r.objects.Store(int64(r.t.n))
	r.curRev.Store(r.rev)
	r.oldest.Store(r.ring.oldestRev())
	r.newest.Store(r.ring.newestRev())
	return nil
}

// dropLocked returns the budget of an event that left the history: its
// overhead and the replaced entry it kept alive.
func (r *Resource) dropLocked(ev *event) {
	if ev == nil {
		return
	}
	n := int64(eventOverhead)
	if ev.prev != nil {
		n += ev.prev.cost()
	}
	r.uncharge(n)
}

// sweepLocked closes the watchers whose next event left the history or
// that are more than WatcherLagBytes behind: those on the scan path, and
// the indexed ones with changes queued (an indexed watcher with none is
// at the history's head).
func (r *Resource) sweepLocked() {
	head := r.ring.head()
	check := func(w *Watcher, seq uint64) {
		limit := r.c.cfg.WatcherLagBytes
		if seq < r.ring.base || r.ring.lagBytes(seq) > limit {
			r.lagging.Inc()
			w.closeWith(fmt.Errorf("%w: %s watcher is %d events and %d bytes behind (limit %d bytes)",
				ErrLagging, r.name, head-seq, r.ring.lagBytes(seq), limit))
			r.removeLocked(w)
		}
	}
	for w := range r.scan {
		check(w, w.cursor.Load())
	}
	for w := range r.busy {
		seq, ok := w.pendingLocked(head)
		if !ok {
			delete(r.busy, w)
			continue
		}
		check(w, seq)
	}
}
