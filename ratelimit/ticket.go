package ratelimit

import (
	"fmt"

	"go.uber.org/zap"
)

// Ticket is an admitted request's reservation. Release it exactly once on
// every path, best with defer right after a successful Admit. The zero Ticket
// releases nothing. A Ticket is not safe for concurrent use and must not be
// copied after Admit returns it (a copy would release twice).
type Ticket struct {
	l        *Limiter
	client   string
	class    string
	cls      *class // nil until the class is tracked
	raw      int64
	reserved int64
	used     int64
	kind     Kind
	drained  bool // Drain: the seat is free, the bytes are held until Release
	exempt   bool // Request.Exempt: not in its client's holding
}

// Reserved returns the bytes reserved for the request.
func (t *Ticket) Reserved() int64 { return t.reserved }

// Use records n bytes as used if it is more than recorded so far; Release
// reports the largest of its argument and what Use recorded. It lets a
// handler report its peak as it goes and `defer t.Release(0)`.
func (t *Ticket) Use(n int64) {
	if n > t.used {
		t.used = n
	}
}

// Resize sets the request's reservation to n bytes (n < 0 counts as 0):
// a watch whose initial events are written keeps what an idle watch holds,
// and charges the frames queued for it while they are queued. Growing
// never waits and never fails: it records memory the request holds
// already, so the kind's bytes may pass their budget until it shrinks
// again (new requests of the kind wait meanwhile). Shrinking admits queued
// requests that now fit. Resize after Release does nothing.
func (t *Ticket) Resize(n int64) {
	l := t.l
	n = max(n, 0)
	if l == nil || n == t.reserved {
		return
	}
	l.mu.Lock()
	t.resizeLocked(n)
	l.mu.Unlock()
}

// resizeLocked is Resize under l.mu.
func (t *Ticket) resizeLocked(n int64) {
	l := t.l
	delta := n - t.reserved
	*l.poolLocked(t.kind) += delta
	if t.kind == Bulk {
		l.bulkRes += delta
	}
	if h := l.holding[t.client]; h != nil && !t.exempt {
		h.bytes[t.kind] += delta
	}
	t.reserved = n
	if delta < 0 && l.queued > 0 {
		l.dispatchLocked()
	}
}

// Grow sets a watch's reservation to n bytes when that is no more than
// it holds, or when the growth fits as a new watch of its client's would
// (within the watch budget; in its last eighth only for a client below its
// share; an exempt watch within the budget), and reports whether it did.
// Unlike Resize it records no memory held already: it is asked before
// the memory is taken (an etcd-served watch's queue of events, etcdFeed
// in package proxy), which is refused when Grow is. A ticket of another
// kind grows within its kind's budget. Grow after Release reports false.
func (t *Ticket) Grow(n int64) bool {
	l := t.l
	if l == nil {
		return false
	}
	n = max(n, 0)
	delta := n - t.reserved
	l.mu.Lock()
	defer l.mu.Unlock()
	fits := true
	switch {
	case delta <= 0:
	case t.kind == Watch && t.exempt:
		fits = l.watchRes <= l.cfg.MaxWatchBytes-delta
	case t.kind == Watch:
		fits = l.watchFitsLocked(t.client, delta)
	case t.kind == Bulk:
		fits = l.bulkRes <= l.bulkBudget-delta && l.reserved <= l.cfg.MaxInflightBytes-delta
	default:
		fits = l.reserved <= l.cfg.MaxInflightBytes-delta
	}
	if fits && delta != 0 {
		t.resizeLocked(n)
	}
	return fits
}

