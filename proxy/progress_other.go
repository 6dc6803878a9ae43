//go:build !unix

package proxy

const rawWriteSupported = false

func (c *progressConn) rawWrite(fd uintptr) bool { return true }
