package request

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

// issue23Requests are the requests of issue 23's findings 1-4: the seed
// corpus of FuzzResolveRequest starts with them.
var issue23Requests = []string{
	"/api/v1/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=",
	"/api/v1/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=&watch=1",
	"/api/v1/namespaces/team-a/secrets?watch=0&watch=1",
	"/api/v1/namespaces/team-a/secrets?watch=1&watch=0",
	"/api/v1//secrets",
	"/api/v1//secrets?watch=1",
	"/apis/apps/v1//deployments",
	"/apis/apps/v1//deployments?watch=true",
	"/api/v1/namespaces/team-a/secrets?watch=f",
	"/api/v1/namespaces/team-a/secrets/top-secret?watch=1",
}

// FuzzResolveRequest is the differential test of issue 23: lazyapi's
// resolver (decodePath, resolveRequest) against kube-apiserver's own,
// k8s.io/apiserver's RequestInfoFactory (APIPrefixes api and apis,
// GrouplessAPIPrefixes api), on the *http.Request Go's server makes of the
// same request line (url.ParseRequestURI). Every Info field must be
// equal (authorization's attributes are filled from them); a request
// lazyapi routes must be served as resolved: the verb served is the verb
// authorized, the namespace, resource, name and subresource served are
// the authorized ones, and the parameters served are kube-apiserver's
// (DecodeParameters into ListOptions: the same error, the same first
// values).
//
//	go test ./proxy -run '^$' -fuzz FuzzResolveRequest -fuzztime=3m
func FuzzResolveRequest(f *testing.F) {
	klog.SetLogger(logr.Discard()) // NewRequestInfo logs queries it cannot decode
	add := func(m uint8, target string) {
		path, query, _ := strings.Cut(target, "?")
		f.Add(m, path, query)
	}
	for _, r := range issue23Requests {
		add(0, r)
	}
	for _, r := range []string{
		"/api/v1/watch/namespaces/a/secrets/s?fieldSelector=metadata.name%3Dt",
		"/api/v1/watch/secrets?watch=0",
		"/api/v1/watch",
		"/api/v1/proxy",
		"/api/v1/proxy/namespaces/a/pods/p/x/y",
		"/api/v1/namespaces/a/pods/p/proxy/x/../y?watch=1",
		"/api/v1/namespaces/a/status?watch=1",
		"/api/v1/namespaces/a/finalize",
		"/api/v1/namespaces/a",
		"/api/v1/namespaces//configmaps?fieldSelector=metadata.name%3Dx",
		"/api/v1/namespaces/a/pods//status?watch=1",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dx&limit=",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dx&labelSelector=%21%21",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3D%3Dx,metadata.namespace%3Db&timeoutSeconds=x",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3D..",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Da%2Fb",
		"/api/v1/namespaces/a/secrets?%66ieldSelector=metadata.name%3Dx&fieldSelector=",
		"/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dx;&fieldSelector=",
		"/api/v1/namespaces/a/secrets?fieldSelector=%zz&fieldSelector=metadata.name%3Dx",
		"/api/v1/namespaces/a/secrets?watch&watch=0",
		"/api/v1/namespaces/a/secrets?watch=FALSE&limit=-1&allowWatchBookmarks=0&sendInitialEvents=f",
		"/api/v1/namespaces/a/secrets?watch=+1",
		"/api/v1/namespaces/a%2Fb/secrets",
		"/api/v1/namespaces/a/secrets/..%2F..%2Fb",
		"/apis/apps/v1/namespaces/a/deployments/d/scale",
		"/apis/apps/v1/watch/namespaces/a/deployments/d",
		"/apis//v1/deployments",
		"/apis/apps/v1",
		"/apis/apps",
		"///api/v1/secrets",
		"/api/v1/secrets/",
		"/api/v1/secrets//",
		"/api/v1/nodes/n/status?resourceVersion=0&watch=1",
		"/api/v1/namespaces/a/secrets?resourceVersionMatch=NotOlderThan&watch=1",
		"/api/v1/namespaces/a/secrets?includeObject=Object&includeObject=All",
		"/openapi/v3/apis/apps/v1?hash=x;&hash=%zz&hash=y&hash=z",
		// Other spellings of watch, its name and repeats, and path
		// segments a resolver could read apart from kube-apiserver's.
		"/api/v1/namespaces/a/secrets?wat%63h=1",
		"/api/v1/namespaces/a/secrets?watch=%31",
		"/api/v1/namespaces/a/secrets?watch=True",
		"/api/v1/namespaces/a/secrets?watch=T&watch=f",
		"/api/v1/namespaces/a/secrets?watch=yes",
		"/api/v1/namespaces/a/secrets?WATCH=1",
		"/api/v1/namespaces/a/secrets?watch=1;",
		"/api/v1/namespaces/a/secrets?;watch=1",
		"/api/v1/namespaces/a/secrets?watch=1%00",
		"/api/v1/namespaces/a/secrets?&&watch=1&",
		"/api/v1/namespaces/a/secrets?resourceVersion=1&resourceVersion=2&watch=1",
		"/api/v1/namespaces/a/secrets?watch=1&fieldSelector=metadata.name%3Dx&fieldSelector=metadata.name%3Dy",
		"/api/v1/namespaces/a/secrets?labelSelector=a%3Db&labelSelector=",
		"/api/v1/namespaces/a/../b/secrets",
		"/api/v1/namespaces/a/./secrets",
		"/api/v1/namespaces/%61/secrets",
		"/api//v1/secrets",
		"/api/v1/namespaces/a//secrets/s",
		"/api/v1/watch//secrets",
	} {
		add(0, r)
	}
	add(1, "/api/v1/namespaces/a/secrets?watch=1")
	add(5, "/api/v1/namespaces/a/secrets")
	add(6, "/api/v1/namespaces/a/secrets/s")
	factory := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT"}
	// The path and the query are mutated apart; the target is the two
	// joined by "?" (a "?" in the path ends it there, as in a request).
	f.Fuzz(func(t *testing.T, m uint8, path, query string) {
		method := methods[int(m)%len(methods)]
		target := path
		if query != "" {
			target += "?" + query
		}
		u, err := url.ParseRequestURI(target)
		path, rawQuery, ok := DecodePath([]byte(target))
		if ok != (err == nil) || (ok && (path != u.Path || rawQuery != u.RawQuery)) {
			t.Fatalf("decodePath(%q) = %q %q %v; Go's server: %v, %v", target, path, rawQuery, ok, u, err)
		}
		if !ok {
			return
		}
		want, kerr := factory.NewRequestInfo(&http.Request{Method: method, URL: u})
		var ri Info
		Resolve(&ri, method, path, rawQuery)
		if (kerr != nil) != (ri.Err != nil) {
			t.Fatalf("%s %q: error %v; kube-apiserver: %v", method, target, ri.Err, kerr)
		}
		got := request.RequestInfo{IsResourceRequest: ri.IsResourceRequest, Path: ri.Path, Verb: ri.Verb,
			APIPrefix: ri.APIPrefix, APIGroup: ri.APIGroup, APIVersion: ri.APIVersion, Namespace: ri.Namespace,
			Resource: ri.Resource, Subresource: ri.Subresource, Name: ri.Name, Parts: ri.Parts,
			FieldSelector: ri.FieldSelector, LabelSelector: ri.LabelSelector}
		if len(got.Parts) == 0 && len(want.Parts) == 0 {
			got.Parts = want.Parts // nil and empty
		}
		if !reflect.DeepEqual(&got, want) {
			t.Fatalf("%s %q:\n lazyapi        %+v\n kube-apiserver %+v", method, target, got, *want)
		}
		// The query: every parameter's first value as URL.Query's.
		values := u.Query()
		q := parseQuery(rawQuery)
		for i, k := range queryNames {
			v, has := q.first(i)
			if want, ok := values[k]; has != ok || (ok && v != want[0]) {
				t.Fatalf("%q: %s = %q %v; Go's URL.Query: %q", target, k, v, has, want)
			}
		}
		if got, want := QueryFirst(rawQuery, "hash"), values.Get("hash"); got != want {
			t.Fatalf("%q: hash %q; Go's URL.Query: %q", target, got, want)
		}
		if kerr != nil || !ri.RouteOK {
			return
		}
		checkServed(t, method, target, &ri, values)
	})
}

