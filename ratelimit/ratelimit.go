package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// Kind is the class of a request for the in-flight count limits.
type Kind uint8

const (
	// Short is a GET or a small LIST, limited by Config.MaxRequestsInflight.
	Short Kind = iota
	// Watch is a WATCH (a long-running request), limited by
	// Config.MaxWatchBytes and by its client's fair share of them. Any
	// watch is admitted while the watches' reservations, its own
	// included, stay within seven eighths of the budget; the last eighth
	// is for clients' first watches and for clients holding less than
	// their share, (MaxWatchBytes - MaxWatchBytes/8) / n, n the clients
	// holding watches (the active ones): such a client gets one more
	// watch, whatever it reserves, while the budget has room. So a new
	// client's first watch always finds the last eighth free of the
	// others' excess, one client alone may use seven eighths, and a
	// client's watches never wait on its own while the budget is not
	// contended. Config.MaxWatchesInflight, when set, bounds their count
	// as well.
	Watch
	// Bulk is a large LIST (Limiter.IsBulk), limited by
	// Config.MaxBulkInflight and by the byte budget minus
	// Config.ShortReservedBytes.
	Bulk

	numKinds
)

// String returns "short", "watch" or "bulk".
func (k Kind) String() string {
	switch k {
	case Watch:
		return "watch"
	case Bulk:
		return "bulk"
	}
	return "short"
}

// Request describes a request asking for admission.
type Request struct {
	// Client is the fairness key: the authenticated user name once authn
	// exists, the remote IP before that. Queues and rate limits are per Client.
	Client string
	// Class groups requests whose estimates are corrected together from what
	// they really used, e.g. "list/configmaps" or "watch/pods"; "" turns
	// correction off for this request.
	Class string
	// Kind selects the in-flight count limit.
	Kind Kind
	// Bytes is the estimated working set, the caller's (lazyapi's proxy
	// estimates a page of values plus its write buffers); negative counts
	// as 0.
	// A request of 0 bytes is limited by count only.
	Bytes int64
	// NoWait: a request that does not fit now is rejected (ErrQueueFull)
	// instead of queued, for a request that already holds memory (the
	// excess of a response found larger than its estimate) and must not
	// wait while holding it.
	NoWait bool
	// Exempt admits the request at once, never queued, refused or counted
	// against a client's share or a kind's seats (its seat and bytes are
	// counted in the metrics and in what others find free): the exempt
	// priority level of API Priority and Fairness, which kube-apiserver
	// gives the system:masters group. Its bytes may take the budget past
	// its end, as a Resize does.
	Exempt bool
}

// Correction of estimates: each Release with used > 0 moves the class's ratio
// toward used/estimate by ewmaAlpha; samples and so the ratio stay within
// [minRatio, maxRatio].
const (
	ewmaAlpha = 0.2
	minRatio  = 0.25
	maxRatio  = 4
)

// maxRetryAfter caps the Retry-After seconds of a queue rejection.
const maxRetryAfter = 30

// sweepEvery is the number of rate-limited Admit calls between sweeps of idle
// clients' rate limiters.
const sweepEvery = 1024

