package bench

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// link is the client side of the network a scenario's connections share:
// it counts the bytes read from the server (TLS records, HTTP headers and
// chunk framing included: bytes on the wire above TCP) and, with a rate,
// throttles reads to it, as a link of that speed would (all connections
// share one token bucket).
type link struct {
	read atomic.Int64
	lim  *rate.Limiter // nil: unthrottled
}

// newLink returns a link throttled to bytesPerSec (0: unthrottled).
func newLink(bytesPerSec float64) *link {
	l := &link{}
	if bytesPerSec > 0 {
		// A burst of 64 KiB: a 1 Gbit/s link delivers it in 0.5 ms.
		l.lim = rate.NewLimiter(rate.Limit(bytesPerSec), linkBurst)
	}
	return l
}

const linkBurst = 64 << 10

// dial dials a TCP connection whose reads go through l.
func (l *link) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &linkConn{Conn: c, l: l}, nil
}

type linkConn struct {
	net.Conn
	l *link
}

func (c *linkConn) Read(p []byte) (int, error) {
	if c.l.lim != nil && len(p) > linkBurst {
		p = p[:linkBurst]
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.l.read.Add(int64(n))
		if c.l.lim != nil {
			// The bytes arrived; the wait makes the next read come as
			// late as the link would have delivered them.
			_ = c.l.lim.WaitN(context.Background(), n)
		}
	}
	return n, err
}
