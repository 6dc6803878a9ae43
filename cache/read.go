package cache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadMode says which revision a read may be served at, after
// kube-apiserver's resourceVersion / resourceVersionMatch.
type ReadMode uint8

const (
	// ReadAny (resourceVersion=0): whatever the cache holds.
	ReadAny ReadMode = iota
	// ReadNotOlderThan (resourceVersion=N, NotOlderThan or unset match):
	// wait up to Config.WaitTimeout for the cache to reach N, else
	// ErrTooLarge.
	ReadNotOlderThan
	// ReadExact (resourceVersionMatch=Exact, or a continue token's rv): the
	// state at exactly N, reconstructed from the history, else
	// ErrSnapshotUnavailable (or ErrTooLarge for a future N).
	ReadExact
	// ReadConsistent (no resourceVersion): at least etcd's current
	// revision, confirmed by an etcd progress notification within
	// Config.ConsistentTimeout, else ErrNotCaughtUp.
	ReadConsistent
)

func (m ReadMode) String() string {
	switch m {
	case ReadAny:
		return "Any"
	case ReadNotOlderThan:
		return "NotOlderThan"
	case ReadExact:
		return "Exact"
	case ReadConsistent:
		return "Consistent"
	}
	return "unknown"
}

// ReadOptions selects the revision of a snapshot.
type ReadOptions struct {
	Mode ReadMode
	RV   int64 // for NotOlderThan and Exact
}

// Snapshot is an immutable view of a resource at one revision. It holds no
// lock: iterate it at leisure while the cache goes on. Items and their
// bytes stay valid as long as they are referenced.
type Snapshot struct {
	root   *node
	rev    int64
	fields []string
}

// Item is one object of a snapshot. Key, Value and Attrs borrow the
// cache's immutable bytes: never write to Value.
type Item struct {
	Key   string
	Value []byte // as stored in etcd
	Rev   int64  // mod_revision: the object's resourceVersion
	Attrs Attrs
}

func (s *Snapshot) item(e *entry) Item {
	return Item{Key: e.key(), Value: e.value(), Rev: e.rev, Attrs: Attrs{e: e, fields: s.fields}}
}

// Rev is the revision of the snapshot (the list's resourceVersion).
func (s *Snapshot) Rev() int64 { return s.rev }

// Len is the number of objects in the snapshot.
func (s *Snapshot) Len() int {
	if s.root == nil {
		return 0
	}
	return s.root.size
}

// Get returns the object stored under key.
func (s *Snapshot) Get(key string) (Item, bool) {
	if e := get(s.root, key); e != nil {
		return s.item(e), true
	}
	return Item{}, false
}

// Range yields the objects with from <= key < to in key order (to == "":
// no upper bound). To continue after key k, pass from = k + "\x00".
func (s *Snapshot) Range(from, to string) iter.Seq[Item] {
	return func(yield func(Item) bool) {
		for e := range ascend(s.root, from, to) {
			if !yield(s.item(e)) {
				return
			}
		}
	}
}

// Count returns the number of objects with from <= key < to in O(log n):
// after a page ending at key k, Count(k+"\x00", to) is remainingItemCount.
func (s *Snapshot) Count(from, to string) int { return count(s.root, from, to) }

// Snapshot returns a snapshot of the resource read as o says, or
// ErrNotCached, ErrTooLarge, ErrNotCaughtUp, ErrSnapshotUnavailable.
// ctx bounds the waiting (a fasthttp.RequestCtx will do).
func (r *Resource) Snapshot(ctx context.Context, o ReadOptions) (*Snapshot, error) {
	s, err := r.snapshot(ctx, o)
	switch {
	case err == nil:
		r.hits.Inc()
	case isNotCached(err):
		r.misses.Inc()
	case isFallback(err):
		r.fallbacks.Inc()
	}
	return s, err
}

// Get reads one object at the revision o selects: the item, the snapshot's
// revision, whether it exists.
func (r *Resource) Get(ctx context.Context, key string, o ReadOptions) (Item, int64, bool, error) {
	s, err := r.Snapshot(ctx, o)
	if err != nil {
		return Item{}, 0, false, err
	}
	it, ok := s.Get(key)
	return it, s.rev, ok, nil
}