// Limiter admits requests while (a) fewer than the kind's maximum are in flight
// and (b) the sum of admitted reservations plus the request's reservation is
// at most Config.MaxInflightBytes. A request that does not fit waits in a FIFO
// queue of its client and kind; queue heads are served round-robin whenever a
// Release or a dequeue frees capacity, skipping a head that does not fit, so
// one client's queued requests never hold back another client's request that
// fits, and each client gets at most one admission per round while others
// wait. A new request whose queue is empty is admitted at once when it fits,
// whatever others have queued; a large request can therefore be passed by
// smaller ones until it fits or Config.MaxQueueWait ends.
//
// Reservations: a request reserves its estimate times its class's correction
// ratio, at most MaxInflightBytes. An estimate above MaxSingleRequestBytes is
// rejected with ErrTooLarge. An estimate between MaxInflightBytes and
// MaxSingleRequestBytes is clamped to MaxInflightBytes (like an APF request
// clamped to the level's seats): it is admitted only when nothing else holds
// bytes, and while it runs nothing else with bytes is admitted. So the sum of
// reservations never exceeds MaxInflightBytes, while the memory really used may
// exceed it by that one oversize request's excess, which the headroom of
// --memory-limit absorbs.
//
// Requests of kind Bulk have their own seats and may not reserve the bytes
// kept for short requests; bulk streams Yield to short requests (see
// levels.go).
//
// A Limiter is safe for concurrent use; one mutex (mu) guards all mutable
// fields. It starts no goroutines and needs no Close: a queued request waits
// in its own goroutine (the caller's).
type Limiter struct {
	cfg         Config
	clock       Clock
	log         *zap.Logger
	met         *limiterMetrics
	maxInflight [numKinds]int

	// bulkBudget is the part of MaxInflightBytes bulk requests may reserve
	// together: MaxInflightBytes - ShortReservedBytes.
	bulkBudget int64

	// shortNow mirrors inflight[Short] for Yield's lock-free fast path.
	shortNow atomic.Int64

	mu       sync.Mutex
	inflight [numKinds]int            // admitted and not yet released, per kind
	reserved int64                    // sum of admitted reservations but watches'; <= cfg.MaxInflightBytes but after Resize or Exempt
	watchRes int64                    // sum of admitted watches' reservations; <= cfg.MaxWatchBytes but after Resize or Exempt
	bulkRes  int64                    // sum of bulk reservations; <= bulkBudget but after BecomeBulk
	idle     chan struct{}            // closed when inflight[Short] drops to 0; nil when nobody waits
	queued   int                      // waiters over all clients
	draining int                      // drained tickets not yet released
	queues   map[queueKey]*client     // queues with waiters
	limiters map[string]*rate.Limiter // per-client rate limiters (PerClientQPS > 0)
	ring     []*client                // queues with waiters, in round-robin order
	next     int                      // index in ring of the client served next
	classes  map[string]*class        // correction per class; entries are never removed
	sweepIn  int                      // rate-limited Admit calls until the next sweep
	// watchClients is the number of clients holding watches (the active
	// ones, among whom watch bytes are shared: watchShareLocked).
	watchClients int
	// holding is what each client holds, for Config.ClientShare; an
	// entry exists while the client holds something.
	holding map[string]*holding
	spare   []*holding // released holdings, reused: Admit allocates nothing
	// shareSeats and shareBytes are the most seats and bytes of each kind
	// one client may hold (ClientShare of the kind's limits).
	shareSeats [numKinds]int
	shareBytes [numKinds]int64
}

// holding is what one client holds; guarded by Limiter.mu.
type holding struct {
	seats   [numKinds]int
	drained [numKinds]int // drained tickets (Ticket.Drain): bytes held, no seat
	bytes   [numKinds]int64
}

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

// class holds the correction ratio of a class of requests; guarded by
// Limiter.mu.
type class struct {
	ratio float64 // EWMA of used/estimate, within [minRatio, maxRatio]
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

// New validates cfg and returns a Limiter. Errors name the offending flag.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cannot create rate limiter: %w", err)
	}
	l := &Limiter{
		cfg:      cfg,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		queues:   make(map[queueKey]*client),
		limiters: make(map[string]*rate.Limiter),
		classes:  make(map[string]*class),
		sweepIn:  sweepEvery,
	}
	if l.clock == nil {
		l.clock = realClock{}
	}
	if l.log == nil {
		l.log = zap.NewNop()
	}
	l.maxInflight[Short] = cfg.MaxRequestsInflight
	l.maxInflight[Watch] = cfg.MaxWatchesInflight
	l.maxInflight[Bulk] = cfg.MaxBulkInflight
	l.bulkBudget = cfg.MaxInflightBytes - cfg.ShortReservedBytes
	l.holding = make(map[string]*holding)
	for k := range numKinds {
		budget := cfg.MaxInflightBytes
		switch k {
		case Bulk:
			budget = l.bulkBudget
		case Watch:
			budget = cfg.MaxWatchBytes
		}
		l.shareSeats[k] = max(1, int(math.Ceil(cfg.ClientShare*float64(l.maxInflight[k]))))
		l.shareBytes[k] = int64(cfg.ClientShare * float64(budget))
	}
	l.met = newLimiterMetrics(l, cfg.Metrics)
	return l, nil
}

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
	delta := n - t.reserved
	l.mu.Lock()
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
	l.mu.Unlock()
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

