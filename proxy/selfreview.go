package proxy

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// The self reviews lazyapi answers (POST, the only writes it accepts:
// they change nothing): kubectl auth can-i, can-i --list and whoami.
const (
	pathSSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	pathSSRR = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
	pathSSR  = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
)

// selfReviewPath reports whether a POST to path is a self review.
func selfReviewPath(path string) bool {
	path = strings.TrimSuffix(path, "/")
	return path == pathSSAR || path == pathSSRR || path == pathSSR
}

// servedVerb reports whether lazyapi serves the verb of a self access
// review, and why not. Read-only (no Config.ServesWrites) it serves get,
// list and watch of resources, GET and HEAD of other paths, impersonation,
// and the self reviews themselves, whose create changes nothing; not "*",
// which includes the writes (kubectl auth can-i '*' '*' says no). When it
// forwards the rest to kube-apiserver, it serves every verb.
func servedVerb(ra *authorizationv1.ResourceAttributes, nra *authorizationv1.NonResourceAttributes, servesWrites bool) (reason string, served bool) {
	if servesWrites {
		return "", true
	}
	if nra != nil {
		switch strings.ToLower(nra.Verb) {
		case "get", "head":
			return "", true
		}
		return fmt.Sprintf("lazyapi is read-only: it answers GET on non-resource paths, not %s", strings.ToUpper(nra.Verb)), false
	}
	switch ra.Verb {
	case "get", "list", "watch", "impersonate": // impersonation is honoured (kubectl --as)
		return "", true
	case "create":
		if selfReviewResource(ra.Group, ra.Resource) {
			return "", true
		}
	}
	return fmt.Sprintf("lazyapi is read-only: it serves get, list and watch, not %s", ra.Verb), false
}

// selfReviewResource reports whether group/resource is a self review.
func selfReviewResource(group, resource string) bool {
	switch group + "/" + resource {
	case "authorization.k8s.io/selfsubjectaccessreviews", "authorization.k8s.io/selfsubjectrulesreviews", "authentication.k8s.io/selfsubjectreviews":
		return true
	}
	return false
}

// readOnlyRule returns the part of p that a read-only lazyapi serves, as a
// SelfSubjectRulesReview lists it (servedVerb's verbs): get, list, watch
// and impersonate of resources ("*" becomes get, list, watch), create
// where every resource the rule names is a self review, get and head of
// non-resource URLs ("*" becomes both). ok is false when nothing is left.
func readOnlyRule(p authz.PolicyRule) (out authz.PolicyRule, ok bool) {
	out = p
	out.Verbs = nil
	add := func(vs ...string) {
		for _, v := range vs {
			if !slices.Contains(out.Verbs, v) {
				out.Verbs = append(out.Verbs, v)
			}
		}
	}
	if len(p.NonResourceURLs) > 0 {
		for _, v := range p.Verbs {
			switch v = strings.ToLower(v); v {
			case "*":
				add("get", "head")
			case "get", "head":
				add(v)
			}
		}
		return out, len(out.Verbs) > 0
	}
	onlySelfReviews := len(p.APIGroups) > 0 && len(p.Resources) > 0
	for _, g := range p.APIGroups {
		for _, r := range p.Resources {
			if !selfReviewResource(g, r) {
				onlySelfReviews = false
			}
		}
	}
	for _, v := range p.Verbs {
		switch v {
		case "*":
			add("get", "list", "watch")
			if onlySelfReviews {
				add("create")
			}
		case "get", "list", "watch", "impersonate":
			add(v)
		case "create":
			if onlySelfReviews {
				add(v)
			}
		}
	}
	return out, len(out.Verbs) > 0
}

