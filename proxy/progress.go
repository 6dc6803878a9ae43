package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// No progress, no seat.
//
// A response holds its admission (seat and reserved bytes) until its last
// byte is written, so a client that stops reading would hold them forever.
// Every write of a response therefore runs under a deadline:
//
//   - each flush of a streamed LIST or watch (at most flushSize bytes, or
//     one large frame) must complete within Config.WriteTimeout
//     (--write-timeout, 10 s) of its start; fasthttp applies the same bound
//     to the response it writes itself (headers, a GET's body). A client
//     must thus read at least one flush per --write-timeout;
//   - a GET or LIST that overruns --request-timeout is aborted even while
//     its write is blocked: the request's context ending moves the
//     connection's write deadline into the past.
//
// An aborted stream ends the connection (the client sees an incomplete
// response, never a short list), its seat and bytes are released, it is
// counted in lazyapi_streams_aborted_total{reason} and logged at most once
// per client per minute.

// DefaultWriteTimeout is the default --write-timeout.
const DefaultWriteTimeout = 10 * time.Second

// abortMetrics count streams the server ended.
type abortMetrics struct {
	stalled, timeout *metrics.Counter
}

func newAbortMetrics(ms *metrics.Set) abortMetrics {
	return abortMetrics{
		stalled: ms.GetOrCreateCounter(`lazyapi_streams_aborted_total{reason="write_stalled"}`),
		timeout: ms.GetOrCreateCounter(`lazyapi_streams_aborted_total{reason="request_timeout"}`),
	}
}

// pastDeadline is a write deadline that has passed: a blocked write fails
// at once.
var pastDeadline = time.Unix(1, 0)

// writeGuard bounds the writes of one streamed response on its connection.
// arm is called by the writing goroutine before each write; the context's
// end may fire from any goroutine. It is safe for concurrent use.
type writeGuard struct {
	s       *Server
	conn    net.Conn // nil: no deadlines (tests without a connection)
	client  string
	what    string
	timeout time.Duration
	stop    func() bool

	mu      sync.Mutex
	expired bool // the request's context ended: the deadline stays past
}

// guardWrites returns the writeGuard of a response streamed on rc's
// connection; ctx is the request's (its end aborts a blocked write). what
// names the stream in logs ("list", "watch").
func (s *Server) guardWrites(ctx context.Context, rc *fasthttp.RequestCtx, what string) *writeGuard {
	g := &writeGuard{s: s, conn: rc.Conn(), client: clientKey(rc), what: what, timeout: s.cfg.WriteTimeout}
	if g.conn != nil {
		g.stop = context.AfterFunc(ctx, func() {
			g.mu.Lock()
			g.expired = true
			_ = g.conn.SetWriteDeadline(pastDeadline)
			g.mu.Unlock()
		})
	}
	return g
}

// arm sets the deadline of the next write: --write-timeout from now.
func (g *writeGuard) arm() {
	if g == nil || g.conn == nil {
		return
	}
	g.mu.Lock()
	if !g.expired {
		_ = g.conn.SetWriteDeadline(time.Now().Add(g.timeout))
	}
	g.mu.Unlock()
}

// done ends the guard after the stream's last write; err is the stream's
// error. It reports (counts and logs) a stream ended by a deadline.
func (g *writeGuard) done(err error) {
	if g == nil {
		return
	}
	if g.stop != nil {
		g.stop()
	}
	if err == nil {
		return
	}
	g.mu.Lock()
	expired := g.expired
	g.mu.Unlock()
	if !errors.Is(err, os.ErrDeadlineExceeded) && !(expired && errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	s := g.s
	if expired {
		s.aborted.timeout.Inc()
		s.rateLog.warn(g.client, "abort", "stream aborted: the request overran --request-timeout",
			zap.String("stream", g.what), zap.Duration("requestTimeout", s.cfg.RequestTimeout))
		return
	}
	s.aborted.stalled.Inc()
	s.rateLog.warn(g.client, "abort", "stream aborted: its client read nothing for --write-timeout",
		zap.String("stream", g.what), zap.Duration("writeTimeout", g.timeout))
}
