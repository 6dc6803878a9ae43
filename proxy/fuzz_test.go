package proxy

import (
	"net/url"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
)

// FuzzParseRequest feeds request parsing (path, query, continue token,
// selectors, Accept) with arbitrary input: it must never panic, accepted
// input must be consistent, and continue tokens must round-trip.
// Seed corpus: testdata/fuzz/FuzzParseRequest.
//
//	go test ./proxy -run '^$' -fuzz FuzzParseRequest -fuzztime=10s
func FuzzParseRequest(f *testing.F) {
	f.Add("/api/v1/namespaces/ns/configmaps", "limit=500&resourceVersion=0", "", "app=a", "", "application/json")
	f.Add("/apis/apps/v1/watch/deployments", "watch=1&allowWatchBookmarks=true", "", "", "metadata.name=x", "*/*")
	f.Add("/api/v1/namespaces/ns/configmaps", "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDIsInN0YXJ0IjoiY20tMVx1MDAwMCJ9",
		"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDIsInN0YXJ0IjoiY20tMVx1MDAwMCJ9", "app in (a,b),!c", "spec.nodeName!=n",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	// Paths that must never leave their namespace (issue 10 item 5).
	for _, p := range []string{
		"/api/v1/namespaces/a/configmaps/..%2F..%2Fb%2Fsecrets",
		"/api/v1/namespaces/a%2F..%2Fb/secrets",
		"/api/v1/namespaces/a/secrets/..%2F..%2Fb%2Fsecrets%2Fs",
		"/api/v1/namespaces/a/../b/secrets",
		"/api/v1/namespaces/a/secrets/%2E%2E",
		"/api/v1/namespaces//configmaps",
		"/api/v1/namespaces/a/configmaps/x%25y",
		"//api/v1/namespaces/b/secrets",
		"/apis/apps/v1/namespaces/a/deployments/d/status",
		"/api/v1/namespaces/a/pods/p/proxy/x/../../y",
		"/api/v1/watch/namespaces/a/secrets/s",
	} {
		f.Add(p, "", "", "", "", "")
	}
	f.Fuzz(func(t *testing.T, target, query, token, labelSel, fieldSel, accept string) {
		checkPath(t, target)
		q, err := request.ListParams(query)
		if err != nil && !request.IsBadRequest(err) {
			t.Fatalf("params(%q) = %v, not a bad request", query, err)
		}
		if err == nil && q.Continue != "" && q.ResourceVersion != "" && q.ResourceVersion != "0" {
			t.Fatalf("params(%q) accepted resourceVersion with continue", query)
		}
		const prefix = "/registry/configmaps/ns/"
		if key, rev, err := request.DecodeContinue(token, prefix); err == nil {
			if !strings.HasPrefix(key, prefix) || rev == 0 {
				t.Fatalf("decodeContinue(%q) = %q, %d", token, key, rev)
			}
			if strings.Contains(key[len(prefix):], "..") && strings.Contains(key, "/../") {
				t.Fatalf("decodeContinue(%q) escaped the prefix: %q", token, key)
			}
			// Re-encoding the key (as "last key + \x00") round-trips.
			if strings.HasSuffix(key, "\x00") && len(key) > len(prefix)+1 {
				tok, err := request.EncodeContinue([]byte(key[:len(key)-1]), prefix, rev)
				if err != nil {
					t.Fatal(err)
				}
				k2, r2, err := request.DecodeContinue(tok, prefix)
				if err != nil || k2 != key || r2 != rev {
					t.Fatalf("round trip of %q: %q %d %v", key, k2, r2, err)
				}
			}
		} else if !request.IsBadRequest(err) {
			t.Fatalf("decodeContinue(%q) = %v, not a bad request", token, err)
		}
		convert := func(l string) (string, error) {
			if l == "metadata.name" || l == "metadata.namespace" || l == "spec.nodeName" {
				return l, nil
			}
			return "", request.Errorf("field label not supported: %s", l)
		}
		if _, err := request.ParseFilter(labelSel, fieldSel, convert); err != nil && !request.IsBadRequest(err) {
			t.Fatalf("parseFilter(%q, %q) = %v", labelSel, fieldSel, err)
		}
		for _, kind := range []encoding.AnswerKind{encoding.AnswerObject, encoding.AnswerList, encoding.AnswerStream} {
			if o, ok := encoding.Negotiate(accept, kind, false); ok && o.Target == encoding.TargetTable && o.Format != encoding.FormatJSON {
				t.Fatalf("negotiate(%q) = %v", accept, o)
			}
		}
		_ = encoding.ErrorFormat(accept)
		_ = wantsAggregated(accept)
	})
}

// checkPath holds lazyapi's path handling against kube-apiserver's: the path
// is Go's URL.Path of the request target, and a path lazyapi routes has the
// namespace and name kube-apiserver's RequestInfoFactory gives it.
func checkPath(t *testing.T, target string) {
	path, rawQuery, ok := request.DecodePath([]byte(target))
	u, err := url.ParseRequestURI(target)
	if ok != (err == nil) || (ok && (path != u.Path || rawQuery != u.RawQuery)) {
		t.Fatalf("decodePath(%q) = %q, %v; Go's server: %v, %v", target, path, ok, u, err)
	}
	if !ok {
		return
	}
	var ri RequestInfo
	request.Resolve(&ri, "GET", path, "")
	p, ok := ri.Route, ri.RouteOK
	if !ok {
		return
	}
	ns, name, sub, isResource := kubeRequestInfo(path)
	if !isResource || p.Namespace != ns || p.Name != name || p.Subresource != sub {
		t.Fatalf("route of %q = ns %q name %q sub %q; kube-apiserver: ns %q name %q sub %q resource %v",
			path, p.Namespace, p.Name, p.Subresource, ns, name, sub, isResource)
	}
	if p.Version == "" || p.Resource == "" || strings.Contains(p.Name, "/") || strings.Contains(p.Namespace, "/") {
		t.Fatalf("route of %q accepted %+v", path, p)
	}
	// What is authorized is what is served.
	var a authz.Attributes
	ri.Attributes(&a)
	wantNS := p.Namespace
	if p.Resource == "namespaces" && !p.InNamespace {
		wantNS = p.Name
	}
	if !a.ResourceRequest || a.Namespace != wantNS || a.Name != p.Name || a.Resource != p.Resource ||
		a.Subresource != p.Subresource || a.APIGroup != p.Group || a.APIVersion != p.Version {
		t.Fatalf("route of %q = %+v; authorized as %+v", path, p, a)
	}
}

// kubeRequestInfo is the path part of k8s.io/apiserver v0.37.2
// pkg/endpoints/request/requestinfo.go NewRequestInfo, line for line, for a
// GET (APIPrefixes api and apis, GrouplessAPIPrefixes api).
func kubeRequestInfo(path string) (namespace, name, subresource string, resource bool) {
	trimmed := strings.Trim(path, "/")
	var currentParts []string
	if trimmed != "" {
		currentParts = strings.Split(trimmed, "/")
	}
	if len(currentParts) < 3 {
		return "", "", "", false
	}
	if currentParts[0] != "api" && currentParts[0] != "apis" {
		return "", "", "", false
	}
	prefix := currentParts[0]
	currentParts = currentParts[1:]
	if prefix != "api" {
		if len(currentParts) < 3 {
			return "", "", "", false
		}
		currentParts = currentParts[1:]
	}
	currentParts = currentParts[1:] // version
	verb := "get"
	if currentParts[0] == "watch" || currentParts[0] == "proxy" {
		if len(currentParts) < 2 {
			return "", "", "", false
		}
		verb = currentParts[0]
		currentParts = currentParts[1:]
	}
	nsObject := false
	if currentParts[0] == "namespaces" {
		if len(currentParts) > 1 {
			namespace = currentParts[1]
			if len(currentParts) > 2 && currentParts[2] != "status" && currentParts[2] != "finalize" {
				currentParts = currentParts[2:]
			} else {
				nsObject = true
			}
		}
	}
	switch {
	case len(currentParts) >= 3 && verb != "proxy":
		subresource = currentParts[2]
		fallthrough
	case len(currentParts) >= 2:
		name = currentParts[1]
	}
	// namespaces/{name}: RequestInfo has the name as namespace too;
	// lazyapi's apiPath names the namespace object without one.
	if nsObject {
		namespace = ""
	}
	return namespace, name, subresource, true
}
