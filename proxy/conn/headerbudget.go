package conn

import (
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// Budget bounds the header bytes that all connections hold at once
// before their header is complete, that is before anyone knows who sent
// them (issue 23: nothing is held for a client before it is
// authenticated, beyond a small bound). A connection's first gateBufSize
// bytes are its own (a pooled 4 KiB buffer, so 10,000 connections that
// stop mid-header hold 40 MiB); a header that needs more grows its buffer
// only with bytes taken from this budget. Without it, 1,000 connections
// each trickling 1 MiB of header held 1 GiB (the 1 MiB kube-apiserver
// accepts, which lazyapi must accept too: large OIDC tokens, long label
// selectors). A connection whose header cannot grow is answered 429 with
// Retry-After and closed; its client retries as after any 429.
//
// A nil *Budget takes everything. It is safe for concurrent use.
type Budget struct {
	limit   int64
	used    atomic.Int64
	refused *metrics.Counter
}

// DefaultHeaderBufferBytes is the default Budget limit: 64
// headers of kube-apiserver's largest (1 MiB) arriving at once.
const DefaultHeaderBufferBytes = 64 << 20

func NewBudget(ms *metrics.Set, limit int64) *Budget {
	b := &Budget{limit: limit, refused: ms.GetOrCreateCounter("lazyapi_header_buffer_refused_total")}
	ms.GetOrCreateGauge("lazyapi_header_buffer_bytes", func() float64 { return float64(b.used.Load()) })
	return b
}

// take reserves n bytes; false means the budget has no room for them.
func (b *Budget) take(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		b.refused.Inc()
		return false
	}
	return true
}

// give returns n bytes taken before.
func (b *Budget) give(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// headerBudgetFull is the answer to a header that cannot grow: 429 with
// Retry-After, closing the connection (its partial header is dropped).
const headerBudgetFull = "the server is reading too many large request headers at once, please try again later"

var headerBudgetResponse = "HTTP/1.1 429 Too Many Requests\r\nContent-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
	strconv.Itoa(len(headerBudgetFull)+1) + "\r\n\r\n" + headerBudgetFull + "\n"

// refuseHeader answers a header the budget refused and ends the
// connection's reads.
func (g *Gate) refuseHeader() error {
	_ = g.Conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = io.WriteString(g.Conn, headerBudgetResponse)
	g.releaseHeader()
	if g.buf != nil && cap(*g.buf) == gateBufSize {
		*g.buf = (*g.buf)[:0]
		gateBufs.Put(g.buf)
	}
	g.buf, g.off, g.out = nil, 0, 0
	return errHeaderBudget
}

// releaseHeader gives back what the connection's grown header buffer took
// from the budget. It may run concurrently with Close.
func (g *Gate) releaseHeader() {
	g.budget.give(g.held.Swap(0))
}
