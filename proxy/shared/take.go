package shared

import (
	"context"
	"time"
)

// The member side of a read: take a chunk, write it, release it.

// take returns m's next chunk (pinned: release it after writing it), or
// end once m took every part.
func (r *Read[C]) take(ctx context.Context, m *member) (c C, end bool, err error) {
	var none C
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.ordered && m.lagged {
			return none, false, ErrLagged
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
				return none, false, ErrLagged
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
			return none, false, ErrLagged // as above
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
func (r *Read[C]) release(m *member, c C) {
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
func (r *Read[C]) waitsLocked(m *member, c *Chunk) bool {
	return m.cursor <= c.seq && m.needs(c.part) && !(r.ordered && m.lagged)
}

// trimLocked drops the window's oldest chunks no member waits for; when
// full, also those only lagged members wait for (the trim rule).
func (r *Read[C]) trimLocked(full bool) {
	now := time.Now()
	for len(r.win.chunks) > 0 {
		x := r.win.chunks[0].chunk()
		pending, stale := false, false
		for m := range r.members {
			if !r.waitsLocked(m, x) {
				continue
			}
			if full && (m.lagged || now.Sub(m.lastTake) >= LagWait) {
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
// within LagWait (or is at the head, waiting for the next chunk).
func (r *Read[C]) activeLocked(now time.Time) bool {
	for m := range r.members {
		if !m.lagged && (m.cursor >= r.win.nextSeq || now.Sub(m.lastTake) < LagWait) {
			return true
		}
	}
	return false
}

// aheadLocked returns how many chunks the read published past the
// fastest member that is not lagged.
func (r *Read[C]) aheadLocked() int64 {
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