// Admit admits req or queues it until it fits. On success the caller must
// Release the Ticket:
//
//	t, err := l.Admit(ctx, req)
//	if err != nil { ... 429 with RetryAfter(err), or give up if ctx ended }
//	defer t.Release(0) // after t.Use(peak) calls, or Release(used) in a closure
//
// Errors: a *RejectError wrapping ErrQueueFull, ErrQueueTimeout, ErrTooLarge
// or ErrRateLimited; or ctx.Err() when ctx ends while queued (the request is
// then dequeued and nothing is reserved). A request admitted concurrently with
// its ctx ending or its queue timer firing is returned admitted.
func (l *Limiter) Admit(ctx context.Context, req Request) (Ticket, error) {
	if err := ctx.Err(); err != nil {
		return Ticket{}, err
	}
	kind := req.Kind
	if kind >= numKinds {
		kind = Short
	}
	raw := max(req.Bytes, 0)

	l.mu.Lock()
	cls := l.classes[req.Class]
	need := l.needLocked(kind, cls, raw)
	if req.Exempt {
		l.admitLocked(req.Client, kind, need, true)
		l.mu.Unlock()
		l.met.admittedNow.Inc()
		return Ticket{l: l, client: req.Client, class: req.Class, cls: cls, raw: raw, reserved: need, kind: kind, exempt: true}, nil
	}
	if raw > l.cfg.MaxSingleRequestBytes {
		l.mu.Unlock()
		return Ticket{}, l.reject(ReasonTooLarge, req.Client, raw, 0)
	}
	if l.cfg.PerClientQPS > 0 {
		now := l.clock.Now()
		if l.sweepIn--; l.sweepIn <= 0 {
			l.sweepLocked(now)
		}
		lim := l.limiters[req.Client]
		if lim == nil {
			lim = rate.NewLimiter(rate.Limit(l.cfg.PerClientQPS), l.cfg.PerClientBurst)
			l.limiters[req.Client] = lim
		}
		if !lim.AllowN(now, 1) {
			secs := int(math.Ceil((1 - lim.TokensAt(now)) / l.cfg.PerClientQPS))
			l.mu.Unlock()
			return Ticket{}, l.reject(ReasonRateLimited, req.Client, need, max(secs, 1))
		}
	}
	qk := queueKey{req.Client, kind}
	c := l.queues[qk]
	if c == nil && l.fitsLocked(req.Client, kind, need) {
		l.admitLocked(req.Client, kind, need, false)
		l.mu.Unlock()
		l.met.admittedNow.Inc()
		if ce := l.log.Check(zap.DebugLevel, "ratelimit: admit"); ce != nil {
			ce.Write(zap.String("client", req.Client), zap.Stringer("kind", kind), zap.String("class", req.Class),
				zap.Int64("estimate", raw), zap.Int64("reserved", need))
		}
		return Ticket{l: l, client: req.Client, class: req.Class, cls: cls, raw: raw, reserved: need, kind: kind}, nil
	}
	if req.NoWait {
		ra := l.retryAfterLocked()
		l.mu.Unlock()
		return Ticket{}, l.reject(ReasonQueueFull, req.Client, need, ra)
	}
	return l.waitLocked(ctx, req, qk, c, cls, kind, raw, need)
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

// Stats is a snapshot of a Limiter's state.
type Stats struct {
	InflightRequests   int   // admitted short requests not yet released
	InflightWatches    int   // admitted watches not yet released
	InflightBulk       int   // admitted bulk requests not yet released
	Queued             int   // requests waiting for admission
	Draining           int   // drained requests (Ticket.Drain) holding bytes, not seats
	ReservedBytes      int64 // sum of admitted reservations, watches' included
	BulkReservedBytes  int64 // sum of admitted bulk reservations (part of ReservedBytes)
	WatchReservedBytes int64 // sum of admitted watches' reservations (part of ReservedBytes)
	WatchClients       int   // clients holding watches (their shares: Watch)
	BudgetBytes        int64 // Config.MaxInflightBytes
	WatchBudgetBytes   int64 // Config.MaxWatchBytes
}

// Stats returns a snapshot of l's state.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{
		InflightRequests:   l.inflight[Short],
		InflightWatches:    l.inflight[Watch],
		InflightBulk:       l.inflight[Bulk],
		Queued:             l.queued,
		Draining:           l.draining,
		ReservedBytes:      l.reserved + l.watchRes,
		BulkReservedBytes:  l.bulkRes,
		WatchReservedBytes: l.watchRes,
		WatchClients:       l.watchClients,
		BudgetBytes:        l.cfg.MaxInflightBytes,
		WatchBudgetBytes:   l.cfg.MaxWatchBytes,
	}
}

