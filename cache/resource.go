package cache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
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

// fillAndWatch lists the resource into a new tree, replays the etcd watch
// up to etcd's current revision (fillForHistory), publishes the tree, and
// applies the watch until it breaks. filled reports that the resource
// became ready.
//
// The watch is alone on a gRPC stream opened for it (openWatch), and etcd
// is asked for progress on that stream only: a progress notification then
// proves that etcd sent the watch every event up to its revision, which
// consistent reads (waitRev) and bookmarks rely on ("the cache holds
// everything up to rev"). On a stream shared by several watches etcd can
// deliver a progress notification to a watch before that watch's catch-up
// events (see openWatch).
func (r *Resource) fillAndWatch(ctx context.Context) (filled bool, err error) {
	d := r.deriver()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, rev, target, err := r.fillForHistory(ctx, d)
	if err != nil {
		return false, err
	}
	r.mu.Lock()
	r.t = t
	r.rev = rev
	r.ring = newRing(r.history, rev)
	r.mu.Unlock()
	r.curRev.Store(rev)
	r.etcdRev.Store(max(r.etcdRev.Load(), target))
	replaying := rev < target
	if !replaying {
		r.ready()
	}

	from := rev + 1
	var (
		moved <-chan struct{} // closed when the etcd client switches endpoints
		ws    *watchStream
	)
	open := func() {
		ws.close()
		_, moved = r.c.etcdMoved()
		ws = r.openWatch(wctx, from)
	}
	open()
	defer func() { ws.close() }()
	// Progress: while the replay runs, every replayProgress (etcd
	// notifies only once the watch is synced, i.e. has been sent
	// everything up to its current revision: the replay's end); once
	// ready, every ProgressInterval when the watch was idle meanwhile, and
	// at once when a reader waits for a revision (requestProgress).
	interval := func() time.Duration {
		if replaying {
			return replayProgress
		}
		return r.c.cfg.ProgressInterval
	}
	tick := time.NewTimer(interval())
	defer tick.Stop()
	idle := true
	var incomplete time.Time // when checkReplay first found the replay incomplete
	for {
		var wr clientv3.WatchResponse
		select {
		case resp, ok := <-ws.ch:
			if !ok {
				if ctx.Err() != nil {
					return !replaying, ctx.Err()
				}
				return !replaying, errors.New("etcd watch channel closed")
			}
			wr = resp
			if len(resp.Events) > 0 {
				idle = false
			}
		case <-tick.C:
			if replaying || idle {
				ws.requestProgress(r)
			}
			idle = true
			tick.Reset(interval())
			continue
		case <-r.progressReq:
			ws.requestProgress(r)
			continue
		case <-moved:
			// The client reads from other endpoints now: follow them
			// from the revision held, on a new stream.
			r.mu.RLock()
			from = r.rev + 1
			r.mu.RUnlock()
			r.c.cfg.Logger.Info("etcd endpoints moved: re-opening the watch", zap.String("resource", r.name), zap.Int64("from", from))
			open()
			continue
		}
		if err := wr.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0 {
				return !replaying, fmt.Errorf("etcd compacted revision %d: %w", wr.CompactRevision, err)
			}
			return !replaying, fmt.Errorf("etcd watch failed: %w", err)
		}
		if wr.Canceled {
			return !replaying, fmt.Errorf("etcd canceled the watch: %s", wr.CancelReason)
		}
		if wr.Header.Revision > 0 {
			r.etcdRev.Store(max(r.etcdRev.Load(), wr.Header.Revision))
		}
		if wr.IsProgressNotify() {
			r.progress(wr.Header.Revision)
		} else if len(wr.Events) > 0 {
			if replaying {
				var n int
				for _, ev := range wr.Events {
					n += len(ev.Kv.Key) + len(ev.Kv.Value)
				}
				r.replayed.Add(n)
			}
			if err := r.apply(d, wr.Events); err != nil {
				if replaying && errors.Is(err, errEvicted) {
					// Not ready yet: it did not fit.
					r.lastRefusal = refusal{objects: int64(r.t.n), bytes: r.bytes.Load(), sampleMean: r.sampleMean}
					err = fmt.Errorf("%w: %s (replaying the history from revision %d to %d)", errRefused, strings.TrimPrefix(err.Error(), errEvicted.Error()+": "), rev, target)
				}
				return !replaying, err
			}
		}
		if !replaying {
			continue
		}
		r.mu.RLock()
		caughtUp := r.rev >= target
		r.mu.RUnlock()
		if caughtUp {
			// Everything up to the revision the fill aimed at is
			// applied (checkReplay): ready; the same watch goes on.
			if replayChecked {
				ok, err := r.checkReplay(ctx, rev, &incomplete)
				if err != nil {
					return false, err
				}
				if !ok {
					continue
				}
			}
			replaying = false
			r.ready()
			tick.Reset(interval())
		}
	}
}

