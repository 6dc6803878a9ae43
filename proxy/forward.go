package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/resource"
)

// One endpoint: with Config.Forward, what lazyapi does not serve from
// etcd goes to kube-apiserver as the caller (package forward). The
// request is authenticated here, and impersonation checked, then
// kube-apiserver authorizes it (it has every authorization mode and every
// admission step; lazyapi's answer would only guess at its). What stays
// here is decided from the one resolution of the request (ri): GET, LIST
// and WATCH of a stored resource's objects and of its status and scale,
// discovery and OpenAPI, health, metrics.

// forwards reports whether the request is forwarded: Config.Forward is set
// and lazyapi does not serve it (servesHere).
func (s *Server) forwards(rc *fasthttp.RequestCtx, ri *RequestInfo, path string) bool {
	return s.cfg.Forward != nil && !s.servesHere(rc, ri, path)
}

// servesHere reports whether lazyapi answers the request itself: every
// request but writes, connect and create-only subresources, resources and
// groups it does not store (aggregated APIs, bindings, componentstatuses),
// custom resource versions it cannot convert, the self reviews (kube-
// apiserver answers them with its own authenticators and authorizers),
// and paths it has no handler for.
func (s *Server) servesHere(rc *fasthttp.RequestCtx, ri *RequestInfo, path string) bool {
	if selfReviewPath(path) {
		return !rc.IsPost()
	}
	if !ri.IsResourceRequest {
		return s.servesPath(path)
	}
	if !rc.IsGet() && !rc.IsHead() {
		return false
	}
	if !ri.RouteOK {
		return false
	}
	p := &ri.Route
	r, ok := s.cfg.Resources.Lookup(p.Group, p.Version, p.Resource)
	if !ok || !routed(r, p) || !r.Servable() {
		return false
	}
	switch r.Subresource(p.Subresource) {
	case resource.SubConnect, resource.SubCreateOnly:
		return false
	case resource.SubNone:
		return p.Subresource == ""
	}
	return true
}

// servesPath reports whether a path that is not a resource request has a
// handler here: health, metrics, profiles, OpenAPI, /version and the
// discovery documents of the groups and versions lazyapi stores.
func (s *Server) servesPath(path string) bool {
	switch {
	case healthPath(path), path == "/metrics", publicInfoPath(path),
		path == "/debug/pprof" || strings.HasPrefix(path, "/debug/pprof/"),
		path == "/openapi/v2" || strings.HasPrefix(path, "/openapi/"):
		return true
	}
	return s.servesDiscovery(path)
}

// servesDiscovery reports whether serveDiscovery has a document at path
// (other than /version): /api, /api/v1, /apis and the groups and versions
// of the resource table.
func (s *Server) servesDiscovery(path string) bool {
	path = strings.TrimSuffix(path, "/")
	switch {
	case path == "/api" || path == "/api/v1" || path == "/apis":
		return true
	case strings.HasPrefix(path, "/apis/"):
		g, v, hasV := strings.Cut(strings.TrimPrefix(path, "/apis/"), "/")
		if hasV {
			_, ok := s.cfg.Resources.DiscoveryGroupVersion(g, v)
			return ok
		}
		_, ok := s.cfg.Resources.DiscoveryGroup(g)
		return ok
	}
	return false
}

// forwardsFirst reports whether the request is one of the documents
// that describe the whole server, which with Config.Forward are
// kube-apiserver's (they list the aggregated groups, whose resources only
// it knows, and every group version's OpenAPI): GET of /api and /apis
// (legacy and aggregated discovery), /openapi/v2 and /openapi/v3 and
// its group versions. lazyapi's own documents answer them when
// kube-apiserver does not (serveUpstreamFirst).
func (s *Server) forwardsFirst(rc *fasthttp.RequestCtx, path string) bool {
	if s.cfg.Forward == nil || !rc.IsGet() && !rc.IsHead() {
		return false
	}
	path = strings.TrimSuffix(path, "/")
	return path == "/api" || path == "/apis" || path == "/openapi/v2" || path == "/openapi/v3" ||
		strings.HasPrefix(path, "/openapi/v3/")
}

