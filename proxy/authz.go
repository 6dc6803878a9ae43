package proxy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// authorize asks Config.Authorizer whether the request's user may make
// it, with the attributes kube-apiserver's RequestInfoFactory gives it
// (requestAttributes). A refusal is answered 403 Forbidden with
// kube-apiserver's message, in the negotiated error format, and returns
// false. Without an authorizer every request passes.
func (s *Server) authorize(rc *fasthttp.RequestCtx, path string) bool {
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
		if u, ok = s.impersonate(rc, c, u); !ok {
			return false
		}
		rc.SetUserValue(userKey, u)
	}
	a.User, a.UID, a.Groups, a.Extra = u.Name, u.UID, u.Groups, u.Extra
	requestAttributes(&a, bytesutil.ToUnsafeString(rc.Method()), path, rc.QueryArgs())
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
		rc.Response.Reset()
		rc.SetStatusCode(fasthttp.StatusInternalServerError)
		rc.SetContentType("text/plain; charset=utf-8")
		rc.Response.Header.Set("X-Content-Type-Options", "nosniff")
		rc.SetBodyString(authz.InternalErrorMessage(string(rc.RequestURI()), err) + "\n")
		return false
	}
	s.forbid(rc, &a, reason)
	return false
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
// a service account's groups when none are given). It answers 400 for
// groups, extras or a UID without a user and 403 for a refusal, and
// returns false then.
func (s *Server) impersonate(rc *fasthttp.RequestCtx, c *authz.Chain, requestor *authn.User) (*authn.User, bool) {
	type request struct {
		ref  corev1.ObjectReference
		attr authz.Attributes
	}
	var reqs []request
	h := &rc.Request.Header
	var groupsSpecified bool
	wanted := string(h.Peek(impersonateUser))
	if wanted != "" {
		ns, name, isSA := splitServiceAccount(wanted)
		r := request{attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIVersion: "v1"}}
		if isSA {
			r.ref = corev1.ObjectReference{Kind: "ServiceAccount", Namespace: ns, Name: name}
			r.attr.Resource, r.attr.Namespace, r.attr.Name = "serviceaccounts", ns, name
		} else {
			r.ref = corev1.ObjectReference{Kind: "User", Name: wanted}
			r.attr.Resource, r.attr.Name = "users", wanted
		}
		reqs = append(reqs, r)
	}
	var groups []string
	var extra map[string][]string
	h.VisitAll(func(k, v []byte) {
		key := bytesutil.ToUnsafeString(k)
		switch {
		case strings.EqualFold(key, impersonateGroup):
			groupsSpecified = true
			reqs = append(reqs, request{ref: corev1.ObjectReference{Kind: "Group", Name: string(v)},
				attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIVersion: "v1", Resource: "groups", Name: string(v)}})
		case len(key) > len(impersonateExtraPrefix) && strings.EqualFold(key[:len(impersonateExtraPrefix)], impersonateExtraPrefix):
			extraKey := strings.ToLower(key[len(impersonateExtraPrefix):])
			if u, err := url.PathUnescape(extraKey); err == nil {
				extraKey = u
			}
			reqs = append(reqs, request{ref: corev1.ObjectReference{Kind: "UserExtra", APIVersion: "authentication.k8s.io/v1", Name: string(v), FieldPath: extraKey},
				attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", APIVersion: "v1",
					Resource: "userextras", Subresource: extraKey, Name: string(v)}})
		}
	})
	uid := string(h.Peek(impersonateUID))
	if uid != "" {
		reqs = append(reqs, request{ref: corev1.ObjectReference{Kind: "UID", Name: uid, APIVersion: "authentication.k8s.io/v1"},
			attr: authz.Attributes{Verb: "impersonate", ResourceRequest: true, APIGroup: "authentication.k8s.io", APIVersion: "v1", Resource: "uids", Name: uid}})
	}
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
			r.attr.Path = string(rc.Path())
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

