package etcdtest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards TCP connections from a loopback port to an etcd member
// (to, host:port), counts the bytes both ways and delivers every chunk,
// both ways, the delay set by SetDelay after it arrived (none at first).
// It tells a member's traffic apart (the members of a Cluster run in the
// test's process and share one Prometheus registry) and makes a member
// that answers, slowly; chunks are not serialised behind each other's
// delay, so throughput is unchanged. While the member is down, a client's
// connection is accepted and closed. Partition, Cut and Heal make the
// path to the member fail for the proxy's clients only: a partition
// (connections open, nothing delivered) or a member gone (connections
// closed), while clients that reach the member directly are served. It
// is safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	to       string
	sent     atomic.Int64 // bytes clients sent to the member
	received atomic.Int64 // bytes the member sent back
	delay    atomic.Int64 // nanoseconds
	mu       sync.Mutex
	conns    map[net.Conn]struct{} // both ends of every open connection; nil once closed
	// held, while partitioned, is closed by Heal (or Cut); nil otherwise.
	held   chan struct{}
	cut    bool          // connections are closed as they come
	closed chan struct{} // closed when the proxy closes
	newTap func() io.Writer
	wg     sync.WaitGroup
}

// NewProxy starts a proxy to the member at to and closes it, with every
// connection through it, when the test ends.
func NewProxy(tb testing.TB, to string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{ln: ln, to: to, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

// URL is the endpoint clients are given for the member.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Bytes is the traffic through the proxy so far, both ways.
func (p *Proxy) Bytes() int64 { return p.sent.Load() + p.received.Load() }

// SetDelay delays the chunks read from now on by d.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// TapSent shows a test the bytes its clients send: each connection
// accepted from now on also writes what its client sent, in order, to a
// writer of its own that newTap returns (closed, if it is an io.Closer,
// when the connection ends; after a write fails, the connection's bytes
// are no longer written to it).
func (p *Proxy) TapSent(newTap func() io.Writer) {
	p.mu.Lock()
	p.newTap = newTap
	p.mu.Unlock()
}

// Partition stops delivering bytes, both ways, on every connection, open
// or new, until Heal: connections stay open and nothing answers, as across
// a network partition (what was sent is delivered after Heal, as TCP
// does once the path is back).
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// Cut closes every connection and, until Heal, closes new ones as they
// come, as when the member is down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.release()
	for c := range p.conns {
		c.Close()
	}
}

// Heal ends a Partition or a Cut: bytes flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	p.release()
}

// release ends a partition; p.mu is held.
func (p *Proxy) release() {
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// flowing waits while the proxy is partitioned and reports whether bytes
// may be delivered (false once it is cut or closed).
func (p *Proxy) flowing() bool {
	p.mu.Lock()
	held, cut := p.held, p.cut || p.conns == nil
	p.mu.Unlock()
	if cut {
		return false
	}
	if held != nil {
		select {
		case <-held:
			return p.flowing()
		case <-p.closed:
			return false
		}
	}
	return true
}

func (p *Proxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil || add && p.cut {
		return false
	}
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards c until either side ends, then ends both.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.to, time.Second)
	if err != nil {
		return // the member is down: the client sees the connection close
	}
	defer up.Close()
	if !p.track(c, true) || !p.track(up, true) {
		return
	}
	defer p.track(c, false)
	defer p.track(up, false)
	var tap io.Writer
	p.mu.Lock()
	if p.newTap != nil {
		tap = p.newTap()
	}
	p.mu.Unlock()
	if cl, ok := tap.(io.Closer); ok {
		defer cl.Close()
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c, &p.sent, tap); done <- struct{}{} }()
	go func() { p.pipe(c, up, &p.received, nil); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	<-done
}

// pipe copies src to dst, each chunk the delay after it was read, and
// counts the bytes in n (and writes them to tap, if any, until that
// fails); it closes both when either fails.
func (p *Proxy) pipe(dst, src net.Conn, n *atomic.Int64, tap io.Writer) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				n.Add(int64(k))
				if tap != nil {
					if _, err := tap.Write(buf[:k]); err != nil {
						tap = nil
					}
				}
				q <- chunk{append([]byte(nil), buf[:k]...), time.Now().Add(time.Duration(p.delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d) // the simulated latency, not a synchronisation
		}
		if !p.flowing() {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	for range q { // let the reader end
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	close(p.closed)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}
