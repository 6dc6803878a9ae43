package conn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// No progress, no seat.
//
// A response holds its admission (seat and reserved bytes) until its last
// byte is written, so a client that stops reading would hold them forever.
// Every write of a response therefore runs under a deadline:
//
//   - a flush of a streamed LIST or watch (at most one chunk, or one large
//     frame) must make progress: it is aborted when the client took none
//     of its bytes for the write timeout (proxy's Config.WriteTimeout,
//     10 s by default). Progress is counted under TLS, on the
//     connection's socket (Progress: every byte the kernel takes, also
//     within a write blocked on the client), and checked every quarter of
//     the timeout by one sweep for the process (WriteGuard), so a stream
//     is ended between 3/4 and 1 × the timeout after the socket last took
//     a byte from it. On a connection that is
//     not counted (a listener not wrapped by CountWrites), the whole
//     flush must complete within the timeout of its start. A client that
//     reads slowly but steadily (an informer decoding a large collection
//     on a loaded machine) keeps its stream; the earlier rule (the whole
//     flush within 10 s) ended such streams and their reflectors
//     re-listed (64 informers on 2,000 ConfigMaps of 10 KiB:
//     bench/RESULTS.md ## storm). fasthttp applies the write timeout to
//     the response it writes itself (headers, a GET's body);
//   - a GET or LIST that overruns its request timeout is aborted even
//     while its write is blocked: the request's context ending moves the
//     connection's write deadline into the past (WriteGuard).
//
// A whole body (a GET's object, a small LIST sent with a Content-Length)
// is written by fasthttp after the handler returned, under the same
// write timeout for the whole response. Its request keeps its reserved
// bytes until then (HeldBody): a client that sends GETs of large objects
// on many connections and never reads holds at most its share of the
// in-flight bytes, the other requests wait in its queue and get 429, and
// nothing it holds is outside the budget. The seat is given back when the
// handler returns: the request needs no CPU while its body waits for the
// client.
//
// An aborted stream ends the connection (the client sees an incomplete
// response, never a short list); its seat and bytes are released and the
// Aborter (package proxy: counted in lazyapi_streams_aborted_total{reason},
// logged at most once per client per minute) is told.

// AbortReason says why a response was ended.
type AbortReason uint8

const (
	// AbortStalled: the client took none of the response's bytes for the
	// write timeout.
	AbortStalled AbortReason = iota
	// AbortRequestTimeout: the request's context ended (its request
	// timeout) while the response was being written.
	AbortRequestTimeout
)

// Aborter is told of every response a WriteGuard or HeldBody ended by a
// deadline: stream names the response ("list", "watch", "body"), client
// its client. It is called once per response, on the writing goroutine
// (a HeldBody's: fasthttp's), and must be safe for concurrent use.
type Aborter interface {
	Aborted(reason AbortReason, stream, client string)
}

// pastDeadline is a write deadline that has passed: a blocked write fails
// at once.
var pastDeadline = time.Unix(1, 0)

// WriteGuard bounds the writes of one streamed response on its
// connection. Arm is called by the writing goroutine before each write;
// the context's end may fire from any goroutine. It is safe for
// concurrent use. Its methods are no-ops on a nil *WriteGuard.
//
// On a counted connection (pc: every connection proxy's Serve accepts) a
// write costs the guard a lock and nothing more: the first Arm registers
// the guard with the process's one sweep (guardSweep), which looks every
// quarter of the timeout at the writes under way (Progress.Writing) and
// ends one that made no progress by moving its deadline into the past.
// The guard used to set a write deadline and reset a timer at every
// write, and the timer then fired up to 5 times after it (a goroutine
// each): at 15,000 kubelet-shaped watches that was 7% of the server's CPU
// samples and most of its timer wake-ups (bench/RESULTS.md ## fanout). On
// a connection that is not counted each Arm sets a deadline of the
// timeout from now, as before.
type WriteGuard struct {
	conn    net.Conn // nil: no deadlines (tests without a connection)
	pc      *Progress
	aborter Aborter // nil: aborts are not reported
	client  string
	what    string
	timeout time.Duration
	stop    func() bool

	mu         sync.Mutex
	expired    bool // the request's context ended: the deadline stays past
	finished   bool // Done was called
	stalled    bool // the sweep found the write stuck: the deadline stays past
	registered bool // in the sweep (pc != nil, armed once, not done)

	// The sweep's view, touched only by its goroutine: the bytes written
	// at its last look, when they last moved (or the write was first seen
	// under way), whether a write was under way then.
	mark    int64
	markAt  time.Time
	writing bool
}

// GuardWrites returns the WriteGuard of a response streamed on c (nil:
// none, deadlines are not set); ctx is the request's (its end aborts a
// blocked write), timeout the write timeout. Done reports a response
// ended by a deadline to a, naming it what ("list", "watch") and client.
func GuardWrites(ctx context.Context, c net.Conn, timeout time.Duration, a Aborter, what, client string) *WriteGuard {
	g := &WriteGuard{conn: c, aborter: a, client: client, what: what, timeout: timeout}
	if g.conn != nil {
		g.pc = ProgressOf(g.conn)
		g.stop = context.AfterFunc(ctx, func() {
			g.mu.Lock()
			g.expired = true
			_ = g.conn.SetWriteDeadline(pastDeadline)
			g.mu.Unlock()
		})
	}
	return g
}