// requestAttributes fills a's request fields as kube-apiserver's
// RequestInfoFactory.NewRequestInfo (APIPrefixes api and apis, groupless
// api, the watch and proxy path verbs, namespace subresources status and
// finalize): a resource request for /api/v1/... and /apis/G/V/..., a
// non-resource request (verb = lower-case method) for every other path.
// A GET of a collection is list or watch (watch=true, any value but
// "false" and "0"), and a fieldSelector requiring metadata.name=X names X.
// List, watch and deletecollection requests (not through /watch/) keep
// their fieldSelector and labelSelector for the Webhook mode. It
// allocates only for a query with a selector.
func requestAttributes(a *authz.Attributes, method, path string, q *fasthttp.Args) {
	a.Path = path
	a.Verb = strings.ToLower(method)
	// kube-apiserver splits the path trimmed of slashes at every "/"; the
	// found flags below count its parts.
	prefix, rest, ok := strings.Cut(strings.Trim(path, "/"), "/")
	if !ok || (prefix != "api" && prefix != "apis") {
		return
	}
	var group, version string
	if prefix == "apis" {
		if group, rest, ok = strings.Cut(rest, "/"); !ok {
			return
		}
	}
	if version, rest, ok = strings.Cut(rest, "/"); !ok {
		return
	}
	a.ResourceRequest = true
	a.APIGroup, a.APIVersion = group, version
	part, rest, _ := strings.Cut(rest, "/")
	viaPath := part == "watch" || part == "proxy"
	if viaPath {
		if rest == "" {
			// kube-apiserver: an error ("unable to determine kind and
			// namespace"), answered as a non-resource request would be
			// by lazyapi's router: keep the verb.
			a.Verb = part
			return
		}
		a.Verb = part
		part, rest, _ = strings.Cut(rest, "/")
	} else {
		switch method {
		case "POST":
			a.Verb = "create"
		case "GET", "HEAD":
			a.Verb = "get"
		case "PUT":
			a.Verb = "update"
		case "PATCH":
			a.Verb = "patch"
		case "DELETE":
			a.Verb = "delete"
		default:
			a.Verb = ""
		}
	}
	// parts: resource/name/subresource/...
	if part == "namespaces" && rest != "" {
		ns, after, _ := strings.Cut(rest, "/")
		a.Namespace = ns
		if after != "" {
			next, _, _ := strings.Cut(after, "/")
			if next != "status" && next != "finalize" {
				part, rest, _ = strings.Cut(after, "/")
			}
		}
	}
	a.Resource = part
	name, rest, _ := strings.Cut(rest, "/")
	a.Name = name
	if rest != "" && a.Verb != "proxy" {
		a.Subresource, _, _ = strings.Cut(rest, "/")
	}
	if a.Name == "" && a.Verb == "get" {
		a.Verb = "list"
		if w := q.Peek("watch"); q.Has("watch") {
			switch strings.ToLower(bytesutil.ToUnsafeString(w)) {
			case "false", "0":
			default:
				a.Verb = "watch"
			}
		}
		if fs := q.Peek("fieldSelector"); len(fs) > 0 {
			if sel, err := fields.ParseSelector(string(fs)); err == nil {
				if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(content.IsPathSegmentName(name)) == 0 {
					a.Name = name
				}
			}
		}
	}
	if a.Name == "" && a.Verb == "delete" {
		a.Verb = "deletecollection"
	}
	// kube-apiserver keeps the selectors for authorization (the webhook's
	// SubjectAccessReview) except on /watch/ paths.
	if !viaPath && (a.Verb == "list" || a.Verb == "watch" || a.Verb == "deletecollection") {
		if fs := q.Peek("fieldSelector"); len(fs) > 0 {
			a.FieldSelector = string(fs)
		}
		if ls := q.Peek("labelSelector"); len(ls) > 0 {
			a.LabelSelector = string(ls)
		}
	}
}
