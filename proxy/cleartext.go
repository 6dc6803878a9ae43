package proxy

import (
	"net"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// Clear-text listeners. lazyapi's plain HTTP port (--port) carries
// whatever a client sends in clear text: a bearer token sent there can be
// read by anyone on the path, which kube-apiserver (no insecure port)
// never risks. Connections accepted from a ClearText listener are marked
// (headerGate.clear); on them a request with credentials is refused 401
// unless the listener accepts tokens, and /debug/pprof/ is not served.

// clearMode is how a connection's transport is treated.
type clearMode uint8

const (
	// trusted: TLS, or a listener not wrapped by ClearText.
	trusted clearMode = iota
	// clearNoTokens: clear text; requests with credentials are refused.
	clearNoTokens
	// clearTokens: clear text; bearer tokens are accepted
	// (--plain-port-tokens).
	clearTokens
)

// clearTextListener marks the connections of a listener without TLS.
type clearTextListener struct {
	net.Listener
	mode clearMode
}

// ClearText wraps ln, a listener without TLS, for Serve: a request on its
// connections that carries an Authorization header is answered 401
// Unauthorized unless tokens is true, and /debug/pprof/ is not served on
// them (a profile is served to authenticated users only, over TLS). Use it
// for a server with an Authenticator; without one every request is served
// anyway.
func ClearText(ln net.Listener, tokens bool) net.Listener {
	m := clearNoTokens
	if tokens {
		m = clearTokens
	}
	return &clearTextListener{Listener: ln, mode: m}
}

// unwrapClearText returns the listener ClearText wrapped and its mode.
func unwrapClearText(ln net.Listener) (net.Listener, clearMode) {
	if c, ok := ln.(*clearTextListener); ok {
		return c.Listener, c.mode
	}
	return ln, trusted
}

// connClearMode is the mode of rc's connection.
func connClearMode(rc *fasthttp.RequestCtx) clearMode {
	if g, ok := rc.Conn().(*headerGate); ok {
		return g.clear
	}
	return trusted
}

// refuseClearTextCredentials answers 401 and returns true when rc came on
// a clear-text connection that refuses credentials and carries an
// Authorization header: the token was sent in clear text and is not
// accepted there (the client should use the TLS port).
func (s *Server) refuseClearTextCredentials(rc *fasthttp.RequestCtx) bool {
	if connClearMode(rc) != clearNoTokens || len(rc.Request.Header.Peek("Authorization")) == 0 {
		return false
	}
	s.authn.failures.Inc()
	s.log.Debug("credentials over clear text refused (--plain-port-tokens is off)",
		zap.String("remote", rc.RemoteAddr().String()), zap.ByteString("uri", rc.RequestURI()))
	s.writeStatus(rc, errorFormat(string(rc.Request.Header.Peek("Accept"))), unauthorized())
	return true
}
