package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// No progress, no seat.
//
// A response holds its admission (seat and reserved bytes) until its last
// byte is written, so a client that stops reading would hold them forever.
// Every write of a response therefore runs under a deadline:
//
//   - a flush of a streamed LIST or watch (at most flushSize bytes, or
//     one large frame) must make progress: it is aborted when the client
//     took none of its bytes for Config.WriteTimeout (--write-timeout, 10
//     s). Progress is counted under TLS, on the connection's socket
//     (conn.Progress: every byte the kernel takes, also within a write
//     blocked on the client), and checked every quarter of the timeout
//     by one sweep for the whole process (writeGuard), so a stream is
//     ended between 3/4 and 1 × --write-timeout after the socket last
//     took a byte from it. On a
//     connection that is not counted (a listener not wrapped by
//     CountWrites), the whole flush must complete within --write-timeout
//     of its start. A client that reads slowly but steadily (an informer
//     decoding a large collection on a loaded machine) keeps its stream;
//     the earlier rule (the whole flush within 10 s) ended such streams
//     and their reflectors re-listed (64 informers on 2,000 ConfigMaps of
//     10 KiB: bench/RESULTS.md ## storm). fasthttp applies --write-timeout
//     to the response it writes itself (headers, a GET's body);
//   - a GET or LIST that overruns --request-timeout is aborted even while
//     its write is blocked: the request's context ending moves the
//     connection's write deadline into the past.
//
// A whole body (a GET's object, a small LIST sent with a Content-Length)
// is written by fasthttp after the handler returned, under the same
// --write-timeout for the whole response. Its request keeps its reserved
// bytes until then (heldBody): a client that sends GETs of large objects on
// many connections and never reads holds at most its share of the in-flight
// bytes (--per-client-share), the other requests wait in its queue and get
// 429, and nothing it holds is outside the budget. The seat is given back
// when the handler returns (ratelimit.Ticket.Drain): the request needs no
// CPU while its body waits for the client.
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
//
// On a counted connection (pc: every connection Serve accepts) a write
// costs the guard nothing but a lock: the first arm registers the guard
// with the process's one sweeper (guardSweep), which looks every quarter
// of the timeout at the writes under way and ends one that made no
// progress (its deadline moved into the past). The guard used to set a
// write deadline and reset a timer at every write, and the timer then
// fired up to 5 times after it (a goroutine each): at 15,000 kubelet-shaped
// watches that was 7% of the server's CPU and most of its timer wake-ups
// (bench/RESULTS.md ## fanout). On a connection that is not counted each
// arm sets a deadline of --write-timeout from now, as before.
type writeGuard struct {
	s       *Server
	conn    net.Conn // nil: no deadlines (tests without a connection)
	pc      *conn.Progress
	client  string
	what    string
	timeout time.Duration
	stop    func() bool

	mu         sync.Mutex
	expired    bool // the request's context ended: the deadline stays past
	finished   bool // done was called
	stalled    bool // the sweep found the write stuck: the deadline stays past
	registered bool // in guardSweep (pc != nil, armed once, not done)

	// The sweep's view, touched only by its goroutine: the bytes written
	// at its last look, when they last moved (or the write was first seen
	// under way), whether a write was under way then.
	mark    int64
	markAt  time.Time
	writing bool
}

// CountWrites wraps ln so that the write guards of streamed responses
// measure their clients' progress (see "No progress, no seat"). Put it
// under a TLS listener: Serve counts plain connections itself. It also
// coalesces the TLS records of a stream's chunk into one write
// (conn.Progress).
func CountWrites(ln net.Listener) net.Listener { return conn.CountWrites(ln) }

// guardWrites returns the writeGuard of a response streamed on rc's
// connection; ctx is the request's (its end aborts a blocked write). what
// names the stream in logs ("list", "watch").
func (s *Server) guardWrites(ctx context.Context, rc *fasthttp.RequestCtx, what string) *writeGuard {
	g := &writeGuard{s: s, conn: rc.Conn(), client: clientKey(rc), what: what, timeout: s.cfg.WriteTimeout}
	if g.conn != nil {
		g.pc = conn.ProgressOf(g.conn)
		g.stop = context.AfterFunc(ctx, func() {
			g.mu.Lock()
			g.expired = true
			_ = g.conn.SetWriteDeadline(pastDeadline)
			g.mu.Unlock()
		})
	}
	return g
}

// arm readies the guard for the next write. On a counted connection the
// first arm clears the connection's write deadline (fasthttp's, of
// --write-timeout from the response's start) and hands the guard to the
// sweep; later arms do nothing. On other connections it sets the deadline
// of the write: --write-timeout from now.
func (g *writeGuard) arm() {
	if g == nil || g.conn == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.expired || g.finished || g.stalled {
		return
	}
	if g.pc == nil {
		_ = g.conn.SetWriteDeadline(time.Now().Add(g.timeout))
		return
	}
	if !g.registered {
		g.registered = true
		_ = g.conn.SetWriteDeadline(time.Time{})
		sweep.add(g)
	}
}

