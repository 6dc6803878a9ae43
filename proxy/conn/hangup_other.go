//go:build !linux

package conn

import "net"

// Hangups notices when clients close their connections; on this platform
// it notices nothing (Notify says ok false: the caller reads the
// connection itself).
type Hangups struct{}

// NewHangups returns nil: see Hangups.
func NewHangups() (*Hangups, error) { return nil, nil }

// Notify says ok false: see Hangups.
func (h *Hangups) Notify(net.Conn, func()) (stop func(), ok bool) { return nil, false }

// Registered is 0.
func (h *Hangups) Registered() int { return 0 }

// Close does nothing.
func (h *Hangups) Close() error { return nil }
