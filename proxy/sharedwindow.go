package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Shared reads (sharedscan.go, sharedlist.go): one read of etcd whose
// chunks many requests (its members) write to their connections.
//
// One mechanism serves both: a registry of the reads members may join
// (sharedReads), and a read (sharedRead) with its window, the chunks it
// published, in order, that its members may still take. A chunk is held
// (counted in the read's admission) while it is in the window or a member
// writes it (a member pins the one chunk it writes). A chunk is one part
// of the answer; a read is ordered or circular:
//
//   - ordered (a shared LIST): every member writes every part, in order,
//     from the first; each chunk is a new part. A member that did not take
//     a chunk that left the window cannot be served: it is ended.
//   - circular (a shared scan): a member writes every part once, in any
//     order; a chunk is a part published again for members that missed
//     it. A member that did not take a chunk that left the window gets it
//     on a later cycle.
//
// The trim rule (trimLocked): the oldest chunk leaves the window once no
// member waits for it; when the window is full, also when the members
// that wait for it took nothing for scanLagWait (lagged): those members
// are marked lagged and not waited for again until they catch up (an
// ordered read's never do). An ordered read drops no chunk for lagged
// members while none is active: a lone slow client is served at its pace,
// as an unshared LIST, until --write-timeout.

// sharedChunk is one published chunk of a shared read. A read's chunk
// type embeds it (windowChunk).
type sharedChunk struct {
	seq      int64 // order of publication in its window
	part     int   // which part of the answer it is
	data     []byte
	readers  int  // members writing it
	inWindow bool // in the window (else held only by its readers)
}

func (c *sharedChunk) chunk() *sharedChunk { return c }

// windowChunk is a chunk type of a window: a pointer to a struct that
// embeds sharedChunk.
type windowChunk interface{ chunk() *sharedChunk }

// chunkWindow is a shared read's window and its signals. It is not safe
// for concurrent use: the read's group mutex guards it, and the methods
// ending in Locked expect it held.
type chunkWindow[C windowChunk] struct {
	chunks   []C   // oldest first
	nextSeq  int64 // the seq of the next chunk published
	held     int64 // bytes of the chunks in the window or being written
	limit    int64 // held bytes past which the window is full
	overhead int64 // bytes counted for a chunk beside its data's capacity
	total    *atomic.Int64
	changed  chan struct{} // closed and replaced: a chunk was published, or the read ended
	wake     chan struct{} // closed and replaced: a member took or wrote a chunk, joined or left
}

// newChunkWindow returns an empty window full at limit bytes, whose held
// bytes are also added to total (its reads' gauge).
func newChunkWindow[C windowChunk](limit, overhead int64, total *atomic.Int64) chunkWindow[C] {
	return chunkWindow[C]{limit: limit, overhead: overhead, total: total,
		changed: make(chan struct{}), wake: make(chan struct{})}
}

func (w *chunkWindow[C]) size(c *sharedChunk) int64 { return int64(cap(c.data)) + w.overhead }

func (w *chunkWindow[C]) addHeld(n int64) {
	w.held += n
	w.total.Add(n)
}

// pushLocked publishes c: the next seq, in the window, held.
func (w *chunkWindow[C]) pushLocked(c C) {
	b := c.chunk()
	b.seq = w.nextSeq
	w.nextSeq++
	b.inWindow = true
	w.chunks = append(w.chunks, c)
	w.addHeld(w.size(b))
}

// popLocked drops the oldest chunk from the window; a member writing it
// holds it until it releases it.
func (w *chunkWindow[C]) popLocked() {
	x := w.chunks[0]
	var none C
	w.chunks[0] = none
	w.chunks = w.chunks[1:]
	w.leftLocked(x.chunk())
}

// clearLocked drops every chunk from the window.
func (w *chunkWindow[C]) clearLocked() {
	for _, x := range w.chunks {
		w.leftLocked(x.chunk())
	}
	w.chunks = nil
}

