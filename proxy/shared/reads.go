package shared

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// Reads is a server's registry of one kind of shared read: the reads
// requests may still join, by key, of type G (which embeds a Read), and
// their metrics. Lock it around GetLocked, Start and the joins that
// follow; it is safe for concurrent use.
type Reads[K comparable, G comparable] struct {
	mu sync.Mutex
	m  map[K]G

	reads, joins, chunks, lagged *metrics.Counter
	held                         atomic.Int64 // the reads' held bytes
}

// NewReads returns an empty registry whose metrics are named reads,
// joins, chunks and lagged (counters) and held (the gauge of held bytes).
func NewReads[K comparable, G comparable](ms *metrics.Set, reads, joins, chunks, lagged, held string) *Reads[K, G] {
	r := &Reads[K, G]{
		m:      make(map[K]G),
		reads:  ms.GetOrCreateCounter(reads),
		joins:  ms.GetOrCreateCounter(joins),
		chunks: ms.GetOrCreateCounter(chunks),
		lagged: ms.GetOrCreateCounter(lagged),
	}
	ms.GetOrCreateGauge(held, func() float64 { return float64(r.held.Load()) })
	return r
}

// Lock locks the registry.
func (r *Reads[K, G]) Lock() { r.mu.Lock() }

// Unlock unlocks the registry.
func (r *Reads[K, G]) Unlock() { r.mu.Unlock() }

// GetLocked returns the read of key that requests may still try to join
// (the zero G: none).
func (r *Reads[K, G]) GetLocked(key K) G { return r.m[key] }

// JoinedLocked counts a member that joined a running read.
func (r *Reads[K, G]) JoinedLocked() { r.joins.Inc() }

// Published counts a chunk a read produced.
func (r *Reads[K, G]) Published() { r.chunks.Inc() }

// Start prepares read, the Read of g, empty, its window full at limit
// bytes and counting overhead bytes for each chunk beside its data, and
// registers g as the read of key (replacing the one there, which goes on
// for its members); r is locked. The read's context is a child of base;
// it ends (Cancel) when the last member leaves, and the read leaves the
// registry then or when it ends (End).
func Start[K comparable, G comparable, C Chunked](r *Reads[K, G], read *Read[C], key K, g G, ordered bool, limit, overhead int64, base context.Context) {
	read.win = newWindow[C](limit, overhead, &r.held)
	read.members = make(map[*member]struct{})
	read.ordered, read.lagged, read.chunks = ordered, r.lagged, r.chunks
	read.forget = func() { r.forget(key, g) }
	read.ctx, read.cancel = context.WithCancel(base)
	r.m[key] = g
	r.reads.Inc()
	r.joins.Inc()
}

// forget removes g, when it is still the read of key, from the registry.
func (r *Reads[K, G]) forget(key K, g G) {
	r.mu.Lock()
	if r.m[key] == g {
		delete(r.m, key)
	}
	r.mu.Unlock()
}
