package conn

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Request headers up to 1 MiB, without 1 MiB per connection; bodies only
// for the handlers that read them.
//
// fasthttp parses a request only once its whole header is in the
// connection's read buffer, so accepting kube-apiserver's 1 MiB of headers
// needs a 1 MiB read buffer (Server.ReadBufferSize). Taken when the first
// byte of a request arrives, it would cost 1 MiB of heap for every
// connection that sends part of a request and stops (measured: 1,000 such
// connections, +1,010 MiB of heap in use; bench/RESULTS.md ## request
// headers). A Gate in front of fasthttp reads each request's header
// itself, into a buffer that grows with the bytes that arrived (as Go's
// server does), and hands fasthttp nothing until the header is complete:
// fasthttp's large buffer is then held only while it parses a complete
// header, and ReduceMemoryUsage returns it to the pool before the handler
// runs. The header must be complete within Server.ReadTimeout of its first
// byte (headerTimeout).
//
// fasthttp also reads a whole body (up to MaxRequestBodySize, allocated
// as declared) before it calls the handler, that is before authentication:
// 500 connections declaring 1 MiB and sending one byte held 500 MiB (issue
// 23). kube-apiserver authenticates and authorizes first and reads a body
// only in the handlers that take one. So the gate withholds bodies: it
// renames a request's framing headers (Content-Length, Transfer-Encoding,
// and Expect: 100-continue with them) to inert names of the same length,
// fasthttp sees a request without a body, and the handler that needs the
// body reads it from the gate (Body; proxy reads it after authorization) in
// bounded chunks. A body no handler read is skipped before the next
// request when at most maxUnreadBody bytes of it remain, as Go's server
// does; otherwise (and for a chunked body) the response closes the
// connection (BodyEndsConn). Before authentication a connection holds at
// most its header (up to MaxHeaderBytes, in a buffer that grows as bytes
// arrive) and the bytes that came with it.

// MaxHeaderBytes is Go's limit on a request's line and headers for
// kube-apiserver: http.Server.MaxHeaderBytes 1 << 20 (k8s.io/apiserver
// SecureServingInfo) plus the 4096 bytes net/http allows on top. A longer
// header is handed to fasthttp as it is (its read buffer is this size: it
// answers 431).
const MaxHeaderBytes = 1<<20 + 4096

// gateBufSize is a gate's first buffer; it doubles up to MaxHeaderBytes.
const gateBufSize = 4 << 10

// maxUnreadBody is the most of a body nobody read that the gate skips to
// keep the connection (Go's net/http: 256 KiB).
const maxUnreadBody = 256 << 10

var gateBufs = sync.Pool{New: func() any { b := make([]byte, 0, gateBufSize); return &b }}

// Listener wraps every accepted connection in a Gate (counted as a
// Progress unless it is one or TLS); Clear marks them (ClearText).
type Listener struct {
	net.Listener
	Clear ClearMode
	// HeaderTimeout bounds a header's read from its first byte.
	HeaderTimeout time.Duration
	// Budget bounds the grown header buffers of all connections.
	Budget *Budget
}

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, isTLS := c.(*tls.Conn)
	if _, counted := c.(*Progress); !counted && !isTLS {
		// Write guards measure progress on the socket (writeguard.go).
		c = &Progress{Conn: c}
	}
	if isTLS {
		// fasthttp and authn find client certificates through the
		// connection's ConnectionState.
		tg := &tlsGate{tc: tc}
		l.init(&tg.Gate, c)
		return tg, nil
	}
	g := new(Gate)
	l.init(g, c)
	return g, nil
}

func (l Listener) init(g *Gate, c net.Conn) {
	g.Conn, g.clear, g.headerTimeout, g.budget = c, l.Clear, l.HeaderTimeout, l.Budget
}

