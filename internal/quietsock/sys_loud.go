//go:build unix && !(linux && !race)

package quietsock

import "syscall"

// Not quiet: on other systems, and with the race detector, which learns
// from the syscall package's reads and writes that what one goroutine
// wrote to a socket happens before another read it (a test's client and
// server in one process), Read and Write are the syscall package's, with
// the same bound on a read.

// Write writes p to the non-blocking socket fd.
func Write(fd uintptr, p []byte) (int, error) { return syscall.Write(int(fd), p) }

// Read reads at most MaxQuiet bytes into p from the non-blocking socket fd.
func Read(fd uintptr, p []byte) (int, error) { return syscall.Read(int(fd), p[:min(len(p), MaxQuiet)]) }
