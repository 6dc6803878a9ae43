//go:build !linux

package quietsock

import "net"

// Wrap returns c: quiet reads are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