// Gate is a net.Conn whose reads deliver a request's header only once
// all of it arrived, and never its body (Body reads that). It is
// used by one goroutine at a time (fasthttp's connection goroutine, then
// the handler it calls), as net.Conn reads are.
type Gate struct {
	net.Conn
	// buf holds bytes read from Conn and not yet delivered; out is how many
	// of them may be delivered now (a complete header); buf[:off] are
	// delivered (or taken as body bytes).
	buf      *[]byte
	off, out int
	// body is how many bytes of the current request's body
	// (Content-Length) are withheld and not yet read or skipped.
	body int64
	// chunked: the current request's body is chunked; it is withheld and
	// its end not tracked, so the connection ends with the response.
	chunked bool
	// expect: the client waits for "100 Continue" before it sends the
	// body; sent at the handler's first read (as Go's server).
	expect bool
	// first receives a request's first bytes, before a buffer is taken.
	first [16]byte
	// budget bounds header buffers grown past gateBufSize; held is what
	// this connection's took from it (headerbudget.go).
	budget *Budget
	held   atomic.Int64
	// headerTimeout bounds a header's read from its first byte (0: no
	// bound of the gate's own); headerDeadline is the current header's
	// (zero between headers).
	headerTimeout  time.Duration
	headerDeadline time.Time
	// deadline is the read deadline last set through the gate (by
	// fasthttp); a header's read uses the earlier of it and
	// headerDeadline, then restores it.
	deadline time.Time
	// clear: the connection is clear text (ClearText).
	clear ClearMode
	// lingers: the response ends the connection with the request's body
	// unread (EndWithUnreadBody); Close lingers.
	lingers atomic.Bool
}

