package cache

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// History before the fill (backfill).
//
// A fill lists the resource at etcd's current revision R, so a fresh
// history starts at R and a watch from an older resourceVersion would get
// 410 Expired. After a restart of lazyapi every informer re-watches from
// the resourceVersion it saw last, a little before R: with a history that
// starts at R they would all re-list (the storm the cache exists to
// prevent). So the etcd watch that keeps the cache current starts
// Config.BackfillRevisions before R (or at etcd's compaction, whichever is
// later): the events in (start, R] are not applied to the tree (it holds
// R already) but become the history before R, with the same entries and
// budget charges as events applied live. Until the watch has delivered
// them (an event after R, or a progress notification, which etcd sends
// only to a synced watcher), a watch from a revision in (start, R) waits.
//
// A progress notification is not proof on its own: with many watches on
// one etcd watch stream (lazyapi opens one per resource), etcd has been
// seen to deliver a stream-wide progress notification at R before the
// backfill's events (TestHostileReconnectStorm, about one run in 40: the
// events of revisions 2-82 arrived 2.4 s after a progress at 82; etcd
// documents that progress on shared streams is only safe with one watch
// per stream, etcd-io/etcd#20242). So a backfill ends on a progress
// notification only when it is complete against the fill (complete:
// every object of the tree changed after start has its change among the
// events); else it waits for more, up to backfillPatience, then ends
// without a history before R. Events at or before R that still arrive
// after the backfill ended are never applied (the tree holds R already):
// the history before R is then suspect, so it is dropped (late) and the
// watchers that were reading it end, as lagging ones do (their clients
// re-watch and get 410 Expired, then re-list).

// backfillEvent is a change of the history before the fill's revision.
type backfillEvent struct {
	key       string
	cur, prev *entry // as event: cur nil for a delete, prev nil for a create
	rev       int64
}

// backfill collects the events of the history before the fill.
type backfill struct {
	start  int64 // the history holds every event with rev > start
	end    int64 // the fill's revision
	events []backfillEvent
	last   map[string]*entry // newest cur per key among events
	max    int               // most events kept (the ring's capacity)
}

func newBackfill(start, end int64, max int) *backfill {
	return &backfill{start: start, end: end, last: make(map[string]*entry), max: max}
}

// add takes one etcd event with rev <= b.end. An event whose previous state
// etcd did not send (compacted) restarts the history after it. filled is
// the fill's tree: a change whose value is the tree's (the key's last
// change before the fill) shares the tree's entry, as finishBackfillLocked
// would, instead of holding a second copy of the value until then (a
// collection written within the backfill's revisions was held twice while
// its history arrived: 100 Secrets of 1 MiB, 100 MiB more).
func (b *backfill) add(d *deriver, filled *tree, ev *clientv3.Event) {
	kv := ev.Kv
	key := string(kv.Key)
	rev := kv.ModRevision
	var prev *entry
	if e, ok := b.last[key]; ok {
		prev = e
	} else if ev.PrevKv != nil {
		prev = d.newEntry(ev.PrevKv.Key, ev.PrevKv.Value, ev.PrevKv.ModRevision)
	} else if ev.Type == mvccpb.DELETE || kv.Version > 1 {
		// The state before this change is unknown: the history can
		// only start after it.
		b.events = b.events[:0]
		clear(b.last)
		b.start = rev
		return
	}
	var cur *entry
	if ev.Type == mvccpb.PUT {
		if te := get(filled.root, key); te != nil && te.rev == rev {
			cur = te
		} else {
			cur = d.newEntry(kv.Key, kv.Value, rev)
		}
		b.last[key] = cur
	} else {
		b.last[key] = nil
	}
	if prev == nil && ev.Type == mvccpb.DELETE {
		return // deleted before it was seen: nothing to tell anyone
	}
	if len(b.events) == b.max && b.max > 0 {
		b.start = b.events[0].rev
		b.events = b.events[1:]
	}
	b.events = append(b.events, backfillEvent{key: key, cur: cur, prev: prev, rev: rev})
}