// Ratio returns the correction ratio of class and whether it is tracked.
func (l *Limiter) Ratio(class string) (float64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.classes[class]; c != nil {
		return c.ratio, true
	}
	return 0, false
}

// reject counts and logs a rejection and returns its error.
func (l *Limiter) reject(reason Reason, clientKey string, need int64, retryAfter int) error {
	l.met.rejected(reason).Inc()
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: reject"); ce != nil {
		ce.Write(zap.String("client", clientKey), zap.String("reason", string(reason)),
			zap.Int64("reserved", need), zap.Int("retryAfter", retryAfter))
	}
	return &RejectError{Reason: reason, RetryAfter: retryAfter, Client: clientKey, Bytes: need}
}

// needLocked returns the reservation of a request of kind for an estimate of
// raw bytes in class cls (nil: uncorrected): at most the budget its kind may
// use.
func (l *Limiter) needLocked(kind Kind, cls *class, raw int64) int64 {
	budget := l.cfg.MaxInflightBytes
	switch kind {
	case Bulk:
		budget = l.bulkBudget
	case Watch:
		budget = l.cfg.MaxWatchBytes
	}
	f := float64(raw)
	if cls != nil {
		f *= cls.ratio
	}
	if f >= float64(budget) {
		return budget
	}
	return int64(math.Ceil(f))
}

// fitsLocked reports whether a request of client of kind reserving need
// bytes fits now: within the kind's seats and bytes, and within the
// client's share of them (it may always hold one request of a kind).
func (l *Limiter) fitsLocked(client string, kind Kind, need int64) bool {
	if kind == Watch {
		if l.cfg.MaxWatchesInflight > 0 && l.inflight[Watch] >= l.cfg.MaxWatchesInflight {
			return false
		}
		b := l.cfg.MaxWatchBytes
		if l.watchRes > b-need {
			return false
		}
		if h := l.holding[client]; h != nil && h.watching() && l.watchRes > b-b/8-need {
			// The last eighth: only for a client below its share. Not
			// h.bytes+need: need is mostly the initial phase's, given back
			// in seconds, and with a few hundred clients it is about a
			// share itself, so every client holding two watches waited
			// for ever (bench/RESULTS.md, "churn: the initial syncs that
			// never finished").
			return h.bytes[Watch] < l.watchShareLocked()
		}
		return true
	}
	if kind == Bulk && l.bulkRes > l.bulkBudget-need {
		return false
	}
	if h := l.holding[client]; h != nil && (h.seats[kind] > 0 || h.drained[kind] > 0) &&
		(h.seats[kind] >= l.shareSeats[kind] || h.bytes[kind] > l.shareBytes[kind]-need) {
		return false
	}
	return l.inflight[kind] < l.maxInflight[kind] && l.reserved <= l.cfg.MaxInflightBytes-need
}

