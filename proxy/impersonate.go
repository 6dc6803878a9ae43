package proxy

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// Impersonation as kube-apiserver 1.37 does it (k8s.io/apiserver's
// filters/impersonation, WithConstrainedImpersonation: the
// ConstrainedImpersonation gate is beta and on). The modes are tried in
// its order; each constrained mode applies to some wanted users only and
// asks first whether the requestor may make this request
// (impersonate-on:<mode>:<verb> on the request's own attributes), then
// whether it may impersonate each field of the wanted user
// (impersonate:<mode> on users, nodes or serviceaccounts, groups, uids,
// userextras in authentication.k8s.io); the legacy mode asks the
// impersonate verb (users, serviceaccounts and groups in the core group).
// The first mode that allows wins; else the first refusal is answered.
// The last mode that allowed a requestor is tried first for it, as there
// (which decides which refusal is first).

// Impersonation headers (authenticationv1.Impersonate*Header).
const (
	impersonatePrefix      = "Impersonate-"
	impersonateUser        = "Impersonate-User"
	impersonateGroup       = "Impersonate-Group"
	impersonateUID         = "Impersonate-Uid"
	impersonateExtraPrefix = "Impersonate-Extra-"
)

// impersonationModes in kube-apiserver's order; "" is the legacy mode.
var impersonationModes = []string{"associated-node", "arbitrary-node", "serviceaccount", "user-info", ""}

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

// wantedUser reads the impersonation headers (processImpersonationHeaders):
// nil when no user is asked for; an error message (400) for a UID, groups
// or extras without a user.
func wantedUser(h *fasthttp.RequestHeader) (*user.DefaultInfo, string) {
	w := &user.DefaultInfo{Name: string(h.Peek(impersonateUser)), UID: string(h.Peek(impersonateUID))}
	h.VisitAll(func(k, v []byte) {
		key := bytesutil.ToUnsafeString(k)
		switch {
		case strings.EqualFold(key, impersonateGroup):
			w.Groups = append(w.Groups, string(v))
		case len(key) >= len(impersonateExtraPrefix) && strings.EqualFold(key[:len(impersonateExtraPrefix)], impersonateExtraPrefix):
			extraKey := strings.ToLower(key[len(impersonateExtraPrefix):])
			if u, err := url.PathUnescape(extraKey); err == nil {
				extraKey = u
			}
			if w.Extra == nil {
				w.Extra = map[string][]string{}
			}
			w.Extra[extraKey] = append(w.Extra[extraKey], string(v))
		}
	})
	if w.Name == "" {
		if w.UID != "" || w.Groups != nil || w.Extra != nil {
			return nil, fmt.Sprintf("requested %#v without impersonating a user name", w)
		}
		return nil, ""
	}
	return w, ""
}

// impersonate answers the request's impersonation headers for requestor,
// whose request has the attributes req (User unset): the impersonated
// user, or false after answering 400 or 403.
func (s *Server) impersonate(rc *fasthttp.RequestCtx, c *authz.Chain, requestor *authn.User, req *authz.Attributes) (*authn.User, bool) {
	w, bad := wantedUser(&rc.Request.Header)
	ef := encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept")))
	if bad != "" {
		s.writeStatus(rc, ef, badRequestErr(bad))
		return nil, false
	}
	if w == nil {
		return requestor, true // an empty Impersonate-User header
	}
	order := make([]int, 0, len(impersonationModes))
	last, seen := s.impModes.get(requestor.Name)
	if seen {
		order = append(order, last)
	}
	for i := range impersonationModes {
		if !seen || i != last {
			order = append(order, i)
		}
	}
	var first *impRefusal
	for _, i := range order {
		u, refused := impersonateMode(c, impersonationModes[i], requestor, w, req)
		if refused != nil && first == nil {
			first = refused
		}
		if u != nil {
			s.impModes.set(requestor.Name, i)
			s.log.Debug("impersonating", zap.String("user", requestor.Name), zap.String("as", u.Name))
			return u, true
		}
	}
	if first == nil {
		first = &impRefusal{attrs: *req, reason: "all impersonation modes failed"}
	}
	first.attrs.Path = req.Path
	s.forbid(rc, &first.attrs, first.reason)
	return nil, false
}

// impRefusal is a refused authorization check: its attributes (user the
// requestor) and the message's reason.
type impRefusal struct {
	attrs  authz.Attributes
	reason string
}

