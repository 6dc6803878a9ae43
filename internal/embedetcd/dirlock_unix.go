//go:build unix

package embedetcd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the embedded etcd's data directory for this process: an
// exclusive flock on Dir/lazyapi.lock, held until the returned file is
// closed. It fails at once (instead of etcd's bbolt waiting forever on its
// own lock) when another lazyapi holds the directory, or when any process
// (an etcd) holds etcd's database file in it.
func lockDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, "lazyapi.lock")
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open %q: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("the data directory is in use by another lazyapi (%q is locked)", name)
		}
		return nil, fmt.Errorf("cannot lock %q: %w", name, err)
	}
	// etcd's bbolt holds an exclusive flock on its database while open;
	// probe it the same way and let go.
	db := filepath.Join(dir, "member", "snap", "db")
	if d, err := os.Open(db); err == nil {
		err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		d.Close() // releases the probe's lock
		if errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("the data directory is in use by another etcd (%q is locked)", db)
		}
	}
	return f, nil
}
