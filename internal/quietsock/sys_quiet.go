//go:build linux && !race

package quietsock

import (
	"syscall"
	"unsafe"
)

// Write writes p to the non-blocking socket fd: quietly when p is at most
// MaxQuiet bytes, else through the syscall package.
func Write(fd uintptr, p []byte) (int, error) {
	if len(p) > MaxQuiet {
		return syscall.Write(int(fd), p)
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// Read reads at most MaxQuiet bytes into p from the non-blocking socket
// fd, quietly.
func Read(fd uintptr, p []byte) (int, error) {
	p = p[:min(len(p), MaxQuiet)]
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
