package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
//   - a flush of a streamed LIST or watch (at most flushSize bytes, or
//     one large frame) must make progress: it is aborted when the client
//     took none of its bytes for Config.WriteTimeout (--write-timeout, 10
//     s). Progress is counted under TLS, on the connection's socket
//     (progressConn: every byte the kernel takes, also within a write
//     blocked on the client), and checked every quarter of the timeout,
//     so a stream is ended between 3/4 and 1 × --write-timeout after the
//     socket last took a byte from it. On a
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
type writeGuard struct {
	s       *Server
	conn    net.Conn // nil: no deadlines (tests without a connection)
	pc      *progressConn
	client  string
	what    string
	timeout time.Duration
	stop    func() bool

	mu       sync.Mutex
	expired  bool // the request's context ended: the deadline stays past
	finished bool // done was called
	timer    *time.Timer
	mark     int64     // pc's bytes written at the last progress
	deadline time.Time // the write deadline set last
}

// progressConn counts the bytes written to a connection (under TLS: to
// its socket) as the kernel takes them, so that the count moves while a
// large write is blocked on a slow reader: on a socket (syscall.Conn) it
// writes with the raw connection and counts every partial write; on other
// connections in writes of at most progressChunk bytes.
//
// Under TLS (CountWrites) it also coalesces: crypto/tls writes each record
// of at most 16 KiB with its own Write, one write syscall per record; the
// syscalls were 47% of a cached JSON LIST's CPU over TLS (bench/RESULTS.md
// ## cpu: TLS records coalesced into socket writes). Between hold and
// release (one HTTP chunk of a streamed watch or gzip LIST: errWriter; a
// whole uncompressed LIST: lister.respondStream) the sealed records go into
// a buffer of at most coalesceBytes, taken from a pool at the first record
// and given back at the last release, and reach the socket in one write
// when the next record does not fit and at the release. No buffer is held
// by an idle connection; a stream holds one while it writes (a write
// blocked on a client that stopped reading too, until the write guard ends
// it), counted in its admission (streamBufferBytes) and in
// lazyapi_write_coalesce_buffer_bytes. Writes outside a hold (handshakes,
// alerts, fasthttp's own responses) go out at once.
type progressConn struct {
	net.Conn
	written atomic.Int64

	rawOnce sync.Once
	raw     syscall.RawConn // nil: chunked Conn.Write

	coalesce bool // CountWrites: hold and release coalesce

	mu   sync.Mutex // serialises writes, the buffer and the raw write's state
	held int
	buf  *[]byte
	err  error  // a failed write of buffered bytes: every later write fails
	out  []byte // the raw write's rest
	werr error  // the raw write's syscall error
	fn   func(fd uintptr) bool
}

// progressChunk is the most a progressConn writes at once to a connection
// that is not a socket: about one TLS record.
const progressChunk = 16 << 10

// coalesceBytes bounds a coalescing buffer: one 64 KiB chunk of a stream
// (flushSize plus the item that passed it, and the records' framing) fits.
const coalesceBytes = 2 * flushSize

var (
	coalesceBufs  = sync.Pool{New: func() any { b := make([]byte, 0, coalesceBytes); return &b }}
	coalesceInUse atomic.Int64 // bytes of coalescing buffers taken (lazyapi_write_coalesce_buffer_bytes)
)

