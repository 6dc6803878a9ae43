package forward

import (
	"sync"

	"github.com/VictoriaMetrics/metrics"
)

// seats bounds the forwarded requests of one class held at once, and the
// part of them one client holds. It is safe for concurrent use.
type seats struct {
	max, perClient int
	mu             sync.Mutex
	used           int            // protected by mu
	byClient       map[string]int // protected by mu; no zero entries
	full, share    *metrics.Counter
}

func newSeats(ms *metrics.Set, class string, n int, share float64) *seats {
	s := &seats{max: n, perClient: max(1, int(float64(n)*share)), byClient: map[string]int{}}
	ms.GetOrCreateGauge(`lazyapi_forward_seats_in_use{class="`+class+`"}`, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(s.used)
	})
	s.full = ms.GetOrCreateCounter(`lazyapi_forward_rejected_total{class="` + class + `",reason="full"}`)
	s.share = ms.GetOrCreateCounter(`lazyapi_forward_rejected_total{class="` + class + `",reason="client-share"}`)
	return s
}

// take takes a seat for client; false when the class or the client's
// share is full.
func (s *seats) take(client string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.max {
		s.full.Inc()
		return false
	}
	if s.byClient[client] >= s.perClient {
		s.share.Inc()
		return false
	}
	s.used++
	s.byClient[client]++
	return true
}

// give gives back a seat take returned.
func (s *seats) give(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used--
	if n := s.byClient[client] - 1; n > 0 {
		s.byClient[client] = n
	} else {
		delete(s.byClient, client)
	}
}

// inUse is the seats taken.
func (s *seats) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