// watchShareLocked is the watch bytes a client holding watches must hold
// less than to be admitted another from the budget's last eighth: seven
// eighths of the budget shared among the clients holding watches (see
// Watch).
func (l *Limiter) watchShareLocked() int64 {
	b := l.cfg.MaxWatchBytes
	return (b - b/8) / int64(max(l.watchClients, 1))
}

// poolLocked returns the sum of reservations a request of kind counts in.
func (l *Limiter) poolLocked(kind Kind) *int64 {
	if kind == Watch {
		return &l.watchRes
	}
	return &l.reserved
}

// watching reports whether the client holds a watch.
func (h *holding) watching() bool { return h.seats[Watch]+h.drained[Watch] > 0 }

// holdingLocked returns client's holding, creating it (from l.spare when
// it can) when the client holds nothing.
func (l *Limiter) holdingLocked(client string) *holding {
	h := l.holding[client]
	if h == nil {
		if n := len(l.spare); n > 0 {
			h = l.spare[n-1]
			l.spare = l.spare[:n-1]
		} else {
			h = &holding{}
		}
		l.holding[client] = h
	}
	return h
}

// unholdLocked takes a released reservation off its client's holding;
// drained: the ticket had given back its seat (Ticket.Drain).
func (l *Limiter) unholdLocked(client string, kind Kind, bytes int64, drained bool) {
	h := l.holding[client]
	if h == nil {
		return
	}
	watching := h.watching()
	if drained {
		h.drained[kind]--
	} else {
		h.seats[kind]--
	}
	h.bytes[kind] -= bytes
	if watching && !h.watching() {
		l.watchClients--
	}
	if h.seats == [numKinds]int{} && h.drained == [numKinds]int{} {
		delete(l.holding, client)
		*h = holding{}
		l.spare = append(l.spare, h)
	}
}

// admitLocked counts an admitted request; exempt: Request.Exempt (not in
// its client's holding, and allowed past the budget).
func (l *Limiter) admitLocked(client string, kind Kind, need int64, exempt bool) {
	if !exempt {
		h := l.holdingLocked(client)
		if kind == Watch && !h.watching() {
			l.watchClients++
		}
		h.seats[kind]++
		h.bytes[kind] += need
	}
	l.inflight[kind]++
	pool := l.poolLocked(kind)
	*pool += need
	switch kind {
	case Bulk:
		l.bulkRes += need
	case Short:
		l.shortNow.Add(1)
	}
	// bulkRes may exceed bulkBudget after Ticket.BecomeBulk, a pool its
	// budget after Resize or an exempt request; fitsLocked keeps new
	// requests out until it is back under.
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

// sweepLocked forgets rate limiters whose token bucket is full, which a fresh
// limiter would equal, so idle clients cost no memory.
func (l *Limiter) sweepLocked(now time.Time) {
	l.sweepIn = sweepEvery
	for k, lim := range l.limiters {
		if lim.TokensAt(now) >= float64(l.cfg.PerClientBurst) {
			delete(l.limiters, k)
		}
	}
}

// observeLocked moves the correction ratio of the class named name toward the
// sample used/estimate; cls is its state if the caller has it.
func (l *Limiter) observeLocked(cls *class, name string, sample float64) {
	sample = min(max(sample, minRatio), maxRatio)
	if cls == nil {
		if cls = l.classes[name]; cls == nil {
			if len(l.classes) >= l.cfg.MaxClasses {
				return
			}
			cls = &class{ratio: 1}
			l.classes[name] = cls
		}
	}
	cls.ratio += ewmaAlpha * (sample - cls.ratio)
}