func (w *chunkWindow[C]) leftLocked(c *sharedChunk) {
	c.inWindow = false
	if c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// releaseLocked unpins a chunk a member took (and wrote).
func (w *chunkWindow[C]) releaseLocked(c *sharedChunk) {
	c.readers--
	if !c.inWindow && c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// roomLocked reports whether the window has room for a chunk once trim
// dropped the chunks no member waits for (trim(false)) and, when that
// leaves it full, those only lagging members wait for (trim(true)).
func (w *chunkWindow[C]) roomLocked(trim func(full bool)) bool {
	trim(false)
	if w.held < w.limit {
		return true
	}
	trim(true)
	return w.held < w.limit
}

// broadcastLocked wakes the members waiting for a chunk.
func (w *chunkWindow[C]) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// wakeLocked wakes the reader waiting for room or for members (a member
// took or wrote a chunk, joined or left). Members are not woken: hundreds
// of them would contend for the group's mutex after every write.
func (w *chunkWindow[C]) wakeLocked() {
	close(w.wake)
	w.wake = make(chan struct{})
}

// waitChangeLocked waits, mu unlocked, until a chunk is published or the
// read ends (broadcastLocked); ctx's error if ctx ends first.
func (w *chunkWindow[C]) waitChangeLocked(mu *sync.Mutex, ctx context.Context) error {
	ch := w.changed
	mu.Unlock()
	select {
	case <-ch:
		mu.Lock()
		return nil
	case <-ctx.Done():
		mu.Lock()
		return ctx.Err()
	}
}

// waitWakeLocked waits, mu unlocked, for a wakeLocked, d or the end of
// ctx; false when ctx ended.
func (w *chunkWindow[C]) waitWakeLocked(mu *sync.Mutex, ctx context.Context, d time.Duration) bool {
	ch := w.wake
	mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	mu.Lock()
	return ctx.Err() == nil
}

// sharedReads is a server's registry of one kind of shared read: the
// reads requests may still join, by key, and their metrics.
type sharedReads[K comparable, G comparable] struct {
	mu sync.Mutex
	m  map[K]G

	reads, joins, chunks, lagged *metrics.Counter
	held                         atomic.Int64 // the reads' held bytes
}

// newSharedReads returns an empty registry whose metrics are named reads,
// joins, chunks and lagged (counters) and held (the gauge of held bytes).
func newSharedReads[K comparable, G comparable](ms *metrics.Set, reads, joins, chunks, lagged, held string) *sharedReads[K, G] {
	r := &sharedReads[K, G]{
		m:      make(map[K]G),
		reads:  ms.GetOrCreateCounter(reads),
		joins:  ms.GetOrCreateCounter(joins),
		chunks: ms.GetOrCreateCounter(chunks),
		lagged: ms.GetOrCreateCounter(lagged),
	}
	ms.GetOrCreateGauge(held, func() float64 { return float64(r.held.Load()) })
	return r
}

// startLocked registers g, a new read of key with its first member; r.mu
// is held.
func (r *sharedReads[K, G]) startLocked(key K, g G) {
	r.m[key] = g
	r.reads.Inc()
	r.joins.Inc()
}

// forget removes g, when it is still the read of key, from the registry.
func (r *sharedReads[K, G]) forget(key K, g G) {
	r.mu.Lock()
	if r.m[key] == g {
		delete(r.m, key)
	}
	r.mu.Unlock()
}

// sharedMember is one member of a shared read.
type sharedMember struct {
	cursor   int64 // the seq of the next chunk it may take
	lastTake time.Time
	// lagged: a chunk it needed left the window (see the trim rule).
	lagged bool
	have   []bool // circular: the parts it took, by part
	count  int    // the parts it took
	once   sync.Once
}

func (m *sharedMember) needs(part int) bool { return part >= len(m.have) || !m.have[part] }

// memberOf is a member's handle on its read, of type G (which embeds
// sharedRead[C]).
type memberOf[C windowChunk, G any] struct {
	sharedMember
	read *sharedRead[C]
	g    G
}

// take returns the member's next chunk (release it after writing it), or
// end once it took every part.
func (m *memberOf[C, G]) take(ctx context.Context) (C, bool, error) {
	return m.read.take(ctx, &m.sharedMember)
}

// release unpins a chunk the member wrote.
func (m *memberOf[C, G]) release(c C) { m.read.release(&m.sharedMember, c) }

// leave removes the member from its read (idempotent).
func (m *memberOf[C, G]) leave() { m.read.leave(&m.sharedMember) }

// addMember adds a member to read, of type G g; locked says whether the
// read's mutex is held.
func addMember[C windowChunk, G any](read *sharedRead[C], g G, locked bool) *memberOf[C, G] {
	m := &memberOf[C, G]{read: read, g: g}
	if !locked {
		read.mu.Lock()
		defer read.mu.Unlock()
	}
	read.addLocked(&m.sharedMember)
	return m
}

// sharedRead is one shared read: its window and its members. The
// read's own type embeds it; mu guards it and the fields of the read that
// say so.
type sharedRead[C windowChunk] struct {
	mu      sync.Mutex
	win     chunkWindow[C]
	members map[*sharedMember]struct{}
	ordered bool
	closed  bool // no more joins
	// parts is the number of parts published; complete, every part is.
	parts    int
	complete bool
	// err ends the read early: members without every part end with it.
	err error

	lagged *metrics.Counter // ordered: members ended; circular: chunks dropped for lagging members
	forget func()           // removes the read from its registry
	ctx    context.Context  // the read's: the last member out cancels it
	cancel context.CancelFunc
}

// init prepares an empty read whose window is full at limit bytes.
func (r *sharedRead[C]) init(ordered bool, limit, overhead int64, held *atomic.Int64, lagged *metrics.Counter,
	base context.Context, forget func()) {
	r.win = newChunkWindow[C](limit, overhead, held)
	r.members = make(map[*sharedMember]struct{})
	r.ordered, r.lagged, r.forget = ordered, lagged, forget
	r.ctx, r.cancel = context.WithCancel(base)
}

// addLocked adds m, which takes the chunks from the window's oldest on.
func (r *sharedRead[C]) addLocked(m *sharedMember) {
	m.cursor, m.lastTake = r.win.nextSeq, time.Now()
	if len(r.win.chunks) > 0 {
		m.cursor = r.win.chunks[0].chunk().seq
	}
	r.members[m] = struct{}{}
	r.win.wakeLocked()
}

// leave removes m (idempotent); the last one out closes the read and
// cancels its context. An ordered read's window is cleared then; a
// circular read's when it has stopped (else its reader does, as it ends).
func (r *sharedRead[C]) leave(m *sharedMember) {
	m.once.Do(func() {
		r.mu.Lock()
		delete(r.members, m)
		last := len(r.members) == 0
		if last {
			r.closed = true
			if r.ordered || r.err != nil {
				r.win.clearLocked()
			}
		}
		r.win.wakeLocked()
		r.mu.Unlock()
		if last {
			r.forget()
			r.cancel()
		}
	})
}

// take returns m's next chunk (pinned: release it after writing it), or
// end once m took every part.
func (r *sharedRead[C]) take(ctx context.Context, m *sharedMember) (c C, end bool, err error) {
	var none C
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.ordered && m.lagged {
			return none, false, errListLagged
		}
		if r.complete && m.count == r.parts {
			return none, true, nil
		}
		for _, x := range r.win.chunks {
			b := x.chunk()
			if b.seq < m.cursor || !m.needs(b.part) {
				continue
			}
			if r.ordered && b.seq != m.cursor {
				// Never expected: a member's chunk leaves only when
				// it is marked lagged.
				return none, false, errListLagged
			}
			b.readers++
			m.cursor = b.seq + 1
			// Counted as had now: a circular read must not publish it
			// again while it is written (a failed write ends the
			// member).
			if !r.ordered {
				for len(m.have) <= b.part {
					m.have = append(m.have, false)
				}
				m.have[b.part] = true
			}
			m.count++
			m.lastTake = time.Now()
			if m.lagged && b.seq >= r.win.nextSeq-2 {
				m.lagged = false
			}
			return x, false, nil
		}
		if r.ordered && m.cursor < r.win.nextSeq {
			return none, false, errListLagged // as above
		}
		m.cursor = r.win.nextSeq
		m.lagged = false // at the head: caught up
		if r.err != nil {
			return none, false, r.err
		}
		if err := r.win.waitChangeLocked(&r.mu, ctx); err != nil {
			return none, false, err
		}
	}
}

// release unpins a chunk m wrote.
func (r *sharedRead[C]) release(m *sharedMember, c C) {
	r.mu.Lock()
	r.win.releaseLocked(c.chunk())
	m.lastTake = time.Now()
	if r.ordered {
		r.trimLocked(false)
	}
	r.win.wakeLocked()
	r.mu.Unlock()
}

// waitsLocked reports whether m waits for chunk c: it has not passed it,
// needs its part and, in an ordered read, is not lagged (ended).
func (r *sharedRead[C]) waitsLocked(m *sharedMember, c *sharedChunk) bool {
	return m.cursor <= c.seq && m.needs(c.part) && !(r.ordered && m.lagged)
}

// trimLocked drops the window's oldest chunks no member waits for; when
// full, also those only lagged members wait for (the trim rule).
func (r *sharedRead[C]) trimLocked(full bool) {
	now := time.Now()
	for len(r.win.chunks) > 0 {
		x := r.win.chunks[0].chunk()
		pending, stale := false, false
		for m := range r.members {
			if !r.waitsLocked(m, x) {
				continue
			}
			if full && (m.lagged || now.Sub(m.lastTake) >= scanLagWait) {
				stale = true
				continue
			}
			pending = true
			break
		}
		if pending || (stale && r.ordered && !r.activeLocked(now)) {
			return
		}
		if stale {
			for m := range r.members {
				if r.waitsLocked(m, x) {
					if r.ordered {
						r.lagged.Inc()
					}
					m.lagged = true
				}
			}
			if r.ordered {
				r.win.broadcastLocked() // the ended members waiting to take
			} else {
				r.lagged.Inc()
			}
		}
		r.win.popLocked()
	}
}

// activeLocked reports whether a member that is not lagged took a chunk
// within scanLagWait (or is at the head, waiting for the next chunk).
func (r *sharedRead[C]) activeLocked(now time.Time) bool {
	for m := range r.members {
		if !m.lagged && (m.cursor >= r.win.nextSeq || now.Sub(m.lastTake) < scanLagWait) {
			return true
		}
	}
	return false
}

// aheadLocked returns how many chunks the read published past the
// fastest member that is not lagged.
func (r *sharedRead[C]) aheadLocked() int64 {
	var fastest int64 = -1
	for m := range r.members {
		if !m.lagged {
			fastest = max(fastest, m.cursor)
		}
	}
	if fastest < 0 {
		return 0 // none: the read ends with the members
	}
	return r.win.nextSeq - fastest
}

// overLocked reports whether the read is over for its reader: stopped,
// no member left, or its context ended.
func (r *sharedRead[C]) overLocked() bool {
	return r.err != nil || len(r.members) == 0 || r.ctx.Err() != nil
}

// waitRoom waits until the window has room for a chunk; false when the
// read is over. An ordered read also waits until it is fewer than two
// chunks ahead of its fastest member, as an unshared LIST reads ahead of
// its writer (two pages): a read whose clients left or stall does not read
// on into its window.
func (r *sharedRead[C]) waitRoom() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.overLocked() {
			return false
		}
		if r.ordered {
			r.trimLocked(false)
		}
		if (!r.ordered || r.aheadLocked() < 2) && r.win.roomLocked(r.trimLocked) {
			return true
		}
		if !r.win.waitWakeLocked(&r.mu, r.ctx, scanLagWait/4) {
			return false
		}
	}
}

// pushLocked publishes c, a new part when newPart (its part is then the
// next); false when the read is over (c is dropped).
func (r *sharedRead[C]) pushLocked(c C, newPart bool) bool {
	if r.err != nil || len(r.members) == 0 {
		return false
	}
	if newPart {
		c.chunk().part = r.parts
		r.parts++
	}
	r.win.pushLocked(c)
	r.win.broadcastLocked()
	return true
}

// end ends the read's chunks: err nil, every part is published; else the
// members without every part end with err. No member joins after.
func (r *sharedRead[C]) end(err error) {
	r.mu.Lock()
	r.closed = true
	if err != nil {
		r.err = err
	} else {
		r.complete = true
	}
	r.win.broadcastLocked()
	r.win.wakeLocked()
	r.mu.Unlock()
	r.forget()
}