// finishLocked makes the collected events the history before r.rev, in
// front of what the ring holds. It gives up (the history keeps starting at
// the fill's revision) when an event's newest state is not the tree's or
// the budget is short. r.mu must be held for writing; no event after the
// fill may have been applied yet.
func (r *Resource) finishBackfillLocked(b *backfill) {
	if len(b.events) == 0 || r.t == nil || r.ring.n != 0 {
		if r.t != nil && r.ring.n == 0 && len(b.events) == 0 && b.start < r.ring.startRev {
			r.ring.startRev = b.start // no changes in (start, R]
		}
		return
	}
	// The newest state of each key must be the tree's entry, shared.
	shared := make(map[*entry]*entry, len(b.last))
	for key, cur := range b.last {
		te := get(r.t.root, key)
		switch {
		case cur == nil && te == nil:
		case cur != nil && te != nil && te.rev == cur.rev:
			shared[cur] = te
		default:
			return
		}
	}
	var charged int64
	ring := newRing(len(r.ring.buf), b.start)
	for i := range b.events {
		be := &b.events[i]
		cur := be.cur
		if te, ok := shared[cur]; ok {
			cur = te
		}
		need := int64(eventOverhead)
		if be.prev != nil {
			need += be.prev.cost()
		}
		if !r.charge(need) {
			r.uncharge(charged)
			return
		}
		charged += need
		if dropped := ring.push(&event{cur: cur, prev: be.prev, rev: be.rev}); dropped != nil {
			r.dropLocked(dropped)
			charged -= eventCharge(dropped)
		}
	}
	// Keep the sequence numbers the ring handed out: the backfilled
	// events come before the ring's head.
	ring.base = r.ring.head() - uint64(ring.n)
	r.ring = ring
	r.oldest.Store(r.ring.oldestRev())
	r.newest.Store(r.ring.newestRev())
}

// eventCharge is what dropLocked returns for ev.
func eventCharge(ev *event) int64 {
	n := int64(eventOverhead)
	if ev.prev != nil {
		n += ev.prev.cost()
	}
	return n
}

// ringBase is the first sequence number of a fresh ring: high, so that a
// backfill can put events in front of the ring's first ones.
const ringBase = 1 << 40

// backfillPatience bounds how long a backfill that a progress notification
// declared done but that is not complete against the fill waits for its
// events before it ends without a history before the fill.
const backfillPatience = 30 * time.Second

// complete reports whether every object of the fill's tree that changed
// after b.start has that change among the events (b.last holds it, at the
// tree's revision). Deletions after start leave nothing in the tree to
// check against; an incomplete tail of only deletions is caught when its
// events arrive late (Resource.lateBackfill).
func (b *backfill) complete(filled *tree) bool {
	for e := range ascend(filled.root, "", "") {
		if e.rev <= b.start {
			continue
		}
		if l, ok := b.last[e.key()]; !ok || l == nil || l.rev != e.rev {
			return false
		}
	}
	return true
}

// lateBackfill handles events at or before the fill's revision rev that
// arrived after the backfill ended: the history before rev missed them,
// so it is dropped, and the watchers whose next event was in it end
// (lagging). The events are not applied: the tree holds rev already.
func (r *Resource) lateBackfill(rev int64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	dropped := 0
	for r.ring.n > 0 && r.ring.oldestRev() <= rev {
		r.dropLocked(r.ring.popOldest())
		dropped++
	}
	r.ring.startRev = max(r.ring.startRev, rev)
	r.oldest.Store(r.ring.oldestRev())
	r.newest.Store(r.ring.newestRev())
	r.sweepLocked()
	r.lateEvents.Add(n)
	r.c.cfg.Logger.Warn("etcd sent history before the fill after the backfill ended: the history now starts at the fill",
		zap.String("resource", r.name), zap.Int64("fillRevision", rev), zap.Int("lateEvents", n), zap.Int("droppedHistory", dropped))
}
