package cache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// EventType is the type of a watch event.
type EventType uint8

// Event types, as in metav1.WatchEvent.
const (
	Added EventType = iota + 1
	Modified
	Deleted
	Bookmark
)

func (t EventType) String() string {
	switch t {
	case Added:
		return "ADDED"
	case Modified:
		return "MODIFIED"
	case Deleted:
		return "DELETED"
	case Bookmark:
		return "BOOKMARK"
	}
	return "UNKNOWN"
}

// Event is one watch event. Key, Value, PrevValue and Attrs borrow the
// cache's immutable bytes.
type Event struct {
	Type EventType
	Key  string
	// Value is the object to send: the new state for ADDED and MODIFIED,
	// the last state for DELETED (also when it left the selector).
	Value []byte
	// PrevValue is the state before the change (nil for a create and for
	// initial events).
	PrevValue []byte
	// Rev is the resourceVersion to patch into the object: the object's
	// mod_revision for initial events, else the revision of the change (for
	// DELETED the deletion's). For BOOKMARK, the revision reached.
	Rev int64
	// InitialEventsEnd marks the BOOKMARK that ends the initial events of a
	// sendInitialEvents watch (annotation k8s.io/initial-events-end).
	InitialEventsEnd bool
	// Attrs of Value.
	Attrs Attrs
	// Initial marks an ADDED event of the initial state (read from a
	// snapshot, not from the history).
	Initial bool
	// Backlog is, for a change read from the history, how many newer
	// events the history held when it was read: 0 when the watcher took
	// the newest event, large when it replays the history. Consumers that
	// share work between watchers (the proxy's frame cache) use it to tell
	// watchers that keep up from ones far behind.
	Backlog int
}

// WatchOptions says where a watch starts and what it delivers.
//
// From a Kubernetes WATCH request:
//
//	sendInitialEvents=true:        Initial, InitialEventsEnd, Mode from rv ("" Consistent, "0" Any, N NotOlderThan+RV)
//	rv unset:                      Initial, Mode ReadConsistent
//	rv=0:                          Initial, Mode ReadAny
//	rv=N:                          RV: N (events after N; *TooOldError when N is before the history)
//
// Without Initial and with RV 0 the watch sends the changes from now on.
type WatchOptions struct {
	// Initial sends the state of a snapshot read with Mode and RV as ADDED
	// events first, then the changes after it. Without Initial, the watch
	// sends the history's events with rev > RV.
	Initial bool
	// InitialEventsEnd sends, after the initial events, a BOOKMARK with
	// InitialEventsEnd set and the snapshot's revision.
	InitialEventsEnd bool
	Mode             ReadMode
	RV               int64
	// From and To limit the keys to [From, To) (a namespace: From =
	// prefix+ns+"/", To = clientv3.GetPrefixRangeEnd(From)); "" means the
	// resource's whole prefix.
	From, To string
	// Filter selects objects (label and field selectors). With a filter,
	// an object that moves into the selection arrives as ADDED and one that
	// moves out as DELETED (with its previous state). It runs on the
	// caller's goroutine in Next.
	Filter func(Attrs) bool
	// Bookmarks sends a BOOKMARK with the current revision when the watcher
	// is idle and the revision advanced, Config.BookmarkInterval after the
	// last bookmark or event it sent.
	Bookmarks bool
	// Index lists exact-match terms of Filter: every object with valid
	// Attrs that Filter passes has Attrs.Field(Path) == Value (an absent
	// field reads as ""; Filter may read the value of an object without
	// valid Attrs itself). The
	// cache then wakes the watcher only for the changes whose new or
	// previous state has the value of one of them (dispatch.go); Filter
	// still decides what is sent. Terms on paths the cache does not derive
	// are ignored.
	Index []FieldTerm
}

