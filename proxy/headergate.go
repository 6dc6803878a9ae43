package proxy

import (
	"bytes"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
)

// Request headers up to 1 MiB, without 1 MiB per connection.
//
// fasthttp parses a request only once its whole header is in the
// connection's read buffer, so accepting kube-apiserver's 1 MiB of headers
// needs a 1 MiB read buffer (Server.ReadBufferSize). Taken when the first
// byte of a request arrives, it would cost 1 MiB of heap for every
// connection that sends part of a request and stops (measured: 1,000 such
// connections, +1,010 MiB of heap in use; bench/RESULTS.md ## request
// headers). A headerGate in front of fasthttp reads each request's header
// itself, into a buffer that grows with the bytes that arrived (as Go's
// server does), and hands fasthttp nothing until the header is complete:
// fasthttp's large buffer is then held only while it parses a complete
// header, and ReduceMemoryUsage returns it to the pool before the handler
// runs. Bodies (Content-Length) pass straight through; a chunked body turns
// the gate off for the rest of the connection, which the handler closes
// after its response (handle: chunkedBody).

// gateBufSize is a gate's first buffer; it doubles up to maxHeaderBytes.
const gateBufSize = 4 << 10

var gateBufs = sync.Pool{New: func() any { b := make([]byte, 0, gateBufSize); return &b }}

// gateListener wraps every accepted connection in a headerGate; clear
// marks them (ClearText).
type gateListener struct {
	net.Listener
	clear clearMode
}

func (l gateListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, isTLS := c.(*tls.Conn)
	if _, counted := c.(*progressConn); !counted && !isTLS {
		// Write guards measure progress on the socket (progress.go).
		c = &progressConn{Conn: c}
	}
	g := headerGate{Conn: c, clear: l.clear}
	if isTLS {
		// fasthttp and authn find client certificates through the
		// connection's ConnectionState.
		return &tlsHeaderGate{headerGate: g, tc: tc}, nil
	}
	return &g, nil
}

// headerGate is a net.Conn whose reads deliver a request's header only once
// all of it arrived. It is used by one goroutine at a time (fasthttp's
// connection goroutine), as net.Conn reads are.
type headerGate struct {
	net.Conn
	// buf holds bytes read from Conn and not yet delivered; out is how many
	// of them may be delivered now (a complete header, then body bytes);
	// buf[:off] are delivered.
	buf      *[]byte
	off, out int
	// body is how many body bytes of the current request are still to be
	// delivered before the next header.
	body int64
	// open: a chunked body was seen; everything passes through.
	open bool
	// first receives a request's first bytes, before a buffer is taken.
	first [16]byte
	// clear: the connection is clear text (ClearText).
	clear clearMode
}

// Read implements net.Conn.
func (g *headerGate) Read(p []byte) (int, error) {
	for {
		if g.off < g.out {
			n := copy(p, (*g.buf)[g.off:g.out])
			g.off += n
			g.compact()
			return n, nil
		}
		if g.buf != nil && g.off < len(*g.buf) && g.body > 0 {
			// Body bytes that arrived with the header.
			g.out = g.off + int(min(g.body, int64(len(*g.buf)-g.off)))
			g.body -= int64(g.out - g.off)
			continue
		}
		if g.open || g.body > 0 {
			if g.buf != nil && g.off < len(*g.buf) {
				g.out = len(*g.buf)
				continue
			}
			q := p
			if !g.open && int64(len(q)) > g.body {
				q = q[:g.body]
			}
			n, err := g.Conn.Read(q)
			if !g.open {
				g.body -= int64(n)
			}
			return n, err
		}
		if err := g.readHeader(); err != nil {
			return 0, err
		}
	}
}

// compact drops delivered bytes; an empty buffer goes back to the pool
// (a grown one is dropped) so that an idle connection holds none.
func (g *headerGate) compact() {
	if g.buf == nil || g.off < len(*g.buf) {
		return
	}
	if cap(*g.buf) == gateBufSize {
		*g.buf = (*g.buf)[:0]
		gateBufs.Put(g.buf)
	}
	g.buf, g.off, g.out = nil, 0, 0
}

// readHeader reads until buf holds a complete request header (or more than
// maxHeaderBytes, which fasthttp then refuses with 431) and marks it
// deliverable.
func (g *headerGate) readHeader() error {
	if g.buf == nil {
		// Wait for the first bytes without a buffer: an idle connection
		// holds none.
		n, err := g.Conn.Read(g.first[:])
		if n == 0 {
			return err
		}
		g.buf = gateBufs.Get().(*[]byte)
		*g.buf = append((*g.buf)[:0], g.first[:n]...)
	}
	b := *g.buf
	scanned := g.off
	for {
		if end := headerEnd(b[g.off:], scanned-g.off); end >= 0 {
			g.out = g.off + end
			g.body, g.open = bodyLength(b[g.off:g.out])
			*g.buf = b
			return nil
		}
		if len(b)-g.off > maxHeaderBytes {
			g.out = len(b) // too large: fasthttp answers 431
			*g.buf = b
			return nil
		}
		scanned = max(g.off, len(b)-3)
		if len(b) == cap(b) {
			c := min(2*cap(b), maxHeaderBytes+gateBufSize)
			if c <= len(b) {
				g.out = len(b) // cannot grow: fasthttp answers 431
				*g.buf = b
				return nil
			}
			nb := make([]byte, len(b), c)
			copy(nb, b)
			if cap(b) == gateBufSize {
				*g.buf = b[:0]
				gateBufs.Put(g.buf)
			}
			g.buf = &nb
			b = nb
		}
		n, err := g.Conn.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		*g.buf = b
		if err != nil {
			if n > 0 || len(b) > g.off {
				// Hand over what arrived: fasthttp reports the error.
				g.out = len(b)
				return nil
			}
			g.compact()
			return err
		}
	}
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

// bodyLength returns the request body's Content-Length, or open=true for a
// chunked (or otherwise framed) body.
func bodyLength(h []byte) (n int64, open bool) {
	for len(h) > 0 {
		line := h
		if i := bytes.IndexByte(h, '\n'); i >= 0 {
			line, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")):
			return 0, true
		case bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")):
			v, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
			if err != nil || v < 0 {
				return 0, true // fasthttp refuses it
			}
			n = v
		}
	}
	return n, false
}

// tlsHeaderGate is a headerGate over a TLS connection.
type tlsHeaderGate struct {
	headerGate
	tc *tls.Conn
}

func (g *tlsHeaderGate) Handshake() error                     { return g.tc.Handshake() }
func (g *tlsHeaderGate) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }

// unwrapConn returns the connection under a headerGate (for readers that
// only wait for the client to hang up, see watchHangup), else c.
func unwrapConn(c net.Conn) net.Conn {
	switch g := c.(type) {
	case *headerGate:
		return g.Conn
	case *tlsHeaderGate:
		return g.Conn
	}
	return c
}