// look is the sweep's look at the guard at now: whether its write is stuck
// (under way, no byte taken for 3/4 of the timeout; the sweep looks every
// quarter, so a stream is ended between 3/4 and 1 × --write-timeout
// after the socket last took a byte from it).
func (g *writeGuard) look(now time.Time) (stuck bool) {
	w, writing := g.pc.Written(), g.pc.Writing()
	if w != g.mark || !writing || !g.writing {
		g.mark, g.markAt, g.writing = w, now, writing
		return false
	}
	return now.Sub(g.markAt) >= g.timeout-g.timeout/4
}

// cut ends a stuck write: its deadline moves into the past, and stays
// there (arm no longer clears it).
func (g *writeGuard) cut() {
	g.mu.Lock()
	if !g.expired && !g.finished && !g.stalled {
		g.stalled = true
		_ = g.conn.SetWriteDeadline(pastDeadline)
	}
	g.mu.Unlock()
}

// guardSweep holds the armed write guards of counted connections and
// looks at them every quarter of the shortest timeout among them, from one
// goroutine that runs while it holds any.
type guardSweep struct {
	mu      sync.Mutex
	guards  map[*writeGuard]struct{}
	running bool
	sooner  chan struct{} // a guard with a shorter period came
	period  time.Duration // of the running loop
}

var sweep = &guardSweep{guards: make(map[*writeGuard]struct{}), sooner: make(chan struct{}, 1)}

func (sw *guardSweep) add(g *writeGuard) {
	sw.mu.Lock()
	sw.guards[g] = struct{}{}
	p := max(g.timeout/4, time.Millisecond)
	switch {
	case !sw.running:
		sw.running, sw.period = true, p
		go sw.loop(p)
	case p < sw.period:
		select {
		case sw.sooner <- struct{}{}:
		default:
		}
	}
	sw.mu.Unlock()
}

func (sw *guardSweep) remove(g *writeGuard) {
	sw.mu.Lock()
	delete(sw.guards, g)
	sw.mu.Unlock()
}

// loop looks at the guards until none is left.
func (sw *guardSweep) loop(period time.Duration) {
	t := time.NewTimer(period)
	defer t.Stop()
	var stuck []*writeGuard
	for {
		select {
		case <-t.C:
		case <-sw.sooner:
		}
		now := time.Now()
		sw.mu.Lock()
		if len(sw.guards) == 0 {
			sw.running = false
			sw.mu.Unlock()
			return
		}
		period = time.Duration(1<<63 - 1)
		for g := range sw.guards {
			period = min(period, max(g.timeout/4, time.Millisecond))
			if g.look(now) {
				stuck = append(stuck, g)
			}
		}
		sw.period = period
		sw.mu.Unlock()
		for i, g := range stuck {
			g.cut()
			stuck[i] = nil
		}
		stuck = stuck[:0]
		t.Reset(period)
	}
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
	g.mu.Lock()
	g.finished = true
	if g.registered {
		g.registered = false
		sweep.remove(g)
		if !g.expired && !g.stalled {
			// What fasthttp writes after the stream (its last chunk) is
			// bounded as the stream's writes were.
			_ = g.conn.SetWriteDeadline(time.Now().Add(g.timeout))
		}
	}
	expired := g.expired
	g.mu.Unlock()
	if err == nil {
		return
	}
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

// heldBody is a whole response body handed to fasthttp with its request's
// admission: Close, which fasthttp calls after the body's last byte is
// written, when the write failed, or when the response is reset (a closed
// connection, another body set), releases the admission and returns the
// buffer to the pool. A write that failed for its deadline (the client read
// nothing for --write-timeout) is counted and logged as a stalled stream.
type heldBody struct {
	s       *Server
	client  string
	buf     *[]byte // the body, a pooled buffer
	off     int
	release func()
}

var _ fasthttp.BodyWriterTo = (*heldBody)(nil)

func (h *heldBody) Read(p []byte) (int, error) {
	if h.buf == nil || h.off >= len(*h.buf) {
		return 0, io.EOF
	}
	n := copy(p, (*h.buf)[h.off:])
	h.off += n
	return n, nil
}

// WriteTo writes the rest of the body in one write: no copy through a
// buffer of fasthttp's.
func (h *heldBody) WriteTo(w io.Writer) (int64, error) {
	if h.buf == nil || h.off >= len(*h.buf) {
		return 0, nil
	}
	n, err := w.Write((*h.buf)[h.off:])
	h.off += n
	return int64(n), err
}

// SupportsBodyWriteTo: fasthttp may use WriteTo.
func (h *heldBody) SupportsBodyWriteTo() bool { return true }

// Close releases the request's admission and the buffer; it is
// idempotent.
func (h *heldBody) Close() error {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	if h.buf != nil {
		putBuf(h.buf)
		h.buf = nil
	}
	return nil
}

// CloseWithError is fasthttp's close with the write's error (after
// Close): a write that ran out of --write-timeout is a stalled client.
func (h *heldBody) CloseWithError(err error) error {
	_ = h.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s := h.s
		s.aborted.stalled.Inc()
		s.rateLog.warn(h.client, "abort", "response aborted: its client read nothing for --write-timeout",
			zap.String("stream", "body"), zap.Duration("writeTimeout", s.cfg.WriteTimeout))
	}
	return nil
}