// impChecker asks c as one mode does: associated-node shows the
// authorizer the requestor's extra keys only, and the name * for its
// impersonate:associated-node checks (any node: kube-apiserver caches
// the answer across nodes).
type impChecker struct {
	c         *authz.Chain
	requestor *authn.User
	assocNode bool
}

// check is checkAuthorization: allowed, or the refusal (an authorizer
// error with Allow still allows).
func (k *impChecker) check(a authz.Attributes) *impRefusal {
	a.User, a.UID, a.Groups, a.Extra = k.requestor.Name, k.requestor.UID, k.requestor.Groups, k.requestor.Extra
	if k.assocNode {
		a.Extra = map[string][]string{"authentication.kubernetes.io/associated-node-keys": slices.Sorted(maps.Keys(k.requestor.Extra))}
		if a.Verb == "impersonate:associated-node" {
			a.Name = "*"
		}
	}
	ok, _, reason, err := k.c.Authorize(&a)
	if ok {
		return nil
	}
	switch {
	case err != nil && reason != "":
		reason = err.Error() + ": " + reason
	case err != nil:
		reason = err.Error()
	}
	return &impRefusal{attrs: a, reason: reason}
}

// impersonateMode is one mode's check: the impersonated user, or nil
// and its refusal, or nil and nil when the mode does not apply to w.
func impersonateMode(c *authz.Chain, mode string, requestor *authn.User, w *user.DefaultInfo, req *authz.Attributes) (*authn.User, *impRefusal) {
	k := &impChecker{c: c, requestor: requestor, assocNode: mode == "associated-node"}
	verb, gv := "impersonate", [2]string{"", "v1"}
	if mode != "" {
		if !modeApplies(mode, w, requestor) {
			return nil, nil
		}
		on := *req
		on.Verb = "impersonate-on:" + mode + ":" + req.Verb
		if r := k.check(on); r != nil {
			return nil, r
		}
		verb, gv = "impersonate:"+mode, [2]string{"authentication.k8s.io", "v1"}
	}
	attrs := func(resource, name string) authz.Attributes {
		return authz.Attributes{Verb: verb, ResourceRequest: true, APIGroup: gv[0], APIVersion: gv[1], Resource: resource, Name: name}
	}
	authnGV := func(a authz.Attributes) authz.Attributes {
		a.APIGroup, a.APIVersion = "authentication.k8s.io", "v1"
		return a
	}
	out := &authn.User{Name: w.Name, UID: w.UID, Groups: slices.Clone(w.Groups), Extra: w.Extra, Method: requestor.Method}
	// The user name: a node's (constrained), a service account's, a user's.
	ua := attrs("users", w.Name)
	if node, ok := nodeUsername(w.Name); ok && mode != "" {
		ua.Resource, ua.Name = "nodes", node
		out.Groups = []string{"system:nodes"}
	}
	if ns, name, ok := splitServiceAccount(w.Name); ok {
		ua.Resource, ua.Namespace, ua.Name = "serviceaccounts", ns, name
		if len(w.Groups) == 0 {
			out.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
		}
	}
	if r := k.check(ua); r != nil {
		return nil, r
	}
	if w.UID != "" {
		if r := k.check(authnGV(attrs("uids", w.UID))); r != nil {
			return nil, r
		}
	}
	if r := impersonateGroups(k, mode != "", attrs("groups", ""), w.Groups); r != nil {
		return nil, r
	}
	if r := impersonateExtra(k, mode != "", authnGV(attrs("userextras", "")), w.Extra); r != nil {
		return nil, r
	}
	if out.Name == authn.Anonymous.Name {
		out.Groups = ensureGroup(out.Groups, authn.AllUnauthenticated)
	} else if !slices.Contains(out.Groups, authn.AllUnauthenticated) {
		out.Groups = ensureGroup(out.Groups, authn.AllAuthenticated)
	}
	return out, nil
}

// manyImpersonationChecks: from this many groups or extra values a
// constrained mode first asks for all of them at once (*).
const manyImpersonationChecks = 4

// impersonateGroups is authorizeGroups.
func impersonateGroups(k *impChecker, constrained bool, a authz.Attributes, groups []string) *impRefusal {
	if len(groups) == 0 {
		return nil
	}
	if constrained {
		if slices.Contains(groups, "") {
			return &impRefusal{attrs: k.fill(a), reason: "impersonating the empty string group is not allowed"}
		}
		if slices.Contains(groups, user.SystemPrivilegedGroup) {
			a.Name = user.SystemPrivilegedGroup
			return &impRefusal{attrs: k.fill(a), reason: "impersonating the system:masters group is not allowed"}
		}
		if len(groups) >= manyImpersonationChecks {
			a.Name = "*"
			if k.check(a) == nil {
				return nil
			}
		}
	}
	for _, g := range groups {
		a.Name = g
		if r := k.check(a); r != nil {
			return r
		}
	}
	return nil
}