// Progress is the write progress of the guarded connection; nil when it
// is not counted (see CountWrites) or there is none.
func (g *WriteGuard) Progress() *Progress { return g.pc }

// MarkExpired records that the request's context ended while the
// response waited outside a write (for data to send): Done then reports
// a stream ended by a deadline as AbortRequestTimeout. It does nothing
// without a connection.
func (g *WriteGuard) MarkExpired() {
	if g.conn == nil {
		return
	}
	g.mu.Lock()
	g.expired = true
	g.mu.Unlock()
}

// Arm readies the guard for the next write. On a counted connection the
// first Arm clears the connection's write deadline (fasthttp's, of the
// write timeout from the response's start) and hands the guard to the
// sweep; later ones do nothing. On other connections it sets the deadline
// of the write: the write timeout from now.
func (g *WriteGuard) Arm() {
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

// look is the sweep's look at the guard at now: whether its write is
// stuck (under way, no byte taken for 3/4 of the timeout; the sweep looks
// every quarter, so a stream is ended between 3/4 and 1 × the timeout
// after the socket last took a byte from it).
func (g *WriteGuard) look(now time.Time) (stuck bool) {
	w, writing := g.pc.Written(), g.pc.Writing()
	if w != g.mark || !writing || !g.writing {
		g.mark, g.markAt, g.writing = w, now, writing
		return false
	}
	return now.Sub(g.markAt) >= g.timeout-g.timeout/4
}

// cut ends a stuck write: its deadline moves into the past, and stays
// there (Arm no longer clears it).
func (g *WriteGuard) cut() {
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
	guards  map[*WriteGuard]struct{}
	running bool
	sooner  chan struct{} // a guard with a shorter period came
	period  time.Duration // of the running loop
}

var sweep = &guardSweep{guards: make(map[*WriteGuard]struct{}), sooner: make(chan struct{}, 1)}

func (sw *guardSweep) add(g *WriteGuard) {
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

func (sw *guardSweep) remove(g *WriteGuard) {
	sw.mu.Lock()
	delete(sw.guards, g)
	sw.mu.Unlock()
}

// loop looks at the guards until none is left.
func (sw *guardSweep) loop(period time.Duration) {
	t := time.NewTimer(period)
	defer t.Stop()
	var stuck []*WriteGuard
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

// Done ends the guard after the stream's last write; err is the stream's
// error. It reports a stream ended by a deadline to the Aborter.
func (g *WriteGuard) Done(err error) {
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
	if g.aborter == nil {
		return
	}
	if expired {
		g.aborter.Aborted(AbortRequestTimeout, g.what, g.client)
		return
	}
	g.aborter.Aborted(AbortStalled, g.what, g.client)
}

// HeldBody is a whole response body handed to fasthttp with what its
// request holds (its admission's reserved bytes): Close, which fasthttp
// calls after the body's last byte is written, when the write failed, or
// when the response is reset (a closed connection, another body set),
// calls the release function and puts the buffer back. A write that
// failed for its deadline (the client read nothing for the write timeout)
// is reported to the Aborter as a stalled "body".
type HeldBody struct {
	buf     *[]byte // the body, a pooled buffer
	off     int
	put     func(*[]byte)
	release func()
	aborter Aborter
	client  string
}

var _ fasthttp.BodyWriterTo = (*HeldBody)(nil)

// NewHeldBody returns the HeldBody of *buf, a buffer put back with put
// after the write; release (may be nil) is called once with it. a (may be
// nil) is told of a write that ran out of its deadline, naming client.
func NewHeldBody(buf *[]byte, put func(*[]byte), release func(), a Aborter, client string) *HeldBody {
	return &HeldBody{buf: buf, put: put, release: release, aborter: a, client: client}
}

// Len is the length of the body.
func (h *HeldBody) Len() int { return len(*h.buf) }

func (h *HeldBody) Read(p []byte) (int, error) {
	if h.buf == nil || h.off >= len(*h.buf) {
		return 0, io.EOF
	}
	n := copy(p, (*h.buf)[h.off:])
	h.off += n
	return n, nil
}

// WriteTo writes the rest of the body in one write: no copy through a
// buffer of fasthttp's.
func (h *HeldBody) WriteTo(w io.Writer) (int64, error) {
	if h.buf == nil || h.off >= len(*h.buf) {
		return 0, nil
	}
	n, err := w.Write((*h.buf)[h.off:])
	h.off += n
	return int64(n), err
}

// SupportsBodyWriteTo: fasthttp may use WriteTo.
func (h *HeldBody) SupportsBodyWriteTo() bool { return true }

// Close releases what the request holds and the buffer; it is
// idempotent.
func (h *HeldBody) Close() error {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	if h.buf != nil {
		h.put(h.buf)
		h.buf = nil
	}
	return nil
}

// CloseWithError is fasthttp's close with the write's error (after
// Close): a write that ran out of the write timeout is a stalled client.
func (h *HeldBody) CloseWithError(err error) error {
	_ = h.Close()
	if errors.Is(err, os.ErrDeadlineExceeded) && h.aborter != nil {
		h.aborter.Aborted(AbortStalled, "body", h.client)
	}
	return nil
}
