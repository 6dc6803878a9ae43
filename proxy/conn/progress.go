package conn

import (
	"crypto/tls"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
)

// Progress counts the bytes written to a connection (under TLS: to
// its socket) as the kernel takes them, so that the count moves while a
// large write is blocked on a slow reader: on a socket (syscall.Conn) it
// writes with the raw connection and counts every partial write; on other
// connections in writes of at most progressChunk bytes.
//
// Under TLS (CountWrites) it also coalesces: crypto/tls writes each record
// of at most 16 KiB with its own Write, one write syscall per record; the
// syscalls were 47% of a cached JSON LIST's CPU over TLS (bench/RESULTS.md
// ## cpu: TLS records coalesced into socket writes). Between Hold and
// Release (one HTTP chunk of a streamed watch or gzip LIST: ChunkWriter;
// in package proxy, a whole uncompressed LIST: lister.respondStream) the
// sealed records go into a buffer of at most CoalesceBytes, taken from a
// pool at the first record and given back at the last release, and reach
// the socket in one write when the next record does not fit and at the
// release. No buffer is held by an idle connection; a stream holds one
// while it writes (a write blocked on a client that stopped reading too,
// until the write guard ends it), counted in its admission (proxy's
// streamBufferBytes) and in
// lazyapi_write_coalesce_buffer_bytes. Writes outside a hold (handshakes,
// alerts, fasthttp's own responses) go out at once.
type Progress struct {
	net.Conn
	written atomic.Int64
	writing atomic.Bool // a write to the connection is under way (writeOut)

	rawOnce sync.Once
	raw     syscall.RawConn // nil: chunked Conn.Write

	coalesce bool // CountWrites: Hold and Release coalesce

	mu   sync.Mutex // serialises writes, the buffer and the raw write's state
	held int
	buf  *[]byte
	err  error  // a failed write of buffered bytes: every later write fails
	out  []byte // the raw write's rest
	werr error  // the raw write's syscall error
	fn   func(fd uintptr) bool
}

// progressChunk is the most a Progress writes at once to a connection
// that is not a socket: about one TLS record.
const progressChunk = 16 << 10

// CoalesceBytes bounds a coalescing buffer: one 64 KiB chunk of a stream
// (proxy's flushSize plus the item that passed it, and the records'
// framing) fits. Package proxy checks that it is twice its flushSize.
const CoalesceBytes = 128 << 10

var (
	coalesceBufs  = sync.Pool{New: func() any { b := make([]byte, 0, CoalesceBytes); return &b }}
	coalesceInUse atomic.Int64 // bytes of coalescing buffers taken (lazyapi_write_coalesce_buffer_bytes)
)

// CoalesceInUse is the bytes of coalescing buffers taken now, by all
// connections (lazyapi_write_coalesce_buffer_bytes).
func CoalesceInUse() int64 { return coalesceInUse.Load() }

// NewProgress returns c counted as a Progress; with coalesce its Hold and
// Release coalesce writes (as CountWrites' connections, under TLS).
func NewProgress(c net.Conn, coalesce bool) *Progress { return &Progress{Conn: c, coalesce: coalesce} }

// Written is the bytes the connection took so far.
func (c *Progress) Written() int64 { return c.written.Load() }

// Writing reports whether a write to the connection is under way: bytes
// handed to it that the kernel has not all taken yet (a write blocked on
// a client that does not read stays under way). A write guard's sweep
// ends a stream whose write is under way without progress (package
// proxy's writeGuard).
func (c *Progress) Writing() bool { return c.writing.Load() }

func (c *Progress) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.held == 0 {
		return c.writeOut(p)
	}
	if c.buf != nil && len(*c.buf)+len(p) > CoalesceBytes {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(p) > CoalesceBytes {
		return c.writeOut(p)
	}
	if c.buf == nil {
		c.buf = coalesceBufs.Get().(*[]byte)
		coalesceInUse.Add(CoalesceBytes)
	}
	*c.buf = append(*c.buf, p...)
	return len(p), nil
}

// Hold starts coalescing the writes until the matching Release. It does
// nothing on a connection that does not coalesce (c nil, or not under
// TLS).
func (c *Progress) Hold() {
	if c == nil || !c.coalesce {
		return
	}
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
}

// Release ends a Hold: the last one writes the buffered records out and
// gives the buffer back. Its error is the write's (the client is gone, or
// the write deadline passed): the connection is then unusable.
func (c *Progress) Release() error {
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
	coalesceInUse.Add(-CoalesceBytes)
	return err
}

// flushLocked writes the buffered records out. A failure is kept: crypto/tls
// believes the records sent, so nothing may follow them.
func (c *Progress) flushLocked() error {
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
func (c *Progress) writeOut(p []byte) (int, error) {
	c.writing.Store(true)
	defer c.writing.Store(false)
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

// CountWrites wraps ln so that every connection it accepts is a
// coalescing Progress: put it under a TLS listener (a Listener counts
// plain connections itself).
func CountWrites(ln net.Listener) net.Listener { return countingListener{ln} }

type countingListener struct{ net.Listener }

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Progress{Conn: c, coalesce: true}, nil
}

// ProgressOf returns the Progress under a connection a Listener accepted
// (under its Gate and TLS), or nil.
func ProgressOf(c net.Conn) *Progress {
	c = Unwrap(c)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	pc, _ := c.(*Progress)
	return pc
}
