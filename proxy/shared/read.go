package shared

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// LagWait is how long a full window waits for a member to take its
// oldest chunk before dropping it for that member (the trim rule).
const LagWait = 2 * time.Second

// ErrLagged ends a member of an ordered read that fell out of its
// window.
var ErrLagged = errors.New("shared list: the client fell behind the shared read")

// member is one member of a shared read.
type member struct {
	cursor   int64 // the seq of the next chunk it may take
	lastTake time.Time
	// lagged: a chunk it needed left the window (see the trim rule).
	lagged bool
	have   []bool // circular: the parts it took, by part
	count  int    // the parts it took
	once   sync.Once
}

func (m *member) needs(part int) bool { return part >= len(m.have) || !m.have[part] }

// Member is a member's handle on its read, of type G (which embeds
// Read[C]). It is safe for concurrent use.
type Member[C Chunked, G any] struct {
	member
	read *Read[C]
	g    G
}

// Group returns the read the member belongs to.
func (m *Member[C, G]) Group() G { return m.g }

// Take returns the member's next chunk (release it after writing it), or
// end once it took every part.
func (m *Member[C, G]) Take(ctx context.Context) (C, bool, error) {
	return m.read.take(ctx, &m.member)
}

// Release unpins a chunk the member wrote.
func (m *Member[C, G]) Release(c C) { m.read.release(&m.member, c) }

// Leave removes the member from its read (idempotent); the last one out
// ends the read's context.
func (m *Member[C, G]) Leave() { m.read.leave(&m.member) }

// AddMember adds a member to read, the Read of g; locked says whether
// the read's mutex is held. The member takes the chunks from the
// window's oldest on.
func AddMember[C Chunked, G any](read *Read[C], g G, locked bool) *Member[C, G] {
	m := &Member[C, G]{read: read, g: g}
	if !locked {
		read.mu.Lock()
		defer read.mu.Unlock()
	}
	read.addLocked(&m.member)
	return m
}

// Read is one shared read: its window and its members. The read's own
// type embeds it and prepares it with Start; its mutex (Lock) guards it
// and the fields of the read's type that say so. The methods ending in
// Locked expect the mutex held.
type Read[C Chunked] struct {
	mu      sync.Mutex
	win     window[C]
	members map[*member]struct{}
	ordered bool
	closed  bool // no more joins
	// parts is the number of parts published; complete, every part is.
	parts    int
	complete bool
	// err ends the read early: members without every part end with it.
	err error

	lagged *metrics.Counter // ordered: members ended; circular: chunks dropped for lagging members
	chunks *metrics.Counter // the registry's chunks published
	forget func()           // removes the read from its registry
	ctx    context.Context  // the read's: the last member out cancels it
	cancel context.CancelFunc
}

// Lock locks the read.
func (r *Read[C]) Lock() { r.mu.Lock() }

// Unlock unlocks the read.
func (r *Read[C]) Unlock() { r.mu.Unlock() }

// Context is the read's context: it ends when the last member leaves or
// Cancel is called.
func (r *Read[C]) Context() context.Context { return r.ctx }

// Cancel ends the read's context.
func (r *Read[C]) Cancel() { r.cancel() }

// SetLimit sets the held bytes past which the window is full.
func (r *Read[C]) SetLimit(limit int64) {
	r.mu.Lock()
	r.win.limit = limit
	r.mu.Unlock()
}

// Limit returns the held bytes past which the window is full.
func (r *Read[C]) Limit() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.win.limit
}

// Members returns the number of members.
func (r *Read[C]) Members() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.members)
}

// OpenLocked reports whether members may still join: the read is neither
// closed nor ended early.
func (r *Read[C]) OpenLocked() bool { return !r.closed && r.err == nil }

// CloseLocked lets no more members join.
func (r *Read[C]) CloseLocked() { r.closed = true }

// FromStartLocked reports whether a member joining now can take every
// part from the first: the read is open, has fewer than maxMembers
// members, and no chunk has left its window.
func (r *Read[C]) FromStartLocked(maxMembers int) bool {
	return r.OpenLocked() && len(r.members) < maxMembers &&
		(len(r.win.chunks) == 0 || r.win.chunks[0].chunk().seq == 0) && r.win.nextSeq == int64(len(r.win.chunks))
}

// addLocked adds m, which takes the chunks from the window's oldest on.
func (r *Read[C]) addLocked(m *member) {
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
func (r *Read[C]) leave(m *member) {
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