// impersonateExtra is authorizeExtra (keys in order: kube-apiserver
// ranges over a map, so its first refusal among several is any of them).
func impersonateExtra(k *impChecker, constrained bool, a authz.Attributes, extra map[string][]string) *impRefusal {
	if len(extra) == 0 {
		return nil
	}
	if constrained {
		if msg := invalidExtra(extra); msg != "" {
			return &impRefusal{attrs: k.fill(a), reason: msg}
		}
		n := 0
		for _, vs := range extra {
			n += len(vs)
		}
		if len(extra) >= manyImpersonationChecks || n >= manyImpersonationChecks {
			a.Subresource, a.Name = "*", "*"
			if k.check(a) == nil {
				return nil
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(extra)) {
		a.Subresource = key
		for _, v := range extra[key] {
			a.Name = v
			if r := k.check(a); r != nil {
				return r
			}
		}
	}
	return nil
}

// fill sets the requestor on a refusal's attributes (for its message).
func (k *impChecker) fill(a authz.Attributes) authz.Attributes {
	a.User, a.UID, a.Groups, a.Extra = k.requestor.Name, k.requestor.UID, k.requestor.Groups, k.requestor.Extra
	return a
}

// invalidExtra is validateExtra's message, "" when extra is valid.
func invalidExtra(extra map[string][]string) string {
	fp := field.NewPath("extra", "key")
	for key, values := range extra {
		switch {
		case key == "":
			return "impersonating the empty string key in extra is not allowed"
		case len(utilvalidation.IsDomainPrefixedPath(fp, key)) > 0:
			return fmt.Sprintf("impersonating an invalid key in extra is not allowed: %v", utilvalidation.IsDomainPrefixedPath(fp, key).ToAggregate())
		case key != strings.ToLower(key):
			return fmt.Sprintf("impersonating a non-lowercase key in extra is not allowed: %q", key)
		case len(values) == 0:
			return "impersonating empty values in extra is not allowed"
		case slices.Contains(values, ""):
			return "impersonating the empty string value in extra is not allowed"
		}
	}
	return ""
}

// modeApplies is each constrained mode's filter.
func modeApplies(mode string, w *user.DefaultInfo, requestor *authn.User) bool {
	onlyName := w.UID == "" && len(w.Groups) == 0 && len(w.Extra) == 0
	node, isNode := nodeUsername(w.Name)
	_, _, isSA := splitServiceAccount(w.Name)
	switch mode {
	case "associated-node":
		_, _, requestorSA := splitServiceAccount(requestor.Name)
		nn := requestor.Extra["authentication.kubernetes.io/node-name"]
		return onlyName && isNode && requestorSA && len(nn) == 1 && nn[0] == node
	case "arbitrary-node":
		return onlyName && isNode
	case "serviceaccount":
		return onlyName && isSA
	}
	return !isNode && !isSA // user-info
}

// nodeUsername is isNodeUsername: system:node:NAME with a valid node name.
func nodeUsername(name string) (string, bool) {
	node, ok := strings.CutPrefix(name, "system:node:")
	if !ok || len(validation.NameIsDNSSubdomain(node, false)) != 0 {
		return "", false
	}
	return node, true
}

func ensureGroup(groups []string, g string) []string {
	if slices.Contains(groups, g) {
		return groups
	}
	return append(groups, g)
}

// splitServiceAccount is serviceaccount.SplitUsername: a user name
// system:serviceaccount:NS:NAME with a valid namespace and name.
func splitServiceAccount(name string) (ns, sa string, ok bool) {
	rest, found := strings.CutPrefix(name, authz.ServiceAccountPrefix)
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

// impModeCache remembers the mode that last allowed each requestor
// (kube-apiserver's modeIndexCache, an LRU; here at most 4,096 names,
// forgotten all at once when full).
type impModeCache struct {
	mu sync.Mutex
	m  map[string]int // protected by mu
}

func (c *impModeCache) get(name string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.m[name]
	return i, ok
}

func (c *impModeCache) set(name string, i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 4096 {
		c.m = map[string]int{}
	}
	c.m[name] = i
}