// replayProgress is how often a replay asks etcd for progress.
const replayProgress = 100 * time.Millisecond

// watchStream is an etcd watch of the resource's prefix, alone on a gRPC
// stream of its own: a clientv3.Watcher opened for it and closed with it.
type watchStream struct {
	w      clientv3.Watcher
	ctx    context.Context
	cancel context.CancelFunc
	ch     clientv3.WatchChan
}

// openWatch opens the resource's etcd watch from revision from, with
// progress notifications, on a new gRPC stream (on the etcd client's
// current endpoints).
//
// Why a stream per watch, opened afresh: etcd answers a progress request
// for the whole stream (RequestProgressAll), only when every watch of the
// stream is synced, and sends the notification (watch ID -1) through the
// same channel as the watches' events, after them (etcd-io/etcd#15220,
// fixed by #15237). But its sendLoop (server/etcdserver/api/v3rpc/
// watch.go) selects at random between that channel and the control
// responses: a notification generated for the watches of a stream just
// before a new watch was created there can be sent after the new watch's
// Created response, and clientv3 hands a notification with watch ID -1 to
// every watch it knows, the new one included, whose catch-up events follow.
// Measured on etcd 3.7.3 (a watch re-opened 300 revisions behind while
// progress is requested every millisecond): 19 of 582 notifications came
// before the watch's events on a stream shared with 30 idle watches, 12
// of 546 on the resource's own stream reused across re-opens, 0 of 531
// on a new stream per watch. The cache took such a notification as "the
// cache holds everything up to rev": a consistent LIST could miss writes
// (TestConsistentReadsAcrossReopens; the checkReplay comment saw it end a
// replay early). On a new stream, requested only after Watch returned
// (clientv3 returns once etcd's Created response arrived, and sends a
// resumed watch's create request before any progress request), every
// notification was generated after the watch was created: it comes after
// the watch's events. kube-apiserver has one watch per stream too (an etcd
// client per resource, k8s.io/apiserver storagebackend/factory), and etcd
// notes that progress notifications on a stream of several watches are
// starved by any one unsynced watch (etcd-io/etcd#20242).
func (r *Resource) openWatch(ctx context.Context, from int64) *watchStream {
	ctx, cancel := context.WithCancel(ctx)
	w := newWatcher(r.c.cfg.Client)
	// No WithPrevKV: the tree holds every key's previous state.
	ch := w.Watch(ctx, r.spec.Prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	r.c.watchOpens.Inc()
	return &watchStream{w: w, ctx: ctx, cancel: cancel, ch: ch}
}

// requestProgress asks etcd for a progress notification on the stream.
// Only the resource's goroutine calls it, while the watch is open (for a
// context it has no stream for, clientv3 would open a new, empty one).
// clientv3 takes the request only between reconnections of the stream:
// the wait is bounded, so that the goroutine goes on following the watch
// and endpoint moves while etcd is away.
func (s *watchStream) requestProgress(r *Resource) {
	if s.ctx.Err() != nil {
		return
	}
	r.c.progressRequests.Inc()
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	defer cancel()
	if err := s.w.RequestProgress(ctx); err != nil && s.ctx.Err() == nil {
		r.c.cfg.Logger.Debug("cannot request etcd watch progress", zap.String("resource", r.name), zap.Error(err))
	}
}

// close ends the watch and its stream (nil: nothing to close).
func (s *watchStream) close() {
	if s == nil {
		return
	}
	s.cancel()
	s.w.Close()
}

// requestProgress asks the resource's goroutine for an etcd progress
// notification soon (coalesced).
func (r *Resource) requestProgress() {
	select {
	case r.progressReq <- struct{}{}:
	default:
	}
}

// replayPatience bounds how long a replay that checkReplay found
// incomplete waits for its missing events before the resource re-lists.
const replayPatience = 30 * time.Second

// checkReplay reports whether the replay from start is complete: the tree
// holds etcd's state at its revision, the same keys each at the same
// modification revision (a keys-only range at that revision: no values).
// A progress notification was not proof while watches shared a stream:
// etcd sent one before a watch's catch-up events (TestHostileReconnectStorm,
// about one run in 40; the race is described at openWatch). The watch is
// now alone on a stream opened for it; this check, once per fill, holds
// without that.
// An incomplete replay waits for more events (*since records when it was
// first found incomplete), up to replayPatience, then fails (the resource
// re-lists). Only the resource's goroutine writes the tree, so it reads it
// without the lock.
func (r *Resource) checkReplay(ctx context.Context, start int64, since *time.Time) (bool, error) {
	r.mu.RLock()
	rev, root := r.rev, r.t.root
	r.mu.RUnlock()
	next, stop := iter.Pull(ascend(root, "", ""))
	defer stop()
	end := clientv3.GetPrefixRangeEnd(r.spec.Prefix)
	key := r.spec.Prefix
	complete := true
	for complete {
		resp, err := r.c.cfg.Client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithRev(rev),
			clientv3.WithLimit(int64(r.c.cfg.PageSize)), clientv3.WithSerializable())
		if err != nil {
			return false, fmt.Errorf("cannot check the replay of %s at revision %d: %w", r.spec.Prefix, rev, err)
		}
		for _, kv := range resp.Kvs {
			e, ok := next()
			if !ok || e.key() != string(kv.Key) || e.rev != kv.ModRevision {
				complete = false
				break
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if complete {
		if _, more := next(); !more {
			return true, nil
		}
	}
	r.replaysIncomplete.Inc()
	if since.IsZero() {
		*since = time.Now()
		r.c.cfg.Logger.Warn("the replay of the history before the fill lacks events at a progress notification: waiting for them",
			zap.String("resource", r.name), zap.Int64("from", start), zap.Int64("revision", rev))
	} else if time.Since(*since) > replayPatience {
		return false, fmt.Errorf("the replay of %s from revision %d lacked events at revision %d for %s", r.name, start, rev, replayPatience)
	}
	return false, nil
}

// ready makes the resource ready, after Config.Filled: the fill's
// transient memory is garbage before the first reader starts.
func (r *Resource) ready() {
	r.lastRefusal = refusal{}
	r.filled()
	r.mu.Lock()
	r.t.snapshot() // the tree's nodes may be shared from now on
	n, rev, start := r.t.n, r.rev, r.ring.startRev
	r.setState(StateReady, fmt.Sprintf("filled at revision %d", rev))
	r.broadcastLocked()
	r.mu.Unlock()
	r.objects.Store(int64(n))
	r.c.cfg.Logger.Debug("resource cached", zap.String("resource", r.name), zap.Int64("revision", rev),
		zap.Int64("history_from", start), zap.Int("objects", n), zap.Int64("bytes", r.bytes.Load()))
}

// filled calls Config.Filled after a complete fill.
func (r *Resource) filled() {
	if f := r.c.cfg.Filled; f != nil {
		f(r.name, r.bytes.Load())
	}
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
