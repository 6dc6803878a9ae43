package quietsock

import (
	"io"
	"net"
	"os"
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
	return &conn{TCPConn: tc, rc: rc}
}

// conn is a TCP connection whose reads are quiet (at most MaxQuiet bytes
// each); the rest is the connection's.
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var (
		n   int
		err error
	)
	werr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, err = Read(fd, p)
			if err != syscall.EINTR {
				return err != syscall.EAGAIN
			}
		}
	})
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
