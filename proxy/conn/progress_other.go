//go:build !unix

package conn

const rawWriteSupported = false

func (c *Progress) rawWrite(fd uintptr) bool { return true }