// serveUpstreamFirst forwards a request of forwardsFirst and reports
// whether kube-apiserver answered it; false: it did not (or every seat
// was held), nothing was written, and lazyapi answers.
//
// kube-apiserver's answer is awaited for the connect bound only
// (--upstream-connect-timeout): one that stopped answering on a
// connection lazyapi holds delays discovery by that much, not for ever.
func (s *Server) serveUpstreamFirst(rc *fasthttp.RequestCtx, ri *RequestInfo) bool {
	return s.tryForward(rc, ri, s.cfg.Forward.DialTimeout()) == nil
}

// forward forwards an authenticated request to kube-apiserver as its user
// and answers what Forward could not forward (429, 503) with a Status in
// the request's error format. Impersonation is kube-apiserver's to check,
// as authorization is: the caller's Impersonate-* headers go with the
// authenticated identity (package forward), so that every impersonation
// mode kube-apiserver has applies (1.37's constrained impersonation, which
// lazyapi's legacy check would refuse) and its audit log names the user
// who acted as well as the one impersonated.
func (s *Server) forward(rc *fasthttp.RequestCtx, ri *RequestInfo) {
	if e := s.tryForward(rc, ri, 0); e != nil {
		ef := encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept")))
		s.writeStatus(rc, ef, &StatusError{Status: codec.Status{Code: int32(e.Code), Reason: e.Reason, Message: e.Message,
			Details: retryDetails(e.RetryAfter)}, RetryAfter: e.RetryAfter})
	}
}

// tryForward forwards the request as forward does and returns what
// Forward could not forward (nothing written). headerTimeout, when set,
// bounds the wait for kube-apiserver's response header
// (forward.Request.HeaderTimeout).
func (s *Server) tryForward(rc *fasthttp.RequestCtx, ri *RequestInfo, headerTimeout time.Duration) *forward.Error {
	u, _ := rc.UserValue(userKey).(*authn.User)
	if u == nil {
		u = authn.Anonymous
	}
	fr := forward.Request{
		Identity:    forward.Identity{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra},
		Client:      clientKey(rc),
		ClientIP:    rc.RemoteIP().String(),
		Verb:        ri.Verb,
		LongRunning: longRunning(ri),
		Conn:        func() net.Conn { return upgradeConn(rc.Conn()) },
		// A quiet stream (logs -f of a silent container, a watch of an
		// aggregated group) ends when its client leaves, as a watch here
		// does, not at its next write: its seat, its upstream connection
		// and kube-apiserver's to the kubelet are let go.
		Hangup:        func(cancel func()) { go watchHangup(rc.Conn(), cancel) },
		HeaderTimeout: headerTimeout,
	}
	fr.Body, fr.ContentLength = withheldBody(rc)
	return s.cfg.Forward.Forward(rc, &fr)
}

func retryDetails(seconds int) *codec.StatusDetails {
	if seconds == 0 {
		return nil
	}
	return &codec.StatusDetails{RetryAfterSeconds: int32(seconds)}
}

// longRunning is kube-apiserver's BasicLongRunningRequestCheck with its
// verbs watch and proxy and subresources attach, exec, proxy, log and
// portforward.
func longRunning(ri *RequestInfo) bool {
	switch ri.Verb {
	case "watch", "proxy":
		return true
	}
	switch ri.Subresource {
	case "attach", "exec", "proxy", "log", "portforward":
		return true
	}
	return false
}

// withheldBody returns a reader of the request's body, which the header
// gate withheld (conn.Gate), and its length (-1: chunked), or nil.
func withheldBody(rc *fasthttp.RequestCtx) (io.Reader, int64) {
	g := conn.GateOf(rc.Conn())
	if g == nil {
		if b := rc.Request.Body(); len(b) > 0 {
			return bytes.NewReader(b), int64(len(b))
		}
		return nil, 0
	}
	length, chunked := g.Withheld()
	switch {
	case chunked:
		return httputil.NewChunkedReader(bufio.NewReaderSize(g.Body(), 4<<10)), -1
	case length > 0:
		return g.Body(), length
	}
	return nil, 0
}

// upgradeConn is the connection under c's header gate for an upgraded
// request: its reads return the bytes that arrived after the request's
// header first (the gate holds them), then the socket's.
func upgradeConn(c net.Conn) net.Conn {
	g := conn.GateOf(c)
	if g == nil {
		return c
	}
	return &pendingConn{Conn: g.Conn, pending: g.Pending()}
}

// pendingConn is a net.Conn whose reads return pending first.
type pendingConn struct {
	net.Conn
	pending []byte
}

func (c *pendingConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
