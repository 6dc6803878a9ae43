package proxy

import (
	"strings"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/codec"
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
	a.User, a.UID, a.Groups, a.Extra = u.Name, u.UID, u.Groups, u.Extra
	requestAttributes(&a, b2s(rc.Method()), path, rc.QueryArgs())
	allowed, _, reason := c.Authorize(&a)
	if allowed {
		return true
	}
	msg := authz.ForbiddenMessage(&a, reason)
	s.log.Debug("forbidden", zap.String("user", a.User), zap.String("verb", a.Verb), zap.String("path", path))
	s.writeStatus(rc, errorFormat(string(rc.Request.Header.Peek("Accept"))), &StatusError{Status: codec.Status{
		Code: 403, Reason: "Forbidden", Message: msg,
		Details: &codec.StatusDetails{Group: a.APIGroup, Kind: a.Resource, Name: a.Name}}})
	return false
}

// requestAttributes fills a's request fields as kube-apiserver's
// RequestInfoFactory.NewRequestInfo (APIPrefixes api and apis, groupless
// api, the watch and proxy path verbs, namespace subresources status and
// finalize): a resource request for /api/v1/... and /apis/G/V/..., a
// non-resource request (verb = lower-case method) for every other path.
// A GET of a collection is list or watch (watch=true, any value but
// "false" and "0"), and a fieldSelector requiring metadata.name=X names X.
// It allocates only for a query with a fieldSelector.
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
	if part == "watch" || part == "proxy" {
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
			switch strings.ToLower(b2s(w)) {
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
}
