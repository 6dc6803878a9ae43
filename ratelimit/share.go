package ratelimit

import "math"

// holding is what one client holds; guarded by Limiter.mu.
type holding struct {
	seats   [numKinds]int
	drained [numKinds]int // drained tickets (Ticket.Drain): bytes held, no seat
	bytes   [numKinds]int64
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
		return l.watchFitsLocked(client, need)
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

// watchFitsLocked reports whether need more bytes of client's watches fit
// the watch budget: anywhere in its first seven eighths, and in its last
// eighth only for a client holding no watch or less than its share.
func (l *Limiter) watchFitsLocked(client string, need int64) bool {
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
