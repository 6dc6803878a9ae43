package ratelimit

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// maxRetryAfter caps the Retry-After seconds of a queue rejection.
const maxRetryAfter = 30

// queueKey names the queue of one client's requests of one kind: a client's
// watches waiting for a watch slot do not hold back its GETs and LISTs.
type queueKey struct {
	client string
	kind   Kind
}

// client is the wait queue of one queueKey; it exists while it has waiters
// and is then in the ring. Guarded by Limiter.mu.
type client struct {
	key    queueKey
	queue  []*waiter // FIFO, never empty while in the ring
	inRing bool
}

// waiter is a queued request; its fields are guarded by Limiter.mu.
type waiter struct {
	c        *client
	kind     Kind
	class    string
	cls      *class // nil until the class is tracked
	raw      int64  // caller's estimate
	need     int64  // reservation
	ready    chan struct{}
	done     bool  // decided: admitted (err == nil) or rejected
	err      error // rejection
	enqueued time.Time
}

// waitLocked queues the request and waits for a decision. It is called with
// l.mu held and returns with it released.
func (l *Limiter) waitLocked(ctx context.Context, req Request, qk queueKey, c *client, cls *class, kind Kind, raw, need int64) (Ticket, error) {
	if l.cfg.MaxQueued == 0 || (l.queued >= l.cfg.MaxQueued && !l.pushOutLocked(c)) {
		ra := l.retryAfterLocked()
		l.mu.Unlock()
		return Ticket{}, l.reject(ReasonQueueFull, req.Client, need, ra)
	}
	if c == nil {
		c = &client{key: qk}
		l.queues[qk] = c
	}
	w := &waiter{c: c, kind: kind, class: req.Class, cls: cls, raw: raw, need: need,
		ready: make(chan struct{}), enqueued: l.clock.Now()}
	c.queue = append(c.queue, w)
	if !c.inRing {
		c.inRing = true
		l.ring = append(l.ring, c)
	}
	l.queued++
	position := len(c.queue)
	l.mu.Unlock()
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: queue"); ce != nil {
		ce.Write(zap.String("client", req.Client), zap.Stringer("kind", kind), zap.String("class", req.Class),
			zap.Int64("estimate", raw), zap.Int64("reserved", need), zap.Int("position", position))
	}

	timer, stop := l.clock.NewTimer(l.cfg.MaxQueueWait)
	timedOut := false
	select {
	case <-w.ready:
	case <-ctx.Done():
	case <-timer:
		timedOut = true
	}
	stop()

	l.mu.Lock()
	if !w.done {
		l.removeLocked(w)
		w.done = true
		if timedOut {
			w.err = l.reject(ReasonQueueTimeout, req.Client, need, l.retryAfterLocked())
		} else {
			l.met.cancelled.Inc()
			w.err = ctx.Err()
		}
		l.dispatchLocked()
	}
	l.mu.Unlock()
	l.met.wait.Update(l.clock.Now().Sub(w.enqueued).Seconds())
	if w.err != nil {
		return Ticket{}, w.err
	}
	l.met.admittedQueued.Inc()
	return Ticket{l: l, client: req.Client, class: req.Class, cls: cls, raw: raw, reserved: need, kind: kind}, nil
}

// dispatchLocked admits queued requests that fit, taking clients' queue heads
// round-robin, until a full round admits nothing. The round-robin position
// moves past a client only when that client is served, so a client whose head
// does not fit keeps its turn and cannot be starved by the order of visits.
func (l *Limiter) dispatchLocked() {
	for l.queued > 0 {
		admitted := false
		i := l.next
		for remaining := len(l.ring); remaining > 0 && len(l.ring) > 0; remaining-- {
			if i >= len(l.ring) {
				i = 0
			}
			c := l.ring[i]
			w := c.queue[0]
			if !l.fitsLocked(c.key.client, w.kind, w.need) {
				i++
				continue
			}
			l.admitLocked(c.key.client, w.kind, w.need, false)
			c.queue[0] = nil
			c.queue = c.queue[1:]
			l.queued--
			w.done = true
			close(w.ready)
			admitted = true
			if len(c.queue) == 0 {
				l.dropFromRingLocked(i) // i now indexes the following client
			} else {
				i++
			}
			l.next = i
		}
		if !admitted {
			return
		}
	}
}

// removeLocked takes an undecided waiter out of its client's queue.
func (l *Limiter) removeLocked(w *waiter) {
	c := w.c
	for i, x := range c.queue {
		if x == w {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			l.queued--
			break
		}
	}
	if len(c.queue) == 0 && c.inRing {
		for i, x := range l.ring {
			if x == c {
				l.dropFromRingLocked(i)
				break
			}
		}
	}
}

// dropFromRingLocked removes the client at ring index i, whose queue is empty.
func (l *Limiter) dropFromRingLocked(i int) {
	c := l.ring[i]
	c.inRing = false
	c.queue = nil
	copy(l.ring[i:], l.ring[i+1:])
	l.ring[len(l.ring)-1] = nil
	l.ring = l.ring[:len(l.ring)-1]
	if i < l.next {
		l.next--
	}
	delete(l.queues, c.key)
}

// pushOutLocked makes room in a full queue for a request of client c by
// rejecting the newest waiter of the client with the longest queue, if that
// queue is longer than c's would be. It reports whether it made room.
func (l *Limiter) pushOutLocked(c *client) bool {
	mine := 0
	if c != nil {
		mine = len(c.queue)
	}
	var longest *client
	for _, x := range l.ring {
		if longest == nil || len(x.queue) > len(longest.queue) {
			longest = x
		}
	}
	if longest == nil || len(longest.queue) <= mine+1 {
		return false
	}
	w := longest.queue[len(longest.queue)-1]
	l.removeLocked(w) // longest keeps >= 1 waiter, so stays in the ring
	w.done = true
	w.err = l.reject(ReasonQueueFull, longest.key.client, w.need, l.retryAfterLocked())
	close(w.ready)
	return true
}

// retryAfterLocked suggests a Retry-After for a queue rejection: 1 s plus one
// second per MaxRequestsInflight requests queued, at most 30 s.
func (l *Limiter) retryAfterLocked() int {
	return min(1+l.queued/l.cfg.MaxRequestsInflight, maxRetryAfter)
}
