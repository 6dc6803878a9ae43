package conn

import "net"

// Clear-text listeners. lazyapi's plain HTTP port (--port) carries
// whatever a client sends in clear text: a bearer token sent there can be
// read by anyone on the path, which kube-apiserver (no insecure port)
// never risks. Connections accepted from a ClearText listener are marked
// (Gate.clear); on them a request with credentials is refused 401
// unless the listener accepts tokens, and /debug/pprof/ is not served.

// ClearMode is how a connection's transport is treated.
type ClearMode uint8

const (
	// Trusted: TLS, or a listener not wrapped by ClearText.
	Trusted ClearMode = iota
	// ClearNoTokens: clear text; requests with credentials are refused.
	ClearNoTokens
	// ClearTokens: clear text; bearer tokens are accepted
	// (--plain-port-tokens).
	ClearTokens
)

// clearTextListener marks the connections of a listener without TLS.
type clearTextListener struct {
	net.Listener
	mode ClearMode
}

// ClearText wraps ln, a listener without TLS: its connections are marked
// ClearNoTokens, or ClearTokens when tokens is true (a Listener over it
// carries the mark to each Gate).
func ClearText(ln net.Listener, tokens bool) net.Listener {
	m := ClearNoTokens
	if tokens {
		m = ClearTokens
	}
	return &clearTextListener{Listener: ln, mode: m}
}

// UnwrapClearText returns the listener ClearText wrapped and its mode
// (Trusted for any other listener).
func UnwrapClearText(ln net.Listener) (net.Listener, ClearMode) {
	if c, ok := ln.(*clearTextListener); ok {
		return c.Listener, c.mode
	}
	return ln, Trusted
}

// ClearModeOf is the mode of a connection accepted from a Listener
// (Trusted for any other).
func ClearModeOf(c net.Conn) ClearMode {
	if g, ok := c.(*Gate); ok {
		return g.clear
	}
	return Trusted
}