// Watcher is one watch on a resource. It reads the resource's history
// (shared by every watcher), through a cursor, or, when indexed
// (dispatch.go), through a queue of the sequence numbers of the changes
// that can concern it; so a slow watcher costs nothing but its queue; one
// whose next event left the history, or that is more than
// Config.WatcherLagBytes behind, is closed with ErrLagging. Next and More
// must be called from one goroutine; Close from any.
type Watcher struct {
	r        *Resource
	o        WatchOptions
	from, to string

	// initial state, owned by the Next goroutine
	snap        *node
	snapRev     int64
	next        string
	buf         []*entry
	bi          int
	initialDone bool

	cursor       atomic.Uint64 // next history sequence to read; read by sweepLocked
	lastRev      int64
	lastBookmark time.Time // of the last bookmark or event sent
	// bmTimer wakes Next when the next bookmark is due; kept between
	// calls (a Go timer that nothing waits on is in no timer heap).
	bmTimer *time.Timer
	// bmPhase is the watcher's offset on the bookmark grid (bookmark).
	bmPhase time.Duration

	// Indexed dispatch (dispatch.go). indexed, idxPath, idxKey, live and
	// wake are set before the watcher is published; slot is guarded by
	// r.mu; pending and pi by r.mu, written under its read lock only by
	// the Next goroutine (popLocked).
	indexed bool
	idxPath string
	idxKey  idxKey
	slot    int      // index in its bucket; -1 once removed
	live    uint64   // history sequence from which changes are queued; before it the cursor reads
	pending []uint64 // sequences of the queued changes, from pi
	pi      int
	wake    chan struct{} // signalled when a change is queued or a bookmark may be due

	once sync.Once
	done chan struct{}
	err  error // set before done is closed
}

// Watch starts a watch. Errors: ErrNotCached (serve the watch from etcd),
// *TooOldError (send 410 Expired), ErrTooLarge, ErrNotCaughtUp.
func (r *Resource) Watch(ctx context.Context, o WatchOptions) (*Watcher, error) {
	w, err := r.watch(ctx, o)
	switch {
	case err == nil:
		r.hits.Inc()
	case isNotCached(err):
		r.misses.Inc()
	case isFallback(err):
		r.fallbacks.Inc()
	}
	return w, err
}

func (r *Resource) watch(ctx context.Context, o WatchOptions) (*Watcher, error) {
	if !r.Ready() {
		return nil, r.notCached()
	}
	w := &Watcher{r: r, o: o, from: o.From, to: o.To, done: make(chan struct{}), lastBookmark: time.Now()}
	if grid := r.c.cfg.BookmarkInterval / 60; grid > 0 {
		w.bmPhase = time.Duration(bookmarkSlot.Add(1)%bookmarkPhases) * (grid / bookmarkPhases)
	}
	if w.from == "" {
		w.from = r.spec.Prefix
		w.to = prefixEnd(r.spec.Prefix)
	}
	if o.Initial {
		switch o.Mode {
		case ReadConsistent:
			if err := r.catchUp(ctx); err != nil {
				return nil, err
			}
		case ReadNotOlderThan, ReadExact:
			if err := r.waitRev(ctx, o.RV, r.c.cfg.WaitTimeout, ErrTooLarge); err != nil {
				return nil, err
			}
		}
	} else if err := r.waitRev(ctx, o.RV, r.c.cfg.WaitTimeout, ErrTooLarge); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t == nil {
		return nil, r.notCached()
	}
	if o.Initial {
		w.snap = r.t.snapshot()
		w.snapRev = r.rev
		w.next = w.from
		w.cursor.Store(r.ring.head())
		w.lastRev = r.rev
	} else if o.RV == 0 {
		// No initial state asked for and no revision: changes from now.
		w.initialDone = true
		w.cursor.Store(r.ring.head())
		w.lastRev = r.rev
	} else {
		if o.RV < r.ring.startRev {
			return nil, &TooOldError{RV: o.RV, Oldest: r.ring.startRev}
		}
		w.initialDone = true
		w.cursor.Store(r.ring.firstAfter(o.RV))
		w.lastRev = o.RV
	}
	w.live = r.ring.head()
	r.addLocked(w)
	return w, nil
}

// Done is closed when the watcher ends (then Next returns its error).
func (w *Watcher) Done() <-chan struct{} { return w.done }

// Close ends the watch and releases it.
func (w *Watcher) Close() {
	w.closeWith(fmt.Errorf("%w: closed by the caller", ErrClosed))
	w.r.mu.Lock()
	w.r.removeLocked(w)
	w.r.mu.Unlock()
}

