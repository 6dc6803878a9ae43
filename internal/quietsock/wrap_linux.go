package quietsock

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Wrap returns c with quiet reads when it is a TCP connection (else c).
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	qc := &conn{TCPConn: tc, rc: rc}
	qc.fn = qc.read
	return qc
}

// conn is a TCP connection whose reads are quiet (at most MaxQuiet bytes
// each); the rest is the connection's. A read's state is kept in it, as
// proxy/conn's Progress keeps a write's, so that a read allocates nothing
// (a closure over it would, three times a read); mu serialises reads, as
// the connection's own read lock does.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
	fn func(fd uintptr) bool // read, bound once

	mu  sync.Mutex
	p   []byte
	n   int
	err error
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.mu.Lock()
	c.p, c.n, c.err = p, 0, nil
	werr := c.rc.Read(c.fn)
	n, err := c.n, c.err
	c.p, c.err = nil, nil
	c.mu.Unlock()
	switch {
	case werr != nil: // closed, or past the read deadline
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: werr}
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", err)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is the raw read: false (wait in the poller) while the socket has
// nothing to read.
func (c *conn) read(fd uintptr) bool {
	for {
		c.n, c.err = Read(fd, c.p)
		if c.err != syscall.EINTR {
			return c.err != syscall.EAGAIN
		}
	}
}