func (c *progressConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.held == 0 {
		return c.writeOut(p)
	}
	if c.buf != nil && len(*c.buf)+len(p) > coalesceBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) > coalesceBytes {
		return c.writeOut(p)
	}
	if c.buf == nil {
		c.buf = coalesceBufs.Get().(*[]byte)
		coalesceInUse.Add(coalesceBytes)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// hold starts coalescing the writes until the matching release. It does
// nothing on a connection that does not coalesce (c nil, or not under
// TLS).
func (c *progressConn) hold() {
	if c == nil || !c.coalesce {
		return
	}
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
}

// release ends a hold: the last one writes the buffered records out and
// gives the buffer back. Its error is the write's (the client is gone, or
// the write deadline passed): the connection is then unusable.
func (c *progressConn) release() error {
	if c == nil || !c.coalesce {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held--
	if c.held > 0 || c.buf == nil {
		return nil
	}
	err := c.flushLocked()
	*c.buf = (*c.buf)[:0]
	coalesceBufs.Put(c.buf)
	c.buf = nil
	coalesceInUse.Add(-coalesceBytes)
	return err
}

// flushLocked writes the buffered records out. A failure is kept: crypto/tls
// believes the records sent, so nothing may follow them.
func (c *progressConn) flushLocked() error {
	if c.buf == nil || len(*c.buf) == 0 {
		return nil
	}
	_, err := c.writeOut(*c.buf)
	*c.buf = (*c.buf)[:0]
	if err != nil {
		c.err = err
	}
	return err
}

// writeOut writes p to the connection, counting the bytes as they go.
func (c *progressConn) writeOut(p []byte) (int, error) {
	c.rawOnce.Do(func() {
		if sc, ok := c.Conn.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil && rawWriteSupported {
				c.raw = raw
				c.fn = c.rawWrite
			}
		}
	})
	if c.raw == nil {
		n := 0
		for len(p) > 0 {
			m, err := c.Conn.Write(p[:min(len(p), progressChunk)])
			n += m
			c.written.Add(int64(m))
			if err != nil {
				return n, err
			}
			p = p[m:]
		}
		return n, nil
	}
	c.out, c.werr = p, nil
	err := c.raw.Write(c.fn) // waits for the socket under its write deadline
	n := len(p) - len(c.out)
	c.out = nil
	if err == nil && c.werr != nil {
		err = &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", c.werr)}
	}
	return n, err
}

// CountWrites wraps ln so that the write guards of streamed responses
// measure their clients' progress (see "No progress, no seat"). Put it
// under a TLS listener: Serve counts plain connections itself. It also
// coalesces the TLS records of a stream's chunk into one write
// (progressConn).
func CountWrites(ln net.Listener) net.Listener { return countingListener{ln} }

type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &progressConn{Conn: c, coalesce: true}, nil
}

// progressOf returns the progressConn under a served connection, or nil.
func progressOf(c net.Conn) *progressConn {
	c = unwrapConn(c)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, _ := c.(*progressConn)
	return pc
}

// guardWrites returns the writeGuard of a response streamed on rc's
// connection; ctx is the request's (its end aborts a blocked write). what
// names the stream in logs ("list", "watch").
func (s *Server) guardWrites(ctx context.Context, rc *fasthttp.RequestCtx, what string) *writeGuard {
	g := &writeGuard{s: s, conn: rc.Conn(), client: clientKey(rc), what: what, timeout: s.cfg.WriteTimeout}
	if g.conn != nil {
		g.pc = progressOf(g.conn)
		g.stop = context.AfterFunc(ctx, func() {
			g.mu.Lock()
			g.expired = true
			_ = g.conn.SetWriteDeadline(pastDeadline)
			g.mu.Unlock()
		})
	}
	return g
}

// arm sets the deadline of the next write: --write-timeout from now, moved
// on by check while the client takes bytes.
func (g *writeGuard) arm() {
	if g == nil || g.conn == nil {
		return
	}
	g.mu.Lock()
	if !g.expired && !g.finished {
		g.deadline = time.Now().Add(g.timeout)
		_ = g.conn.SetWriteDeadline(g.deadline)
		if g.pc != nil {
			g.mark = g.pc.written.Load()
			if g.timer == nil {
				g.timer = time.AfterFunc(g.timeout/4, g.check)
			} else {
				g.timer.Reset(g.timeout / 4)
			}
		}
	}
	g.mu.Unlock()
}

// check runs every quarter of --write-timeout after arm until the
// deadline passes: when the client took bytes since the last check, the
// deadline moves to --write-timeout from now. A blocked write sees the
// new deadline.
func (g *writeGuard) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.expired || g.finished {
		return
	}
	now := time.Now()
	if w := g.pc.written.Load(); w != g.mark {
		g.mark = w
		g.deadline = now.Add(g.timeout)
		_ = g.conn.SetWriteDeadline(g.deadline)
	}
	if now.Before(g.deadline) {
		g.timer.Reset(min(g.timeout/4, g.deadline.Sub(now)))
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
	if g.timer != nil {
		g.timer.Stop()
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
