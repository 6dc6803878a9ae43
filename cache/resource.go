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
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Resource is the cache of one resource. It is safe for concurrent use.
//
// One goroutine (run) fills the tree from a paged etcd list at revision R,
// then applies the etcd watch from R+1: it is the only writer of t, ring and
// rev, and writes them holding mu. Readers take mu briefly to cut a snapshot
// or read the ring; they never hold it while a client writes.
type Resource struct {
	c       *Cache
	cancel  context.CancelFunc // stops run; nil when run never started
	done    chan struct{}      // closed when run returns
	spec    Spec
	name    string
	history int // ring capacity in events

	state  atomic.Int32
	reason atomic.Pointer[string]

	mu     sync.RWMutex
	t      *tree         // guarded by mu; nil unless ready
	ring   ring          // guarded by mu
	rev    int64         // guarded by mu: every event <= rev is applied
	notify chan struct{} // guarded by mu: closed and replaced when rev or state changes
	// backfilling: the history before the fill's revision is still
	// arriving (backfill.go); guarded by mu.
	backfilling bool
	watchers    map[*Watcher]struct{} // guarded by mu
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

	hits, misses, fallbacks, lagging, refused, evicted, relists, lateEvents *metrics.Counter
}

func newResource(c *Cache, s Spec, history int) *Resource {
	r := &Resource{c: c, spec: s, name: s.Name, history: history,
		notify: make(chan struct{}), watchers: make(map[*Watcher]struct{})}
	m := c.cfg.Metrics
	n := r.name
	m.GetOrCreateGauge(metricName("lazyapi_cache_bytes", n, ""), func() float64 { return float64(r.bytes.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_objects", n, ""), func() float64 { return float64(r.objects.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_history_oldest_revision", n, ""), func() float64 { return float64(r.oldest.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_history_newest_revision", n, ""), func() float64 { return float64(r.newest.Load()) })
	m.GetOrCreateGauge(metricName("lazyapi_cache_watchers", n, ""), func() float64 { return float64(r.nwatch.Load()) })
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
	r.lateEvents = m.GetOrCreateCounter(metricName("lazyapi_cache_backfill_late_events_total", n, ""))
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

// Revision returns the revision the cache reflects (0 when not ready).
func (r *Resource) Revision() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.t == nil {
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
				log.Warn("resource evicted from the cache: it grew past --watch-cache-memory; served from etcd", zap.String("reason", reason))
			} else {
				r.refused.Inc()
				log.Warn("resource not cached: it does not fit --watch-cache-memory; served from etcd", zap.String("reason", reason))
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
	r.backfilling = false
	r.recent = [recentSnapshots]*Snapshot{}
	r.rev = 0
	for w := range r.watchers {
		w.closeWith(fmt.Errorf("%w: %s %s", ErrClosed, r.name, s))
	}
	clear(r.watchers)
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

// fillAndWatch lists the resource into a new tree, publishes it, and
// applies the watch until it breaks. filled reports that the list worked.
func (r *Resource) fillAndWatch(ctx context.Context) (filled bool, err error) {
	d := r.deriver()
	t, rev, err := r.fill(ctx, d)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	t.snapshot() // the fill's nodes may be shared from now on
	var bf *backfill
	if start := max(rev-r.c.cfg.BackfillRevisions, 0); r.c.cfg.BackfillRevisions > 0 && start < rev {
		bf = newBackfill(start, rev, r.history)
	}
	r.t = t
	r.rev = rev
	r.ring = newRing(r.history, rev)
	r.backfilling = bf != nil
	r.setState(StateReady, fmt.Sprintf("filled at revision %d", rev))
	r.broadcastLocked()
	r.mu.Unlock()
	r.objects.Store(int64(t.n))
	r.curRev.Store(rev)
	r.etcdRev.Store(max(r.etcdRev.Load(), rev))
	r.c.cfg.Logger.Info("resource cached", zap.String("resource", r.name), zap.Int64("revision", rev),
		zap.Int("objects", t.n), zap.Int64("bytes", r.bytes.Load()))

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bfWait time.Time // when a progress first found the backfill incomplete
	from := rev + 1
	if bf != nil {
		from = bf.start + 1
		defer r.endBackfill(nil)
	} else {
		r.filled()
	}
	var (
		moved       <-chan struct{} // closed when the etcd client switches endpoints
		cancelWatch = func() {}
	)
	watch := func() clientv3.WatchChan {
		cancelWatch()
		var gen uint64
		gen, moved = r.c.etcdMoved()
		sctx, scancel := context.WithCancel(watchStreamCtx(wctx, gen))
		cancelWatch = scancel
		return r.c.watcher.Watch(sctx, r.spec.Prefix, clientv3.WithPrefix(), clientv3.WithRev(from),
			clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	}
	wch := watch()
	defer func() { cancelWatch() }()
	if bf != nil {
		// Ask etcd for progress until the backfill ends: etcd notifies
		// only once this watch is synced, i.e. sent everything up to
		// the fill's revision.
		go func() {
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				r.mu.RLock()
				busy := r.backfilling
				r.mu.RUnlock()
				if !busy {
					return
				}
				r.c.requestProgress()
				select {
				case <-wctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	for {
		var wr clientv3.WatchResponse
		select {
		case resp, ok := <-wch:
			if !ok {
				if ctx.Err() != nil {
					return true, ctx.Err()
				}
				return true, errors.New("etcd watch channel closed")
			}
			wr = resp
		case <-moved:
			// The client reads from other endpoints now: follow them
			// from the revision held (a backfill in progress ends here:
			// the history then starts at the fill).
			if bf != nil {
				r.endBackfill(nil)
				bf = nil
			}
			r.mu.RLock()
			from = r.rev + 1
			r.mu.RUnlock()
			r.c.cfg.Logger.Info("etcd endpoints moved: re-opening the watch", zap.String("resource", r.name), zap.Int64("from", from))
			wch = watch()
			continue
		}
		if err := wr.Err(); err != nil {
			if bf != nil && (errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0) {
				// The history before the fill reaches past etcd's
				// compaction: start it there, or not at all (etcd
				// ended the compacted watch).
				if c := wr.CompactRevision; c > 0 && c < rev {
					bf, from, bfWait = newBackfill(c, rev, r.history), c+1, time.Time{}
				} else {
					r.endBackfill(nil)
					bf, from = nil, rev+1
					r.filled()
				}
				wch = watch()
				continue
			}
			if errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0 {
				return true, fmt.Errorf("etcd compacted revision %d: %w", wr.CompactRevision, err)
			}
			return true, fmt.Errorf("etcd watch failed: %w", err)
		}
		if wr.Canceled {
			return true, fmt.Errorf("etcd canceled the watch: %s", wr.CancelReason)
		}
		if wr.Header.Revision > 0 {
			r.etcdRev.Store(max(r.etcdRev.Load(), wr.Header.Revision))
		}
		if bf != nil {
			i := 0
			for ; i < len(wr.Events) && wr.Events[i].Kv.ModRevision <= rev; i++ {
				bf.add(d, t, wr.Events[i])
			}
			done := i < len(wr.Events)
			if !done && wr.IsProgressNotify() && wr.Header.Revision >= rev {
				// Proof only when complete (backfill.go); the tree is
				// still the fill's: nothing after rev was applied.
				if done = bf.complete(t); !done {
					if bfWait.IsZero() {
						bfWait = time.Now()
					} else if time.Since(bfWait) > backfillPatience {
						r.c.cfg.Logger.Warn("the history before the fill did not arrive: it starts at the fill",
							zap.String("resource", r.name), zap.Int64("fillRevision", rev), zap.Int("events", len(bf.events)))
						bf.events = bf.events[:0]
						done = true
					}
				}
			}
			if done {
				r.endBackfill(bf)
				bf = nil
			}
			clear(wr.Events[:i]) // the history holds its copies: drop etcd's
			wr.Events = wr.Events[i:]
			if done {
				r.filled()
			}
		}
		if len(wr.Events) > 0 && wr.Events[0].Kv.ModRevision <= rev {
			n := 1
			for n < len(wr.Events) && wr.Events[n].Kv.ModRevision <= rev {
				n++
			}
			r.lateBackfill(rev, n)
			clear(wr.Events[:n])
			wr.Events = wr.Events[n:]
		}
		if wr.IsProgressNotify() {
			r.progress(wr.Header.Revision)
			continue
		}
		if len(wr.Events) > 0 {
			if err := r.apply(d, wr.Events); err != nil {
				return true, err
			}
		}
	}
}

// filled calls Config.Filled after a complete fill.
func (r *Resource) filled() {
	if f := r.c.cfg.Filled; f != nil {
		f(r.name, r.bytes.Load())
	}
}

// fill reads the resource page by page at one revision into a new tree,
// charging the budget per entry.
func (r *Resource) fill(ctx context.Context, d *deriver) (*tree, int64, error) {
	cli := r.c.cfg.Client
	t := newTree()
	end := clientv3.GetPrefixRangeEnd(r.spec.Prefix)
	key := r.spec.Prefix
	var rev, charged, seenBytes, seen int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(fillPageLimit(r.c.cfg, seen, seenBytes)), clientv3.WithSerializable()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			r.uncharge(charged)
			return nil, 0, fmt.Errorf("cannot list %s: %w", r.spec.Prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			e := d.newEntry(kv.Key, kv.Value, kv.ModRevision)
			if !r.charge(e.cost()) {
				r.uncharge(charged)
				return nil, 0, fmt.Errorf("%w: %s needs more than the %d bytes left of --watch-cache-memory=%d after %d objects (%d bytes)",
					errRefused, r.name, r.c.cfg.MemoryBytes-r.c.used.Load(), r.c.cfg.MemoryBytes, t.n, charged)
			}
			charged += e.cost()
			seenBytes += int64(len(kv.Value))
			seen++
			t.put(e)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return t, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// fillPageLimit returns the number of keys of the next fill range: a small
// first page, then cfg.PageBytes worth of values at the mean size seen so
// far, between 1 and cfg.PageSize.
func fillPageLimit(cfg Config, seen, seenBytes int64) int64 {
	const firstPage = 16
	if seen == 0 {
		return min(firstPage, int64(cfg.PageSize))
	}
	mean := max(seenBytes/seen, 1)
	return max(1, min(int64(cfg.PageBytes)/mean, int64(cfg.PageSize)))
}

// endBackfill puts the history before the fill in place (bf nil: none)
// and wakes the watches waiting for it.
func (r *Resource) endBackfill(bf *backfill) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.backfilling {
		return
	}
	if bf != nil {
		r.finishBackfillLocked(bf)
	}
	r.backfilling = false
	r.broadcastLocked()
}

// waitBackfill waits, at most Config.FillWait, until a watch from rv can
// know whether the history holds rv: while the history before the fill
// is arriving, and rv is before the fill's revision.
func (r *Resource) waitBackfill(ctx context.Context, rv int64) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r.mu.RLock()
		wait, ch := r.backfilling && rv < r.ring.startRev, r.notify
		r.mu.RUnlock()
		if !wait {
			return
		}
		if timer == nil {
			timer = time.NewTimer(r.c.cfg.FillWait)
		}
		select {
		case <-ch:
		case <-timer.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// progress records that etcd sent everything up to rev.
func (r *Resource) progress(rev int64) {
	r.mu.Lock()
	if r.t != nil && rev > r.rev {
		r.rev = rev
		r.broadcastLocked()
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
				return fmt.Errorf("%w: %s holds %d bytes with an empty history and needs %d more of --watch-cache-memory=%d",
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
		r.dropLocked(r.ring.push(ev))
		r.rev = max(r.rev, ch.rev)
	}
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
// that are more than WatcherLagBytes behind.
func (r *Resource) sweepLocked() {
	limit := r.c.cfg.WatcherLagBytes
	for w := range r.watchers {
		seq := w.cursor.Load()
		if seq < r.ring.base || r.ring.lagBytes(seq) > limit {
			r.lagging.Inc()
			w.closeWith(fmt.Errorf("%w: %s watcher is %d events and %d bytes behind (limit %d bytes)",
				ErrLagging, r.name, r.ring.head()-seq, r.ring.lagBytes(seq), limit))
			delete(r.watchers, w)
		}
	}
	r.nwatch.Store(int64(len(r.watchers)))
}
