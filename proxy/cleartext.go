package proxy

import (
	"net"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// ClearText wraps ln, a listener without TLS, for Serve: a request on its
// connections that carries an Authorization header is answered 401
// Unauthorized unless tokens is true, and /debug/pprof/ is not served on
// them (a profile is served to authenticated users only, over TLS). Use it
// for a server with an Authenticator; without one every request is served
// anyway (conn.ClearText).
func ClearText(ln net.Listener, tokens bool) net.Listener { return conn.ClearText(ln, tokens) }

// connClearMode is the mode of rc's connection.
func connClearMode(rc *fasthttp.RequestCtx) conn.ClearMode { return conn.ClearModeOf(rc.Conn()) }

// refuseClearTextCredentials answers 401 and returns true when rc came on
// a clear-text connection that refuses credentials and carries an
// Authorization header: the token was sent in clear text and is not
// accepted there (the client should use the TLS port).
func (s *Server) refuseClearTextCredentials(rc *fasthttp.RequestCtx) bool {
	if connClearMode(rc) != conn.ClearNoTokens || len(rc.Request.Header.Peek("Authorization")) == 0 {
		return false
	}
	s.authn.failures.Inc()
	s.log.Debug("credentials over clear text refused (its listener is in ClearNoTokens mode)",
		zap.String("remote", rc.RemoteAddr().String()), zap.ByteString("uri", rc.RequestURI()))
	s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), unauthorized())
	return true
}
