//go:build !unix

package embedetcd

import "os"

// lockDir does not lock on systems without flock: a second process on the
// same directory waits in etcd's own lock.
func lockDir(string) (*os.File, error) { return nil, nil }
