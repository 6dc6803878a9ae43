package cache

import "sort"

// event is one change kept in a resource's history. It shares the entries
// with the tree: cur is the new state (nil for a delete), prev the replaced
// one (nil for a create).
type event struct {
	cur, prev *entry
	rev       int64
	cumStart  int64 // history bytes (value bytes) before this event, for watcher lag
}

// eventOverhead approximates what one history event costs besides the prev
// entry it keeps alive: the struct and its ring slot.
const eventOverhead = 48 + 8

func (ev *event) size() int64 {
	var n int64
	if ev.cur != nil {
		n += int64(ev.cur.valLen)
	}
	if ev.prev != nil {
		n += int64(ev.prev.valLen)
	}
	return n
}

func (ev *event) key() string {
	if ev.cur != nil {
		return ev.cur.key()
	}
	return ev.prev.key()
}

// ring is the event history of one resource: a fixed-capacity ring of the
// latest events in revision order. Events are numbered by a sequence that
// never repeats, so a watcher's cursor is a sequence number.
//
// Invariant: the ring holds every event with rev > startRev that the cache
// applied; a watch or snapshot from revision N can be served iff
// N >= startRev.
type ring struct {
	buf      []*event
	start    int    // index of the oldest event in buf
	n        int    // events held
	base     uint64 // sequence number of the oldest event
	startRev int64
	cumEnd   int64 // history bytes through the newest event
}

// ringBase is the first sequence number of a fresh ring (any value works:
// a watcher's cursor is compared with the ring's base and head only).
const ringBase = 1 << 40

func newRing(capacity int, startRev int64) ring {
	return ring{buf: make([]*event, capacity), startRev: startRev, base: ringBase}
}

// head is the sequence number the next pushed event gets.
func (r *ring) head() uint64 { return r.base + uint64(r.n) }

// push appends ev and returns the event it dropped to make room, or nil.
func (r *ring) push(ev *event) (dropped *event) {
	if len(r.buf) == 0 {
		return ev
	}
	ev.cumStart = r.cumEnd
	r.cumEnd += ev.size()
	if r.n == len(r.buf) {
		dropped = r.popOldest()
	}
	r.buf[(r.start+r.n)%len(r.buf)] = ev
	r.n++
	return dropped
}

// popOldest removes the oldest event; the history then starts at its rev.
func (r *ring) popOldest() *event {
	if r.n == 0 {
		return nil
	}
	ev := r.buf[r.start]
	r.buf[r.start] = nil
	r.start = (r.start + 1) % len(r.buf)
	r.n--
	r.base++
	r.startRev = ev.rev
	return ev
}

// at returns the event with sequence seq. lagged reports that seq was
// dropped already; ok=false without lagged means seq is not written yet.
func (r *ring) at(seq uint64) (ev *event, ok, lagged bool) {
	if seq < r.base {
		return nil, false, true
	}
	if seq >= r.head() {
		return nil, false, false
	}
	return r.buf[(r.start+int(seq-r.base))%len(r.buf)], true, false
}

// firstAfter returns the sequence number of the first event with rev > rev.
func (r *ring) firstAfter(rev int64) uint64 {
	i := sort.Search(r.n, func(i int) bool { return r.buf[(r.start+i)%len(r.buf)].rev > rev })
	return r.base + uint64(i)
}

// oldestRev and newestRev are the revisions of the history's ends (0 when empty).
func (r *ring) oldestRev() int64 {
	if r.n == 0 {
		return 0
	}
	return r.buf[r.start].rev
}

func (r *ring) newestRev() int64 {
	if r.n == 0 {
		return 0
	}
	return r.buf[(r.start+r.n-1)%len(r.buf)].rev
}

// lagBytes is how many history bytes lie between seq and the newest event.
func (r *ring) lagBytes(seq uint64) int64 {
	ev, ok, _ := r.at(seq)
	if !ok {
		return 0
	}
	return r.cumEnd - ev.cumStart
}
