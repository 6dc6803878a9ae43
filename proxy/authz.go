package proxy

import (
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// authorize asks Config.Authorizer whether the request's user may make
// it, with the attributes kube-apiserver's RequestInfoFactory gives it
// (ri, request.Resolve). A refusal is answered 403 Forbidden with
// kube-apiserver's message, in the negotiated error format, and returns
// false. Without an authorizer every request passes.
func (s *Server) authorize(rc *fasthttp.RequestCtx, ri *RequestInfo) bool {
	c := s.cfg.Authorizer
	if c == nil {
		return true
	}
	var a authz.Attributes
	ri.Attributes(&a)
	u, _ := rc.UserValue(userKey).(*authn.User)
	if u == nil {
		u = authn.Anonymous
	}
	if hasImpersonation(rc) {
		var ok bool
		if u, ok = s.impersonate(rc, c, u, &a); !ok {
			return false
		}
		rc.SetUserValue(userKey, u)
	}
	a.User, a.UID, a.Groups, a.Extra = u.Name, u.UID, u.Groups, u.Extra
	allowed, _, reason, err := c.Authorize(&a)
	s.auditAuthorized(rc, &a, allowed, reason, err)
	if allowed {
		return true
	}
	if err != nil {
		// kube-apiserver's authorization filter: a request no mode
		// allowed whose chain had an error (a Webhook that could not be
		// asked) is an internal error, not a 403: the refusal was not
		// decided. responsewriters.InternalError answers it in plain text.
		s.log.Warn("cannot authorize request", zap.String("user", a.User), zap.String("verb", a.Verb),
			zap.String("path", a.Path), zap.Error(err))
		internalErrorText(rc, err)
		return false
	}
	s.forbid(rc, &a, reason)
	return false
}

// internalErrorText answers err as kube-apiserver's
// responsewriters.InternalError: 500 in plain text.
func internalErrorText(rc *fasthttp.RequestCtx, err error) {
	rc.Response.Reset()
	rc.SetStatusCode(fasthttp.StatusInternalServerError)
	rc.SetContentType("text/plain; charset=utf-8")
	rc.Response.Header.Set("X-Content-Type-Options", "nosniff")
	rc.SetBodyString(authz.InternalErrorMessage(string(rc.RequestURI()), err) + "\n")
}

// forbid answers 403 Forbidden for a, as kube-apiserver's
// responsewriters.Forbidden.
func (s *Server) forbid(rc *fasthttp.RequestCtx, a *authz.Attributes, reason string) {
	s.log.Debug("forbidden", zap.String("user", a.User), zap.String("verb", a.Verb), zap.String("path", a.Path))
	s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), &StatusError{Status: codec.Status{
		Code: 403, Reason: "Forbidden", Message: authz.ForbiddenMessage(a, reason),
		Details: &codec.StatusDetails{Group: a.APIGroup, Kind: a.Resource, Name: a.Name}}})
}
