package ratelimit

import (
	"context"

	"go.uber.org/zap"
)

// Priority levels: short and bulk.
//
// A LIST whose estimated response (items × average stored size, see the
// proxy's admission) exceeds Config.BulkListBytes is a Bulk request; GETs and
// smaller LISTs are Short. The two levels differ in three ways, in the
// spirit of kube-apiserver's API Priority and Fairness, which keeps
// separate priority levels with their own seats so that one level's flood
// cannot take another's:
//
//  1. Seats: at most Config.MaxBulkInflight bulk requests are served at
//     once (default DefaultMaxBulkInflight: half of GOMAXPROCS). A bulk
//     LIST is CPU-bound (lazyapi transcodes or copies every item, etcd
//     serves every range): more concurrent bulk streams than cores add
//     latency for everyone and no throughput, and keeping few of them lets
//     each one finish (the rest wait in their client's bulk queue, then get
//     a 429 with Retry-After).
//  2. Bytes: bulk requests together reserve at most MaxInflightBytes -
//     Config.ShortReservedBytes, so short requests always find bytes even
//     while bulk streams hold their page reservations for minutes.
//  3. CPU: a bulk stream calls Yield between flushes. While short requests
//     are in flight it pauses, up to Config.BulkYield per call, until they
//     are done: a GET does not wait behind the bulk streams' goroutines in
//     the Go run queue, nor behind their etcd reads. A bulk stream under a
//     constant short load still writes one flush per BulkYield, so it is
//     slowed, never stopped.
//
// Queues are per client and kind, so a client's queued bulk LISTs never hold
// back its own (or anyone's) GETs.

// BecomeBulk turns an admitted Short request into a Bulk one, for a LIST
// whose response turned out larger than its estimate (Config.BulkListBytes):
// it leaves the short seats and, with its reservation, counts as bulk until
// released, so that it may Yield to short requests (not to itself) and
// queued short requests may take its seat. The bulk count and bulk bytes may
// then exceed their limits until it is released; no other bulk request is
// admitted meanwhile. A Ticket of another kind, or released, is unchanged.
func (t *Ticket) BecomeBulk() {
	l := t.l
	if l == nil || t.kind != Short || t.drained {
		return
	}
	l.mu.Lock()
	l.inflight[Short]--
	l.shortNow.Add(-1)
	l.inflight[Bulk]++
	l.bulkRes += t.reserved
	if !t.exempt {
		l.unholdLocked(t.client, Short, t.reserved, false)
		h := l.holdingLocked(t.client)
		h.seats[Bulk]++
		h.bytes[Bulk] += t.reserved
	}
	t.kind = Bulk
	if l.inflight[Short] == 0 && l.idle != nil {
		close(l.idle)
		l.idle = nil
	}
	if l.queued > 0 {
		l.dispatchLocked()
	}
	l.mu.Unlock()
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: became bulk"); ce != nil {
		ce.Write(zap.String("class", t.class), zap.Int64("reserved", t.reserved))
	}
}

// IsBulk reports whether a LIST whose response is estimated at
// responseBytes is served as Bulk (more than Config.BulkListBytes).
func (l *Limiter) IsBulk(responseBytes int64) bool {
	return responseBytes > l.cfg.BulkListBytes
}

// Yield pauses a bulk request while short requests are in flight: it
// returns when none is, when Config.BulkYield has passed, or when ctx ends,
// and reports whether it waited. It costs one atomic load when no short
// request is in flight. Call it between flushes of a bulk response, never
// while holding resources a short request needs.
func (l *Limiter) Yield(ctx context.Context) bool {
	if l.cfg.BulkYield <= 0 || l.shortNow.Load() == 0 {
		return false
	}
	l.mu.Lock()
	if l.inflight[Short] == 0 {
		l.mu.Unlock()
		return false
	}
	if l.idle == nil {
		l.idle = make(chan struct{})
	}
	idle := l.idle
	l.mu.Unlock()
	start := l.clock.Now()
	timer, stop := l.clock.NewTimer(l.cfg.BulkYield)
	timedOut := false
	select {
	case <-idle:
	case <-ctx.Done():
	case <-timer:
		timedOut = true
	}
	stop()
	l.met.yields.Inc()
	if timedOut {
		l.met.yieldTimeouts.Inc()
	}
	l.met.yieldWait.Update(l.clock.Now().Sub(start).Seconds())
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: bulk yielded"); ce != nil {
		ce.Write(zap.Duration("waited", l.clock.Now().Sub(start)), zap.Bool("timedOut", timedOut))
	}
	return true
}
