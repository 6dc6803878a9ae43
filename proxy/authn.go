package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// userKey is the fasthttp user value holding a request's *authn.User.
const userKey = "lazyapi.user"

// authnMetrics count authentication results.
type authnMetrics struct {
	token, x509, serviceAccount, webhook, anonymous, failures *metrics.Counter
}

func (s *Server) initAuthn() {
	s.authn = authnMetrics{
		token:          s.ms.GetOrCreateCounter(`lazyapi_authenticated_requests_total{method="token"}`),
		x509:           s.ms.GetOrCreateCounter(`lazyapi_authenticated_requests_total{method="x509"}`),
		serviceAccount: s.ms.GetOrCreateCounter(`lazyapi_authenticated_requests_total{method="serviceaccount"}`),
		webhook:        s.ms.GetOrCreateCounter(`lazyapi_authenticated_requests_total{method="webhook"}`),
		anonymous:      s.ms.GetOrCreateCounter(`lazyapi_authenticated_requests_total{method="anonymous"}`),
		failures:       s.ms.GetOrCreateCounter(`lazyapi_authentication_failures_total`),
	}
}

// publicPath reports whether path is served without authentication: the
// health endpoints, which kubelets probe without credentials (where
// kube-apiserver with --anonymous-auth=false answers them 401).
func publicPath(path string) bool {
	return healthPath(path)
}

// publicInfoPath reports whether path is /version, which kube-apiserver's
// system:public-info-viewer ClusterRole (bound to system:authenticated and
// system:unauthenticated, reconciled at every start) grants to every
// authenticated request, and to system:anonymous when anonymous requests
// are allowed: it is authenticated (401 without credentials when they are
// not) but not authorized.
func publicInfoPath(path string) bool {
	return path == "/version" || path == "/version/"
}

// healthPath reports whether path is a health endpoint: /healthz, /livez,
// /readyz or one of their checks.
func healthPath(path string) bool {
	switch path {
	case "/healthz", "/livez", "/readyz":
		return true
	}
	return strings.HasPrefix(path, "/healthz/") || strings.HasPrefix(path, "/livez/") || strings.HasPrefix(path, "/readyz/")
}

// connState is a TLS connection (fasthttp hands over the accepted
// *tls.Conn).
type connState interface {
	ConnectionState() tls.ConnectionState
}

// authenticate authenticates the request with Config.Authenticator and
// records its user for the rate limiter's fairness key (clientKey). It
// answers 401 Unauthorized, as kube-apiserver, and returns false when the
// request's credentials are invalid or missing (and anonymous requests are
// not allowed). Without an authenticator every request passes.
func (s *Server) authenticate(rc *fasthttp.RequestCtx) bool {
	a := s.cfg.Authenticator
	if !a.Enabled() {
		return true
	}
	if s.refuseClearTextCredentials(rc) {
		return false
	}
	var certs []*x509.Certificate
	if c, ok := rc.Conn().(connState); ok {
		certs = c.ConnectionState().PeerCertificates
	}
	u, err := a.Authenticate(rc.Request.Header.Peek("Authorization"), certs)
	if err != nil {
		s.authn.failures.Inc()
		// err never contains the token.
		s.log.Debug("cannot authenticate request", zap.String("remote", rc.RemoteAddr().String()),
			zap.ByteString("uri", rc.RequestURI()), zap.Error(err))
		s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), unauthorized())
		return false
	}
	switch u.Method {
	case "x509":
		s.authn.x509.Inc()
	case "token":
		s.authn.token.Inc()
	case "serviceaccount":
		s.authn.serviceAccount.Inc()
	case "webhook":
		s.authn.webhook.Inc()
	default:
		s.authn.anonymous.Inc()
	}
	rc.SetUserValue(userKey, u)
	s.auditAuthenticated(rc, u)
	return true
}

// unauthorized is kube-apiserver's answer to a request it cannot
// authenticate: apierrors.NewUnauthorized("Unauthorized").
func unauthorized() *StatusError {
	return statusErr(401, "Unauthorized", "Unauthorized")
}

// clientKey is the rate limiter's fairness key of a request: the
// authenticated user's name, or the remote IP address for anonymous
// requests and when authentication is off.
func clientKey(rc *fasthttp.RequestCtx) string {
	if u, ok := rc.UserValue(userKey).(*authn.User); ok && u.Method != "anonymous" {
		return "user:" + u.Name
	}
	return rc.RemoteIP().String()
}