// SetDeadline implements net.Conn.
func (g *Gate) SetDeadline(t time.Time) error {
	g.deadline = t
	return g.Conn.SetDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (g *Gate) SetReadDeadline(t time.Time) error {
	g.deadline = t
	return g.Conn.SetReadDeadline(t)
}

// errUnreadBody: fasthttp asked for the next request on a connection
// whose previous body was neither read nor skippable (BodyEndsConn closes
// such a connection, so this is a guard).
// errHeaderBudget: a header could not grow within the header budget; the
// connection was answered 429 and ends.
var errHeaderBudget = errors.New("cannot read the request header: the header buffer budget is full")

var errUnreadBody = errors.New("cannot read the next request: the previous request's body was not read")

// Read implements net.Conn.
func (g *Gate) Read(p []byte) (int, error) {
	for {
		if g.off < g.out {
			n := copy(p, (*g.buf)[g.off:g.out])
			g.off += n
			g.compact()
			return n, nil
		}
		if g.chunked || g.body > maxUnreadBody {
			return 0, errUnreadBody
		}
		if g.body > 0 {
			if err := g.skipBody(); err != nil {
				return 0, err
			}
		}
		if err := g.readHeader(); err != nil {
			return 0, err
		}
	}
}

// skipBody reads and drops what is left of a Content-Length body.
func (g *Gate) skipBody() error {
	var scratch [4 << 10]byte
	g.expect = false // the client gets its final answer without a 100
	for g.body > 0 {
		n, err := g.readBody(scratch[:])
		if err == io.EOF && g.body == 0 {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrNoProgress
		}
	}
	return nil
}

// readBody reads withheld body bytes of the current request into p: those
// that arrived with the header first, then the connection's. For a
// Content-Length body it returns io.EOF at its end; a chunked body's bytes
// are returned raw (httputil.NewChunkedReader decodes them).
func (g *Gate) readBody(p []byte) (int, error) {
	if !g.chunked && g.body <= 0 {
		return 0, io.EOF
	}
	if g.expect {
		g.expect = false
		if _, err := io.WriteString(g.Conn, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return 0, err
		}
	}
	if !g.chunked && int64(len(p)) > g.body {
		p = p[:g.body]
	}
	var n int
	var err error
	if g.buf != nil && g.off < len(*g.buf) {
		n = copy(p, (*g.buf)[g.off:])
		g.off += n
		g.out = g.off
		g.compact()
	} else {
		n, err = g.Conn.Read(p)
	}
	if !g.chunked {
		g.body -= int64(n)
		if g.body == 0 && err == nil {
			err = io.EOF
		}
	}
	return n, err
}

// compact drops delivered bytes; an empty buffer goes back to the pool
// (a grown one is dropped) so that an idle connection holds none.
func (g *Gate) compact() {
	if g.buf == nil || g.off < len(*g.buf) {
		return
	}
	if cap(*g.buf) == gateBufSize {
		*g.buf = (*g.buf)[:0]
		gateBufs.Put(g.buf)
	} else {
		g.releaseHeader()
	}
	g.buf, g.off, g.out = nil, 0, 0
}

// Close implements net.Conn; it gives back what the header buffer took
// from the budget. A connection whose response ends it with the request's
// body unread (EndWithUnreadBody) lingers first.
func (g *Gate) Close() error {
	g.releaseHeader()
	if g.lingers.CompareAndSwap(true, false) {
		linger(g.Conn)
	}
	return g.Conn.Close()
}

// lingerTime bounds how long a connection closed with its request's body
// unread waits for the rest of it (Go's server: rstAvoidanceDelay).
const lingerTime = 500 * time.Millisecond

// linger closes c's sending side (the response is complete: the client
// reads it, then the end) and reads and drops what the client still sends,
// up to its end, lingerTime or maxUnreadBody bytes. A socket closed with
// received bytes unread, or that receives bytes once closed, answers with
// a reset: the client may get ECONNRESET before the response's end, and
// the kernel drops what the response had not yet sent (a chunked POST
// answered and closed at once, its last bytes still arriving: issue of
// TestHeaderGatePipelining). Go's server closes the sending side and waits
// too (closeWriteAndWait).
func linger(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		_ = tc.CloseWrite() // close_notify
		c = tc.NetConn()
	}
	if p, ok := c.(*Progress); ok {
		c = p.Conn
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil || c.SetReadDeadline(time.Now().Add(lingerTime)) != nil {
		return
	}
	var scratch [4 << 10]byte
	for n := 0; n < maxUnreadBody; {
		m, err := c.Read(scratch[:])
		if err != nil {
			return
		}
		n += m
	}
}

// readHeader reads until buf holds a complete request header (or more than
// MaxHeaderBytes, which fasthttp then refuses with 431), takes its body
// (takeBody) and marks the header deliverable. Once its first byte
// arrived, the header must be complete within headerTimeout.
func (g *Gate) readHeader() error {
	armed := false
	defer func() {
		if armed {
			// fasthttp's deadline again (it arms its own after a header).
			_ = g.Conn.SetReadDeadline(g.deadline)
		}
	}()
	arm := func() {
		if armed || g.headerDeadline.IsZero() {
			return
		}
		d := g.headerDeadline
		if !g.deadline.IsZero() && g.deadline.Before(d) {
			d = g.deadline
		}
		armed = g.Conn.SetReadDeadline(d) == nil
	}
	if g.buf == nil {
		// Wait for the first bytes without a buffer: an idle connection
		// holds none. A header partly handed over already (a timeout
		// below) is still under its deadline.
		arm()
		n, err := g.Conn.Read(g.first[:])
		if n == 0 {
			return err
		}
		if g.headerDeadline.IsZero() && g.headerTimeout > 0 {
			g.headerDeadline = time.Now().Add(g.headerTimeout)
		}
		g.buf = gateBufs.Get().(*[]byte)
		*g.buf = append((*g.buf)[:0], g.first[:n]...)
	}
	b := *g.buf
	scanned := g.off
	for {
		if end := headerEnd(b[g.off:], scanned-g.off); end >= 0 {
			g.out = g.off + end
			g.body, g.chunked, g.expect = takeBody(b[g.off:g.out])
			g.headerDeadline = time.Time{}
			*g.buf = b
			return nil
		}
		if len(b)-g.off > MaxHeaderBytes {
			g.out = len(b) // too large: fasthttp answers 431
			g.headerDeadline = time.Time{}
			*g.buf = b
			return nil
		}
		scanned = max(g.off, len(b)-3)
		if len(b) == cap(b) {
			var grown bool
			var err error
			if b, grown, err = g.grow(b); !grown {
				return err
			}
		}
		arm()
		n, err := g.Conn.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		*g.buf = b
		if err != nil {
			if n > 0 || len(b) > g.off {
				// Hand over what arrived: fasthttp reports the error
				// (the next read fails at once past the deadline).
				g.out = len(b)
				return nil
			}
			g.compact()
			return err
		}
	}
}

// grow doubles the buffer of a header that filled it (b), up to
// MaxHeaderBytes and within the budget. grown false: the header read ends
// here; with a nil error it cannot grow and is handed over as it is
// (fasthttp answers 431), else the budget refused it (refuseHeader).
func (g *Gate) grow(b []byte) (nb []byte, grown bool, err error) {
	c := min(2*cap(b), MaxHeaderBytes+gateBufSize)
	if c <= len(b) {
		g.out = len(b) // cannot grow: fasthttp answers 431
		g.headerDeadline = time.Time{}
		*g.buf = b
		return nil, false, nil
	}
	if !g.budget.take(int64(c) - g.held.Load()) {
		return nil, false, g.refuseHeader()
	}
	g.held.Store(int64(c))
	nb = make([]byte, len(b), c)
	copy(nb, b)
	if cap(b) == gateBufSize {
		*g.buf = b[:0]
		gateBufs.Put(g.buf)
	}
	g.buf = &nb
	return nb, true, nil
}

// headerEnd returns the length of the header at the start of b (through
// its blank line), or -1; bytes before from were scanned already. Leading
// blank lines (allowed before a request line) are skipped.
func headerEnd(b []byte, from int) int {
	start := 0
	for start < len(b) && (b[start] == '\r' || b[start] == '\n') {
		start++
	}
	from = max(from, start)
	for i := from; i < len(b); i++ {
		if b[i] != '\n' || i == start {
			continue
		}
		if b[i-1] == '\n' {
			return i + 1
		}
		if b[i-1] == '\r' && i-2 >= start && b[i-2] == '\n' {
			return i + 1
		}
	}
	return -1
}

// Inert names of the framing headers a gate takes: as long as the names
// they replace, so the header keeps its length.
var (
	hdrContentLength    = []byte("Content-Length")
	hdrTransferEncoding = []byte("Transfer-Encoding")
	hdrExpect           = []byte("Expect")
	inertContentLength  = "X-Withheld-Len"    // len("Content-Length")
	inertTransferEnc    = "X-Withheld-Framed" // len("Transfer-Encoding")
	inertExpect         = "X-Expt"            // len("Expect")
)

// takeBody takes the body of the request whose header is h away from
// fasthttp: it renames the framing headers in place and returns the body's
// Content-Length, or chunked, and whether the client expects a 100
// Continue. A header whose framing fasthttp refuses (several or invalid
// Content-Lengths, a Transfer-Encoding other than "chunked" or "identity",
// several Transfer-Encodings, one on HTTP/1.0) is left as it is: fasthttp
// answers it 400 and closes the connection before reading a body.
func takeBody(h []byte) (n int64, chunked, expect bool) {
	var clName, teName, exName []byte // the names to rename, in h
	var cls, tes int
	var expectValue []byte
	line, h, ok := bytes.Cut(h, []byte("\n"))
	if !ok {
		return 0, false, false
	}
	http10 := bytes.HasSuffix(bytes.TrimSpace(line), []byte("HTTP/1.0"))
	for len(h) > 0 {
		line, h, _ = bytes.Cut(h, []byte("\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		name = bytes.TrimSpace(name)
		value = bytes.TrimSpace(value)
		switch {
		case asciiEqualFold(name, hdrContentLength):
			cls++
			clName = name
			v, ok := parseLength(value)
			if !ok {
				return 0, false, false // fasthttp refuses it
			}
			n = v
		case asciiEqualFold(name, hdrTransferEncoding):
			tes++
			switch {
			case asciiEqualFold(value, []byte("chunked")):
				teName = name
			case asciiEqualFold(value, []byte("identity")):
				// fasthttp ignores it: Content-Length frames the body.
			default:
				return 0, false, false // fasthttp refuses it
			}
		case asciiEqualFold(name, hdrExpect):
			exName, expectValue = name, value
		}
	}
	if cls > 1 || tes > 1 || (tes > 0 && http10) {
		return 0, false, false // fasthttp refuses it
	}
	if teName != nil {
		chunked, n = true, 0 // a Content-Length beside it is ignored
	}
	if n == 0 && !chunked {
		return 0, false, false // no body: nothing to take
	}
	if clName != nil {
		copy(clName, inertContentLength)
	}
	if teName != nil {
		copy(teName, inertTransferEnc)
	}
	if exName != nil && asciiEqualFold(expectValue, []byte("100-continue")) {
		copy(exName, inertExpect)
		expect = true
	}
	return n, chunked, expect
}

// parseLength parses a Content-Length as fasthttp does: decimal digits
// only.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// asciiEqualFold is bytes.EqualFold for ASCII only (fasthttp's header
// names: "Tranſfer-Encoding" is not "Transfer-Encoding").
func asciiEqualFold(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// Withheld is the current request's withheld body: its Content-Length
// still unread, or chunked (its end is not tracked).
func (g *Gate) Withheld() (length int64, chunked bool) { return g.body, g.chunked }

// BodyEndsConn reports whether the current request's body, not read, cannot
// be skipped before the next request (a chunked body, more than
// maxUnreadBody left, or a client waiting for 100 Continue): the response
// must close the connection, as Go's server does.
func (g *Gate) BodyEndsConn() bool {
	return g.chunked || g.body > maxUnreadBody || (g.body > 0 && g.expect)
}

// EndWithUnreadBody records that the response ends the connection with
// the request's body unread (BodyEndsConn): Close then closes the
// sending side first and reads what the client still sends (linger), so
// that the client gets the whole response and its end, not a reset.
func (g *Gate) EndWithUnreadBody() { g.lingers.Store(true) }

// Body reads the current request's withheld body: for a Content-Length
// body up to io.EOF at its end, a chunked body's bytes raw
// (httputil.NewChunkedReader decodes them).
func (g *Gate) Body() io.Reader { return gateBody{g} }

// gateBody reads a request's withheld body from its gate.
type gateBody struct{ g *Gate }

func (b gateBody) Read(p []byte) (int, error) { return b.g.readBody(p) }

// Pending returns a copy of the bytes that arrived after the current
// request's header and were not delivered (an upgraded connection's
// first bytes), or nil.
func (g *Gate) Pending() []byte {
	var pending []byte
	if g.buf != nil && g.off < len(*g.buf) {
		pending = append(pending, (*g.buf)[g.off:]...)
	}
	return pending
}

// GateOf returns the Gate of a served connection, or nil.
func GateOf(c net.Conn) *Gate {
	switch g := c.(type) {
	case *Gate:
		return g
	case *tlsGate:
		return &g.Gate
	}
	return nil
}

// tlsGate is a Gate over a TLS connection.
type tlsGate struct {
	Gate
	tc *tls.Conn
}

func (g *tlsGate) Handshake() error                     { return g.tc.Handshake() }
func (g *tlsGate) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }

// Unwrap returns the connection under a Gate (for readers that only wait
// for the client to hang up, as proxy's watchHangup), else c.
func Unwrap(c net.Conn) net.Conn {
	switch g := c.(type) {
	case *Gate:
		return g.Conn
	case *tlsGate:
		return g.Conn
	}
	return c
}