func (r *Resource) snapshot(ctx context.Context, o ReadOptions) (*Snapshot, error) {
	if !r.Ready() {
		return nil, r.notCached()
	}
	switch o.Mode {
	case ReadAny:
	case ReadNotOlderThan:
		if err := r.waitRev(ctx, o.RV, r.c.cfg.WaitTimeout, ErrTooLarge); err != nil {
			return nil, err
		}
	case ReadConsistent:
		if err := r.catchUp(ctx); err != nil {
			return nil, err
		}
	case ReadExact:
		if err := r.waitRev(ctx, o.RV, r.c.cfg.WaitTimeout, ErrTooLarge); err != nil {
			return nil, err
		}
		return r.snapshotAt(o.RV)
	default:
		return nil, fmt.Errorf("cache: unknown read mode %d", o.Mode)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.t == nil {
		return nil, r.notCached()
	}
	return r.currentSnapshotLocked(), nil
}

// recentSnapshots is how many snapshot roots a resource remembers by
// revision, so that the continue pages of a LIST (Exact reads at the first
// page's revision) cost no reconstruction.
const recentSnapshots = 4

// currentSnapshotLocked cuts a snapshot at r.rev and remembers it. r.mu must
// be held for writing.
func (r *Resource) currentSnapshotLocked() *Snapshot {
	for _, s := range r.recent {
		if s != nil && s.rev == r.rev {
			return s
		}
	}
	s := &Snapshot{root: r.t.snapshot(), rev: r.rev, fields: r.spec.Fields}
	r.rememberLocked(s)
	return s
}

func (r *Resource) rememberLocked(s *Snapshot) {
	copy(r.recent[1:], r.recent[:recentSnapshots-1])
	r.recent[0] = s
}

// forgetOldLocked drops remembered snapshots older than the history: the
// values they alone keep alive are no longer charged to the budget.
func (r *Resource) forgetOldLocked() {
	for i, s := range r.recent {
		if s != nil && s.rev < r.ring.startRev {
			r.recent[i] = nil
		}
	}
}

// catchUp waits until the cache holds etcd's current revision.
func (r *Resource) catchUp(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, r.c.cfg.ConsistentTimeout)
	defer cancel()
	// A linearizable read of a key no one writes returns etcd's current
	// revision in its header.
	resp, err := r.c.cfg.Client.Get(cctx, r.spec.Prefix, clientv3.WithCountOnly())
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %w: cannot read etcd's revision: %v", ErrNotCaughtUp, ErrEtcdUnavailable, err)
	}
	rev := resp.Header.Revision
	r.etcdRev.Store(max(r.etcdRev.Load(), rev))
	return r.waitRev(ctx, rev, r.c.cfg.ConsistentTimeout, ErrNotCaughtUp)
}

// waitRev waits until the cache's revision reaches rev, asking etcd for
// progress notifications meanwhile; after timeout it returns errTimeout.
func (r *Resource) waitRev(ctx context.Context, rev int64, timeout time.Duration, errTimeout error) error {
	var deadline *time.Timer
	var tick *time.Ticker
	defer func() {
		if deadline != nil {
			deadline.Stop()
			tick.Stop()
		}
	}()
	for {
		r.mu.RLock()
		ready, cur, ch := r.t != nil, r.rev, r.notify
		r.mu.RUnlock()
		if !ready {
			return r.notCached()
		}
		if cur >= rev {
			return nil
		}
		if deadline == nil {
			deadline = time.NewTimer(timeout)
			tick = time.NewTicker(100 * time.Millisecond)
			r.requestProgress()
		}
		select {
		case <-ch:
		case <-tick.C:
			r.requestProgress()
		case <-deadline.C:
			return fmt.Errorf("%w: %s is at revision %d, want %d (waited %s)", errTimeout, r.name, cur, rev, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// snapshotAt reconstructs the state at revision rev (<= r.rev) by undoing
// the history events after rev on a private copy-on-write tree.
func (r *Resource) snapshotAt(rev int64) (*Snapshot, error) {
	r.mu.Lock()
	if r.t == nil {
		r.mu.Unlock()
		return nil, r.notCached()
	}
	if rev == r.rev {
		s := r.currentSnapshotLocked()
		r.mu.Unlock()
		return s, nil
	}
	for _, s := range r.recent {
		if s != nil && s.rev == rev && rev >= r.ring.startRev {
			r.mu.Unlock()
			return s, nil
		}
	}
	if rev < r.ring.startRev {
		start := r.ring.startRev
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s history starts after revision %d, want %d", ErrSnapshotUnavailable, r.name, start, rev)
	}
	root := r.t.snapshot()
	var undo []*event
	for seq := r.ring.firstAfter(rev); seq < r.ring.head(); seq++ {
		ev, _, _ := r.ring.at(seq)
		undo = append(undo, ev)
	}
	r.mu.Unlock()
	t := treeFrom(root)
	for i := len(undo) - 1; i >= 0; i-- {
		ev := undo[i]
		if ev.prev != nil {
			t.put(ev.prev)
		} else {
			t.delete(ev.cur.key())
		}
	}
	s := &Snapshot{root: t.snapshot(), rev: rev, fields: r.spec.Fields}
	r.mu.Lock()
	if r.t != nil && rev >= r.ring.startRev {
		r.rememberLocked(s)
	}
	r.mu.Unlock()
	return s, nil
}

func isNotCached(err error) bool { return errors.Is(err, ErrNotCached) }

func isFallback(err error) bool {
	return errors.Is(err, ErrNotCaughtUp) || errors.Is(err, ErrSnapshotUnavailable)
}
