//go:build unix

package conn

import (
	"syscall"

	"github.com/lazyapi/lazyapi/internal/quietsock"
)

const rawWriteSupported = true

// rawWrite is Progress's raw write: it writes c.out to the socket until
// it is all taken, the socket is full (false: the poller waits, under the
// write deadline) or a write fails (c.werr). A write of a watch's frame
// (at most quietsock.MaxQuiet bytes) does not wake the runtime's monitor
// thread (package quietsock).
func (c *Progress) rawWrite(fd uintptr) bool {
	for len(c.out) > 0 {
		n, err := quietsock.Write(fd, c.out)
		if n > 0 {
			c.out = c.out[n:]
			c.written.Add(int64(n))
		}
		switch {
		case err == syscall.EINTR:
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			c.werr = err
			return true
		case n <= 0:
			c.werr = syscall.EIO
			return true
		}
	}
	return true
}