// serveSelfReview answers a self review from the request's user and
// Config.Authorizer, as kube-apiserver's REST storages of
// selfsubjectaccessreviews, selfsubjectrulesreviews and
// selfsubjectreviews: 201 Created with the review and its status, in JSON
// or protobuf as the client accepts.
func (s *Server) serveSelfReview(rc *fasthttp.RequestCtx, path string) {
	ef := encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept")))
	u, _ := rc.UserValue(userKey).(*authn.User)
	if u == nil {
		u = authn.Anonymous
	}
	body, serr := requestBody(rc)
	if serr != nil {
		s.writeStatus(rc, ef, serr)
		return
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil)
	if err != nil {
		s.writeStatus(rc, ef, badRequestErr(fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf: %v", err)))
		return
	}
	var out runtime.Object
	var gv schema.GroupVersion
	var se *StatusError
	switch path = strings.TrimSuffix(path, "/"); path {
	case pathSSAR:
		out, se = s.accessReview(u, obj)
		gv = authorizationv1.SchemeGroupVersion
	case pathSSRR:
		out, se = s.rulesReview(u, obj)
		gv = authorizationv1.SchemeGroupVersion
	case pathSSR:
		out, se = userReview(u, obj)
		gv = authenticationv1.SchemeGroupVersion
	}
	if se != nil {
		s.writeStatus(rc, ef, se)
		return
	}
	mediaType := encoding.MediaJSON
	if ef == encoding.FormatProtobuf {
		mediaType = encoding.MediaProtobuf
	}
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		s.writeStatus(rc, ef, internalErr("no serializer for "+mediaType))
		return
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(info.Serializer, gv).Encode(out, &buf); err != nil {
		s.writeStatus(rc, ef, internalErr(err.Error()))
		return
	}
	rc.SetStatusCode(fasthttp.StatusCreated)
	rc.SetContentType(mediaType)
	rc.SetBody(buf.Bytes())
}

// accessReview answers a SelfSubjectAccessReview: the user's access as
// Config.Authorizer decides it, or not allowed for what lazyapi does not
// serve.
func (s *Server) accessReview(u *authn.User, obj runtime.Object) (runtime.Object, *StatusError) {
	r, ok := obj.(*authorizationv1.SelfSubjectAccessReview)
	if !ok {
		return nil, badRequestErr(fmt.Sprintf("not a SelfSubjectAccessReview: %T", obj))
	}
	ra, nra := r.Spec.ResourceAttributes, r.Spec.NonResourceAttributes
	if (ra == nil) == (nra == nil) {
		field, value := "spec.resourceAttributes", `"null"`
		if ra != nil {
			field, value = "spec.nonResourceAttributes", "{...}"
		}
		return nil, statusErr(422, "Invalid", fmt.Sprintf(
			`SelfSubjectAccessReview.authorization.k8s.io "" is invalid: %s: Invalid value: %s: exactly one of nonResourceAttributes or resourceAttributes must be specified`, field, value))
	}
	a := authz.Attributes{User: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
	if ra != nil {
		a.ResourceRequest, a.Verb, a.Namespace, a.APIGroup, a.APIVersion = true, ra.Verb, ra.Namespace, ra.Group, ra.Version
		a.Resource, a.Subresource, a.Name = ra.Resource, ra.Subresource, ra.Name
	} else {
		a.Path, a.Verb = nra.Path, nra.Verb
	}
	r.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true}
	if reason, served := servedVerb(ra, nra, s.cfg.ServesWrites); !served {
		// What RBAC would allow, lazyapi does not do: kubectl auth
		// can-i create ... says no.
		r.Status = authorizationv1.SubjectAccessReviewStatus{Reason: reason}
	} else if c := s.cfg.Authorizer; c != nil {
		allowed, mode, reason, err := c.Authorize(&a)
		r.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: reason}
		// A mode that denied outright (a Webhook's "denied": true)
		// ends the chain with its name; no opinion from all leaves
		// mode "".
		r.Status.Denied = !allowed && mode != ""
		if err != nil {
			r.Status.EvaluationError = err.Error()
		}
	}
	return r, nil
}

// rulesReview answers a SelfSubjectRulesReview: the user's rules in the
// namespace (without the write verbs unless the server serves writes).
func (s *Server) rulesReview(u *authn.User, obj runtime.Object) (runtime.Object, *StatusError) {
	r, ok := obj.(*authorizationv1.SelfSubjectRulesReview)
	if !ok {
		return nil, badRequestErr(fmt.Sprintf("not a SelfSubjectRulesReview: %T", obj))
	}
	if r.Spec.Namespace == "" {
		return nil, badRequestErr("no namespace on request")
	}
	var rules []authz.PolicyRule
	var incomplete bool
	var errs []string
	if c := s.cfg.Authorizer; c != nil {
		rules, incomplete, errs = c.RulesFor(u.Name, u.Groups, r.Spec.Namespace)
	} else {
		rules, errs = authz.AlwaysAllow{}.RulesFor(u.Name, u.Groups, r.Spec.Namespace)
	}
	st := authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete,
		ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}}
	for _, p := range rules {
		if !s.cfg.ServesWrites {
			var ok bool
			if p, ok = readOnlyRule(p); !ok {
				continue
			}
		}
		if len(p.Resources) > 0 {
			st.ResourceRules = append(st.ResourceRules, authorizationv1.ResourceRule{Verbs: p.Verbs, APIGroups: p.APIGroups,
				Resources: p.Resources, ResourceNames: p.ResourceNames})
		}
		if len(p.NonResourceURLs) > 0 {
			st.NonResourceRules = append(st.NonResourceRules, authorizationv1.NonResourceRule{Verbs: p.Verbs, NonResourceURLs: p.NonResourceURLs})
		}
	}
	switch len(errs) {
	case 0:
	case 1:
		st.EvaluationError = errs[0]
	default:
		st.EvaluationError = "[" + strings.Join(errs, ", ") + "]"
	}
	return &authorizationv1.SelfSubjectRulesReview{Status: st}, nil
}

// userReview answers a SelfSubjectReview: the user as authenticated.
func userReview(u *authn.User, obj runtime.Object) (runtime.Object, *StatusError) {
	if _, ok := obj.(*authenticationv1.SelfSubjectReview); !ok {
		return nil, badRequestErr(fmt.Sprintf("not a SelfSubjectReview: %T", obj))
	}
	info := authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		info.Extra = map[string]authenticationv1.ExtraValue{}
		for k, v := range u.Extra {
			info.Extra[k] = v
		}
	}
	return &authenticationv1.SelfSubjectReview{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Now())},
		Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: info}}, nil
}