func (w *Watcher) closeWith(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

func (w *Watcher) closed() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// InitialDone reports whether Next returned the whole initial state (and
// its initial-events-end bookmark when asked for); true for a watch
// without one. Call it from Next's goroutine.
func (w *Watcher) InitialDone() bool { return w.initialDone }

// More reports whether Next would return an event without waiting (use it
// to decide when to flush the response).
func (w *Watcher) More() bool {
	if w.closed() {
		return false
	}
	if !w.initialDone {
		return true
	}
	w.r.mu.RLock()
	defer w.r.mu.RUnlock()
	_, pending := w.pendingLocked(w.r.ring.head())
	return pending
}

// Bookmark returns the revision a BOOKMARK may carry now: the resource's
// revision, when the watcher has taken every event up to it (ok=false while
// events or initial state are pending, or after the watch ended). Call it
// from the Next goroutine.
func (w *Watcher) Bookmark() (rev int64, ok bool) {
	if !w.initialDone || w.closed() {
		return 0, false
	}
	w.r.mu.RLock()
	defer w.r.mu.RUnlock()
	if _, pending := w.pendingLocked(w.r.ring.head()); w.closed() || pending {
		return 0, false
	}
	w.lastRev = max(w.lastRev, w.r.rev)
	return w.r.rev, true
}

// Next returns the next event, waiting for one. It returns ctx.Err() when
// ctx ends, and ErrLagging or ErrClosed (wrapped) when the watch ended.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	r := w.r
	for {
		if w.closed() {
			return Event{}, w.err
		}
		if !w.initialDone {
			if ev, ok := w.nextInitial(); ok {
				return ev, nil
			}
			continue
		}
		r.mu.RLock()
		if w.closed() {
			r.mu.RUnlock()
			continue
		}
		var (
			seq           uint64
			have          = true
			ev            *event
			ok, lagged    bool
			sinceBookmark = time.Since(w.lastBookmark)
			interval      = r.c.cfg.BookmarkInterval
			ch, rev, head = r.notify, r.rev, r.ring.head()
		)
		if w.indexed {
			seq, have = w.popLocked()
			ch = w.wake
			if !have && w.o.Bookmarks && rev <= w.lastRev && sinceBookmark >= interval {
				// Due, with nothing newer to send: the next change or
				// progress wakes it (dispatch.go).
				r.bmu.Lock()
				r.bookmarkWaiters[w] = struct{}{}
				r.bmu.Unlock()
			}
		} else {
			seq = w.cursor.Load()
		}
		if have {
			ev, ok, lagged = r.ring.at(seq)
		}
		r.mu.RUnlock()
		if lagged {
			w.lag()
			continue
		}
		if ok {
			if out, pass := w.take(ev, seq, head); pass {
				return out, nil
			}
			continue
		}
		if ctx.Err() != nil {
			// Nothing ready and the caller does not wait (doneCtx):
			// no timer armed, no select.
			if bm, due, _ := w.bookmark(rev, interval-sinceBookmark, nil); due {
				return bm, nil
			}
			return Event{}, ctx.Err()
		}
		bm, due, wake := w.bookmark(rev, interval-sinceBookmark, &w.bmTimer)
		if due {
			return bm, nil
		}
		select {
		case <-ch:
		case <-wake:
		case <-w.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// take moves the watcher past ev, the history's entry seq (head is the
// history's next sequence), and returns it converted when the watcher's
// filter passes it.
func (w *Watcher) take(ev *event, seq, head uint64) (Event, bool) {
	if !w.indexed {
		w.cursor.Store(seq + 1)
	}
	w.lastRev = ev.rev
	out, pass := w.convert(ev)
	if !pass {
		return Event{}, false
	}
	out.Backlog = int(min(head-seq-1, 1<<30))
	if w.o.Bookmarks {
		// The event carries a revision as a bookmark would: the next
		// bookmark is due an interval after it (a watch that gets
		// events every few seconds, a kubelet's of its Pods or Lease,
		// is sent none).
		w.lastBookmark = time.Now()
	}
	return out, true
}

// lag ends a watcher whose next event left the history (ErrLagging).
func (w *Watcher) lag() {
	w.r.lagging.Inc()
	w.closeWith(fmt.Errorf("%w: %s watcher's next event left the history", ErrLagging, w.r.name))
	w.Close()
}

// bookmark returns a BOOKMARK at rev (due) when the watcher asked for
// bookmarks and one is due: wait, the time until the bookmark interval
// ends, has passed and rev is newer than what the watcher sent. Otherwise
// wake, when not nil, fires when it will be (*timer is created or reset
// for it; timer nil: none is).
func (w *Watcher) bookmark(rev int64, wait time.Duration, timer **time.Timer) (bm Event, due bool, wake <-chan time.Time) {
	if !w.o.Bookmarks {
		return Event{}, false, nil
	}
	switch {
	case rev > w.lastRev && wait <= 0:
		w.lastRev = rev
		w.lastBookmark = time.Now()
		return Event{Type: Bookmark, Rev: rev}, true, nil
	case timer != nil && wait > 0 && (rev > w.lastRev || w.indexed):
		// A watcher on the scan path is woken by every change; an
		// indexed one looks again when the bookmark is due. The time is
		// rounded up to a grid of 1/60 of the interval (a second of the
		// default minute), so that the watchers due in the same second
		// are woken by few timer runs, as kube-apiserver's cacher
		// buckets its watchers' bookmarks by the second; each watcher
		// at its phase of the grid (one of bookmarkPhases), so that
		// their bookmarks are not all written in one instant.
		if grid := w.r.c.cfg.BookmarkInterval / 60; grid > 0 {
			wait = gridWait(time.Now(), wait, grid, w.bmPhase)
		}
		if *timer == nil {
			*timer = time.NewTimer(wait)
		} else {
			(*timer).Reset(wait)
		}
		return Event{}, false, (*timer).C
	}
	return Event{}, false, nil
}

// bookmarkPhases is how many phases of the bookmark grid the watchers are
// spread over, round robin (bookmarkSlot). With one, every watch whose
// bookmark fell due in a second wrote it in the same instant, at the
// second: at 15,000 kubelet-shaped watches opened over 20 s, about 750
// bookmarks at once, each a TLS frame on its own connection, and the
// events of that instant waited 26-44 ms behind them (bench/RESULTS.md
// ## fanout: the kubelet tail from etcd's acknowledgement). Ten phases
// cut the burst tenfold for ten timer runs a grid step.
const bookmarkPhases = 10

var bookmarkSlot atomic.Uint32

// gridWait returns wait rounded up so that now+wait falls phase past a
// multiple of grid (phase < grid): by more than 0 and at most grid.
func gridWait(now time.Time, wait, grid, phase time.Duration) time.Duration {
	due := now.Add(wait - phase)
	return wait + due.Truncate(grid).Add(grid).Sub(due)
}

// nextInitial returns the next initial ADDED event, or the initial-events-end
// bookmark; ok=false when the initial phase is over.
func (w *Watcher) nextInitial() (Event, bool) {
	for {
		if w.bi < len(w.buf) {
			e := w.buf[w.bi]
			w.buf[w.bi] = nil
			w.bi++
			a := Attrs{e: e, fields: w.r.spec.Fields}
			if w.o.Filter != nil && !w.o.Filter(a) {
				continue
			}
			return Event{Type: Added, Key: e.key(), Value: e.value(), Rev: e.rev, Attrs: a, Initial: true}, true
		}
		if w.snap != nil {
			w.buf, w.bi = w.buf[:0], 0
			for e := range ascend(w.snap, w.next, w.to) {
				w.buf = append(w.buf, e)
				if len(w.buf) == 128 {
					break
				}
			}
			if len(w.buf) > 0 {
				w.next = w.buf[len(w.buf)-1].key() + "\x00"
				continue
			}
			w.snap, w.buf = nil, nil
		}
		w.initialDone = true
		if w.o.InitialEventsEnd {
			return Event{Type: Bookmark, Rev: w.snapRev, InitialEventsEnd: true}, true
		}
		return Event{}, false
	}
}

// convert turns a history event into what this watcher sends.
func (w *Watcher) convert(ev *event) (Event, bool) {
	key := ev.key()
	if key < w.from || (w.to != "" && key >= w.to) {
		return Event{}, false
	}
	fields := w.r.spec.Fields
	curPass, oldPass := ev.cur != nil, ev.prev != nil
	if f := w.o.Filter; f != nil {
		curPass = curPass && f(Attrs{e: ev.cur, fields: fields})
		oldPass = oldPass && f(Attrs{e: ev.prev, fields: fields})
	}
	out := Event{Key: key, Rev: ev.rev}
	if ev.prev != nil {
		out.PrevValue = ev.prev.value()
	}
	switch {
	case curPass && !oldPass:
		out.Type, out.Value, out.Attrs = Added, ev.cur.value(), Attrs{e: ev.cur, fields: fields}
	case curPass && oldPass:
		out.Type, out.Value, out.Attrs = Modified, ev.cur.value(), Attrs{e: ev.cur, fields: fields}
	case oldPass:
		out.Type, out.Value, out.Attrs = Deleted, ev.prev.value(), Attrs{e: ev.prev, fields: fields}
	default:
		return Event{}, false
	}
	return out, true
}

func prefixEnd(prefix string) string {
	b := []byte(prefix)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}