// Release returns the reservation and reports used, the bytes the request
// really held at its peak (0 = unknown, no correction), which moves the
// class's correction ratio. Release is idempotent on the same Ticket.
//
// Note that `defer t.Release(used)` evaluates used at the defer statement;
// use t.Use(n) while serving and `defer t.Release(0)`, or a closure.
func (t *Ticket) Release(used int64) {
	l := t.l
	if l == nil {
		return
	}
	t.l = nil
	used = max(used, t.used)
	l.mu.Lock()
	*l.poolLocked(t.kind) -= t.reserved
	if t.drained {
		l.draining--
	} else {
		l.freeSeatLocked(t.kind)
	}
	if !t.exempt {
		l.unholdLocked(t.client, t.kind, t.reserved, t.drained)
	}
	if t.kind == Bulk {
		l.bulkRes -= t.reserved
	}
	if l.inflight[t.kind] < 0 || l.reserved < 0 || l.bulkRes < 0 || l.watchRes < 0 {
		panic(fmt.Sprintf("BUG: negative in-flight state: %d %s, %d bytes, %d bulk bytes, %d watch bytes", l.inflight[t.kind], t.kind, l.reserved, l.bulkRes, l.watchRes))
	}
	if used > 0 && t.raw > 0 && t.class != "" {
		l.observeLocked(t.cls, t.class, float64(used)/float64(t.raw))
	}
	if l.queued > 0 {
		l.dispatchLocked()
	}
	l.mu.Unlock()
	if used > 0 && t.raw > 0 {
		l.met.usedBytes.AddInt64(used)
		l.met.estimatedBytes.AddInt64(t.raw)
	}
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: release"); ce != nil {
		ce.Write(zap.Stringer("kind", t.kind), zap.String("class", t.class),
			zap.Int64("estimate", t.raw), zap.Int64("reserved", t.reserved), zap.Int64("used", used))
	}
}

// Drain marks an admitted request whose work is done and whose response
// is only being written out (a GET's body that fasthttp writes after the
// handler returned): its seat is free at once, so other requests of its
// kind may take it and bulk streams no longer Yield to it, while its
// reserved bytes stay held, in the limiter's budget and in its client's
// share, until Release. A client's drained requests count toward its share
// of the kind's bytes (not of its seats): a client whose responses are not
// read cannot hold more than its share of the budget however many
// connections it opens. Drain after Release, or twice, does nothing.
func (t *Ticket) Drain() {
	l := t.l
	if l == nil || t.drained {
		return
	}
	t.drained = true
	l.mu.Lock()
	l.freeSeatLocked(t.kind)
	l.draining++
	if h := l.holding[t.client]; h != nil && !t.exempt {
		h.seats[t.kind]--
		h.drained[t.kind]++
	}
	if l.queued > 0 {
		l.dispatchLocked()
	}
	l.mu.Unlock()
}

// Merge moves the reservation of o, another admitted Ticket of the same
// client, into t and gives back o's seat: a request whose response turned
// out larger than its reservation Admits the excess as o (queued like any
// request of its client) and merges it, so that it holds one seat and one
// reservation. o is released by the merge; t releases both. Tickets of
// another Limiter or client, or released ones, are left unchanged.
func (t *Ticket) Merge(o *Ticket) {
	l := t.l
	if l == nil || o.l != l || o == t || o.client != t.client || o.exempt != t.exempt {
		return
	}
	o.l = nil
	l.mu.Lock()
	if o.drained {
		l.draining--
	} else {
		l.freeSeatLocked(o.kind)
	}
	*l.poolLocked(o.kind) -= o.reserved
	*l.poolLocked(t.kind) += o.reserved
	if h := l.holding[o.client]; h != nil && !o.exempt {
		watching := h.watching()
		if o.drained {
			h.drained[o.kind]--
		} else {
			h.seats[o.kind]--
		}
		h.bytes[o.kind] -= o.reserved
		h.bytes[t.kind] += o.reserved
		if watching && !h.watching() {
			l.watchClients--
		}
	}
	if o.kind == Bulk {
		l.bulkRes -= o.reserved
	}
	if t.kind == Bulk {
		l.bulkRes += o.reserved
	}
	t.reserved += o.reserved
	if l.queued > 0 {
		l.dispatchLocked()
	}
	l.mu.Unlock()
}

// freeSeatLocked gives back one seat of kind.
func (l *Limiter) freeSeatLocked(kind Kind) {
	l.inflight[kind]--
	if kind == Short {
		l.shortNow.Add(-1)
		if l.inflight[Short] == 0 && l.idle != nil {
			close(l.idle)
			l.idle = nil
		}
	}
}
