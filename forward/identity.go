package forward

import (
	"net/http"
	"net/url"
	"strings"
)

// Identity is who a forwarded request is made as: the user lazyapi
// authenticated (before impersonation: kube-apiserver checks the caller's
// Impersonate-* headers against it).
type Identity struct {
	// Name is the user name; it must not be empty (kube-apiserver's
	// request-header authenticator ignores an empty one and would fall
	// back to lazyapi's own client certificate).
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// The request headers of kube-apiserver's front-proxy authentication, as
// kubeadm configures them (--requestheader-username-headers=X-Remote-User,
// --requestheader-group-headers=X-Remote-Group,
// --requestheader-extra-headers-prefix=X-Remote-Extra-, and
// --requestheader-uid-headers=X-Remote-Uid).
const (
	HeaderUser        = "X-Remote-User"
	HeaderGroup       = "X-Remote-Group"
	HeaderUID         = "X-Remote-Uid"
	HeaderExtraPrefix = "X-Remote-Extra-"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 7.6.1 (and Go's
// httputil.ReverseProxy): they describe one connection and are not
// forwarded. Upgrade and Connection are set again for an upgrade.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// droppedPrefixes are the headers a caller may not send upstream
// (case-insensitive prefixes of canonical names): identity headers that
// kube-apiserver would trust from lazyapi's connection (X-Remote-*; every
// X-Remote- header, not only the configured ones, since an operator may
// name others in --requestheader-*-headers), the caller's credentials
// (Authorization), and the gate's inert names of the framing headers
// (X-Withheld-*, X-Expt: proxy/conn/headergate.go).
//
// The caller's Impersonate-* headers are passed on: kube-apiserver's
// impersonation filter checks them against the identity lazyapi states
// (the X-Remote-* headers), with every mode it has (1.37's constrained
// impersonation, impersonate-on:<mode>:<verb>, as well as the impersonate
// verb), and its audit log names both the user and the impersonated
// user, as for a request sent to it directly. Resolving them here would
// refuse what kube-apiserver allows and audit the impersonated user as
// the one who acted.
var droppedPrefixes = []string{"X-Remote-", "X-Withheld-"}

var droppedNames = []string{"Authorization", "X-Expt", "Content-Length", "Host", "X-Forwarded-For"}

// dropped reports whether the caller's header name is not forwarded.
func dropped(name string) bool {
	for _, p := range droppedPrefixes {
		if len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) {
			return true
		}
	}
	for _, n := range droppedNames {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	for _, n := range hopHeaders {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

// connectionTokens are the header names a Connection header lists: they
// are hop-by-hop too (RFC 9110 7.6.1).
func connectionTokens(values []string) []string {
	var out []string
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// setIdentity sets id's front-proxy headers on h (which holds no X-Remote-
// header: dropped removed the caller's). Extra keys are escaped as
// kube-apiserver's request-header authenticator unescapes them (the
// aggregator's proxy: url.PathEscape of the key); header values cannot
// carry CR, LF or NUL, so such values are left out rather than split a
// header.
func setIdentity(h http.Header, id *Identity) {
	h[HeaderUser] = []string{clean(id.Name)}
	if id.UID != "" {
		h[HeaderUID] = []string{clean(id.UID)}
	}
	for _, g := range id.Groups {
		h[HeaderGroup] = append(h[HeaderGroup], clean(g))
	}
	for k, vs := range id.Extra {
		name := HeaderExtraPrefix + url.PathEscape(k)
		for _, v := range vs {
			h[name] = append(h[name], clean(v))
		}
	}
}

// clean makes s a valid header value: kube-apiserver would refuse a value
// with a control character as a malformed request, and Go's client refuses
// to send one. Such bytes (never in names authenticated from certificates
// or tokens lazyapi accepts, but possible in a TokenReview's extras) are
// replaced with '?' so that the request keeps its identity's shape.
func clean(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; c < ' ' && c != '\t' || c == 0x7f {
					b[j] = '?'
				}
			}
			return string(b)
		}
	}
	return s
}