// checkServed holds what a routed request serves against what it was
// authorized as (ri's kube-apiserver fields).
func checkServed(t *testing.T, method, target string, ri *Info, query url.Values) {
	p := ri.Route
	named := p.Name != "" || p.Subresource != ""
	watch := p.Watch || (!named && ri.Verb == "watch") // as serveResource
	fail := func(what string) {
		t.Helper()
		t.Fatalf("%s %q: %s: served %+v watch %v; authorized %+v", method, target, what, p, watch, *ri)
	}
	if p.Group != ri.APIGroup || p.Version != ri.APIVersion || p.Resource != ri.Resource || p.Subresource != ri.Subresource {
		fail("another resource")
	}
	ns := p.Namespace
	if p.Resource == "namespaces" && !p.InNamespace {
		ns = p.Name // namespaces/{name}: its own namespace
	}
	if ns != ri.Namespace {
		fail("another namespace")
	}
	if method != "GET" && method != "HEAD" {
		return // 405 (connect subresources too)
	}
	switch {
	case named && p.Name == "" && !p.Watch:
		// pods//status: kube-apiserver's get handler with name "" (the
		// registry's 400); Info calls it a list.
		if ValidName(p.Name) == nil {
			fail("an empty name served")
		}
		return
	case named && !p.Watch:
		if ri.Verb != "get" || ri.Name != p.Name {
			fail("a get of another verb or name")
		}
	case watch:
		if ri.Verb != "watch" || (p.Name != "" && ri.Name != p.Name) {
			fail("a watch of another verb or name")
		}
	default:
		if ri.Verb != "list" {
			fail("a list of another verb")
		}
	}
	if !named || p.Watch {
		checkListParams(t, method, target, ri, query)
	}
}

