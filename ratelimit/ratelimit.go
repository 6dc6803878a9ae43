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

// New validates cfg and returns a Limiter. Errors name the offending
// Config field.
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

// reject counts and logs a rejection and returns its error.
func (l *Limiter) reject(reason Reason, clientKey string, need int64, retryAfter int) error {
	l.met.rejected(reason).Inc()
	if ce := l.log.Check(zap.DebugLevel, "ratelimit: reject"); ce != nil {
		ce.Write(zap.String("client", clientKey), zap.String("reason", string(reason)),
			zap.Int64("reserved", need), zap.Int("retryAfter", retryAfter))
	}
	return &RejectError{Reason: reason, RetryAfter: retryAfter, Client: clientKey, Bytes: need}
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
