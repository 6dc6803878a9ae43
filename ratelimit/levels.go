package ratelimit

import (
	"context"
	"time"

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
	if l == nil || t.kind != Short {
		return
	}
	l.mu.Lock()
	l.inflight[Short]--
	l.shortNow.Add(-1)
	l.inflight[Bulk]++
	l.bulkRes += t.reserved
	l.unholdLocked(t.client, Short, t.reserved)
	h := l.holdingLocked(t.client)
	h.seats[Bulk]++
	h.bytes[Bulk] += t.reserved
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

// sizeTTL is how long a remembered collection size (SetSize) is used.
const sizeTTL = 5 * time.Second

// Size describes a collection for the classification of its LISTs.
type Size struct {
	Items    int64 // number of objects
	AvgBytes int64 // average stored size of one object; 0 when unknown
}

// sizeEntry is a remembered collection size.
type sizeEntry struct {
	Size
	at time.Time
}

// Size returns the size remembered for the collection key (SetSize) if it
// was set less than 5 s ago. The proxy uses it to classify LISTs as Bulk
// without reading etcd for every request.
func (l *Limiter) Size(key string) (Size, bool) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.sizes[key]
	if !ok || now.Sub(e.at) >= sizeTTL {
		return Size{}, false
	}
	return e.Size, true
}

// SetSize remembers the size of the collection key. At most
// Config.MaxClasses keys are kept; when full, all are forgotten.
func (l *Limiter) SetSize(key string, sz Size) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.sizes[key]; !ok && len(l.sizes) >= l.cfg.MaxClasses {
		clear(l.sizes)
	}
	l.sizes[key] = sizeEntry{Size: sz, at: now}
}

// observedTTL is how long a response size seen by ObserveResponse is used.
const observedTTL = time.Minute

// ObserveResponse records that a LIST of the collection key wrote at least
// n response bytes. ObservedResponse returns the largest n recorded in the
// last minute. A LIST whose estimate (items × a sampled or hinted average)
// was too low, e.g. because the first values of the range are small, thus
// makes the following LISTs of its collection Bulk. At most
// Config.MaxClasses keys are kept; when full, all are forgotten.
func (l *Limiter) ObserveResponse(key string, n int64) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.observed[key]
	if !ok && len(l.observed) >= l.cfg.MaxClasses {
		clear(l.observed)
	}
	if ok && now.Sub(e.at) < observedTTL && e.n > n {
		n = e.n
	}
	l.observed[key] = observedEntry{n: n, at: now}
}

// ObservedResponse returns the largest response size recorded for the
// collection key by ObserveResponse in the last minute, 0 if none.
func (l *Limiter) ObservedResponse(key string) int64 {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.observed[key]
	if !ok || now.Sub(e.at) >= observedTTL {
		return 0
	}
	return e.n
}

// observedEntry is a response size recorded by ObserveResponse.
type observedEntry struct {
	n  int64
	at time.Time
}