// checkListParams holds a list's or watch's parameters served against
// kube-apiserver's handler's: DecodeParameters into ListOptions.
func checkListParams(t *testing.T, method, target string, ri *Info, query url.Values) {
	var opts metainternalversion.ListOptions
	kerr := metainternalversionscheme.ParameterCodec.DecodeParameters(query, metav1.SchemeGroupVersion, &opts)
	if kerr != nil {
		err := ri.ParamsErr
		if err == nil {
			// Selectors are parsed by the list or watch (parseFilter).
			_, err = ParseFilter(ri.Params.LabelSelector, ri.Params.FieldSelector, func(l string) (string, error) { return l, nil })
		}
		if err == nil || err.Error() != kerr.Error() {
			t.Fatalf("%s %q: parameters: %v; kube-apiserver: %v", method, target, err, kerr)
		}
		return
	}
	if ri.ParamsErr != nil {
		// lazyapi's further validation (ValidateListOptions,
		// resourceVersion, includeObject) is not DecodeParameters'.
		return
	}
	q := &ri.Params
	first := func(k string) string {
		if v := query[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	wantLimit := max(opts.Limit, 0)
	var wantTimeout int64
	if opts.TimeoutSeconds != nil {
		wantTimeout = *opts.TimeoutSeconds
	}
	if q.Watch != opts.Watch || q.Limit != wantLimit || q.TimeoutSeconds != wantTimeout ||
		q.AllowWatchBookmarks != opts.AllowWatchBookmarks || q.ResourceVersion != opts.ResourceVersion ||
		q.ResourceVersionMatch != string(opts.ResourceVersionMatch) || q.Continue != opts.Continue ||
		q.LabelSelector != first("labelSelector") || q.FieldSelector != first("fieldSelector") ||
		!reflect.DeepEqual(q.SendInitialEvents, opts.SendInitialEvents) {
		t.Fatalf("%s %q: parameters %+v; kube-apiserver %+v", method, target, *q, opts)
	}
	if ri.Verb == "watch" || ri.Verb == "list" {
		if !ri.Route.Watch && (ri.FieldSelector != q.FieldSelector || ri.LabelSelector != q.LabelSelector) {
			t.Fatalf("%s %q: selectors served %q %q, authorized %q %q", method, target,
				q.FieldSelector, q.LabelSelector, ri.FieldSelector, ri.LabelSelector)
		}
		if ri.Name != "" && ri.Route.Name == "" {
			// A name authorized from a selector: the selector served
			// requires it (other terms only narrow).
			if v, ok := opts.FieldSelector.RequiresExactMatch("metadata.name"); !ok || v != ri.Name {
				t.Fatalf("%s %q: authorized name %q, served selector %q", method, target, ri.Name, q.FieldSelector)
			}
		}
	}
}
