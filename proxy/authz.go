package proxy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validation"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
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
	u, _ := rc.UserValue(userKey).(*authn.User)
	if u == nil {
		u = authn.Anonymous
	}
	if hasImpersonation(rc) {
		var ok bool
		if u, ok = s.impersonate(rc, c, u, ri.Path); !ok {
			return false
		}
		rc.SetUserValue(userKey, u)
	}
	a.User, a.UID, a.Groups, a.Extra = u.Name, u.UID, u.Groups, u.Extra
	ri.Attributes(&a)
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
	s.writeStatus(rc, errorFormat(string(rc.Request.Header.Peek("Accept"))), &StatusError{Status: codec.Status{
		Code: 403, Reason: "Forbidden", Message: authz.ForbiddenMessage(a, reason),
		Details: &codec.StatusDetails{Group: a.APIGroup, Kind: a.Resource, Name: a.Name}}})
}

// Impersonation headers (authenticationv1.Impersonate*Header).
const (
	impersonatePrefix      = "Impersonate-"
	impersonateUser        = "Impersonate-User"
	impersonateGroup       = "Impersonate-Group"
	impersonateUID         = "Impersonate-Uid"
	impersonateExtraPrefix = "Impersonate-Extra-"
)

// hasImpersonation reports whether the request has an Impersonate-*
// header.
func hasImpersonation(rc *fasthttp.RequestCtx) bool {
	found := false
	rc.Request.Header.VisitAll(func(k, _ []byte) {
		if !found && len(k) >= len(impersonatePrefix) && strings.EqualFold(bytesutil.ToUnsafeString(k[:len(impersonatePrefix)]), impersonatePrefix) {
			found = true
		}
	})
	return found
}

// impersonate is kube-apiserver's WithImpersonation filter: every
// requested user (or service account), group, extra value and UID must
// be allowed to the requestor with the verb impersonate on users,
// serviceaccounts, groups, userextras/KEY or uids; then the request is
// served as the impersonated user (groups plus system:authenticated, or
// a service account's groups when none are given); path is the request's
// (RequestInfo.Path). It answers 400 for
// groups, extras or a UID without a user and 403 for a refusal, and
// returns false then.
func (s *Server) impersonate(rc *fasthttp.RequestCtx, c *authz.Chain, requestor *authn.User, path string) (*authn.User, bool) {
	h := &rc.Request.Header
	reqs, wanted, uid, groupsSpecified := impersonationRequests(h)
	var groups []string
	var extra map[string][]string
	ef := errorFormat(string(h.Peek("Accept")))
	if wanted == "" {
		if len(reqs) == 0 {
			return requestor, true // an empty Impersonate-User header
		}
		refs := make([]corev1.ObjectReference, len(reqs))
		for i := range reqs {
			refs[i] = reqs[i].ref
		}
		s.writeStatus(rc, ef, badRequestErr(fmt.Sprintf("requested %v without impersonating a user", refs)))
		return nil, false
	}
	username := wanted
	for i := range reqs {
		r := &reqs[i]
		r.attr.User, r.attr.UID, r.attr.Groups, r.attr.Extra = requestor.Name, requestor.UID, requestor.Groups, requestor.Extra
		switch r.ref.Kind {
		case "ServiceAccount":
			if !groupsSpecified {
				groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + r.ref.Namespace}
			}
		case "Group":
			groups = append(groups, r.ref.Name)
		case "UserExtra":
			if extra == nil {
				extra = map[string][]string{}
			}
			extra[r.ref.FieldPath] = append(extra[r.ref.FieldPath], r.ref.Name)
		}
		// kube-apiserver: an error is a refusal here even with Allow.
		if ok, _, reason, err := c.Authorize(&r.attr); !ok || err != nil {
			r.attr.Path = path
			s.forbid(rc, &r.attr, reason)
			return nil, false
		}
	}
	add := authn.AllAuthenticated
	if username == authn.Anonymous.Name {
		add = authn.AllUnauthenticated
	}
	if !slices.Contains(groups, add) && (add == authn.AllUnauthenticated || !slices.Contains(groups, authn.AllUnauthenticated)) {
		groups = append(groups, add)
	}
	s.log.Debug("impersonating", zap.String("user", requestor.Name), zap.String("as", username))
	return &authn.User{Name: username, UID: uid, Groups: groups, Extra: extra, Method: requestor.Method}, true
}

// impersonationRequest is one impersonation a request asks for: what it
// names and the attributes authorized for it.
type impersonationRequest struct {
	ref  corev1.ObjectReference
	attr authz.Attributes
}

// impersonationRequests reads a request's Impersonate-* headers: the
// user (wanted), groups, extras and UID asked for, each with its
// attributes (the requestor not yet set).
func impersonationRequests(h *fasthttp.RequestHeader) (reqs []impersonationRequest, wanted, uid string, groupsSpecified bool) {
	wanted = string(h.Peek(impersonateUser))
	if wanted != "" {
		ns, name, isSA := splitServiceAccount(wanted)
		r := impersonationRequest{attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIVersion: "v1"}}
		if isSA {
			r.ref = corev1.ObjectReference{Kind: "ServiceAccount", Namespace: ns, Name: name}
			r.attr.Resource, r.attr.Namespace, r.attr.Name = "serviceaccounts", ns, name
		} else {
			r.ref = corev1.ObjectReference{Kind: "User", Name: wanted}
			r.attr.Resource, r.attr.Name = "users", wanted
		}
		reqs = append(reqs, r)
	}
	h.VisitAll(func(k, v []byte) {
		key := bytesutil.ToUnsafeString(k)
		switch {
		case strings.EqualFold(key, impersonateGroup):
			groupsSpecified = true
			reqs = append(reqs, impersonationRequest{ref: corev1.ObjectReference{Kind: "Group", Name: string(v)},
				attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIVersion: "v1", Resource: "groups", Name: string(v)}})
		case len(key) > len(impersonateExtraPrefix) && strings.EqualFold(key[:len(impersonateExtraPrefix)], impersonateExtraPrefix):
			extraKey := strings.ToLower(key[len(impersonateExtraPrefix):])
			if u, err := url.PathUnescape(extraKey); err == nil {
				extraKey = u
			}
			reqs = append(reqs, impersonationRequest{ref: corev1.ObjectReference{Kind: "UserExtra", APIVersion: "authentication.k8s.io/v1", Name: string(v), FieldPath: extraKey},
				attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", APIVersion: "v1",
					Resource: "userextras", Subresource: extraKey, Name: string(v)}})
		}
	})
	uid = string(h.Peek(impersonateUID))
	if uid != "" {
		reqs = append(reqs, impersonationRequest{ref: corev1.ObjectReference{Kind: "UID", Name: uid, APIVersion: "authentication.k8s.io/v1"},
			attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", APIVersion: "v1", Resource: "uids", Name: uid}})
	}
	return reqs, wanted, uid, groupsSpecified
}

// splitServiceAccount is serviceaccount.SplitUsername: a user name
// system:serviceaccount:NS:NAME with a valid namespace and name.
func splitServiceAccount(user string) (ns, name string, ok bool) {
	rest, found := strings.CutPrefix(user, authz.ServiceAccountPrefix)
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ":")
	if len(parts) != 2 {
		return "", "", false
	}
	if len(validation.NameIsDNSLabel(parts[0], false)) != 0 || len(validation.NameIsDNSSubdomain(parts[1], false)) != 0 {
		return "", "", false
	}
	return parts[0], parts[1], true
}
