package proxy

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/proxy/request"
)

func TestParsePath(t *testing.T) {
	tests := []struct {
		path string
		want request.Route
		ok   bool
	}{
		{"/api/v1/configmaps", request.Route{Version: "v1", Resource: "configmaps"}, true},
		{"/api/v1/namespaces/ns/configmaps", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "configmaps"}, true},
		{"/api/v1/namespaces/ns/configmaps/cm", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "configmaps", Name: "cm"}, true},
		{"/api/v1/namespaces/ns/pods/p/status", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "pods", Name: "p", Subresource: "status"}, true},
		{"/api/v1/namespaces", request.Route{Version: "v1", Resource: "namespaces"}, true},
		{"/api/v1/namespaces/kube-system", request.Route{Version: "v1", Resource: "namespaces", Name: "kube-system"}, true},
		{"/api/v1/namespaces/kube-system/status", request.Route{Version: "v1", Resource: "namespaces", Name: "kube-system", Subresource: "status"}, true},
		{"/api/v1/nodes/n1", request.Route{Version: "v1", Resource: "nodes", Name: "n1"}, true},
		{"/api/v1/watch/namespaces/ns/pods", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "pods", Watch: true}, true},
		{"/apis/apps/v1/deployments", request.Route{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{"/apis/apps/v1/namespaces/ns/deployments/d", request.Route{Group: "apps", Version: "v1", Namespace: "ns", InNamespace: true, Resource: "deployments", Name: "d"}, true},
		{"/apis/example.com/v1/watch/widgets", request.Route{Group: "example.com", Version: "v1", Resource: "widgets", Watch: true}, true},
		{"/apis/apps/v1/", request.Route{}, false},
		{"/apis/apps/v1", request.Route{}, false},
		{"/apis/apps", request.Route{}, false},
		{"/api/v1", request.Route{}, false},
		{"/api", request.Route{}, false},
		{"/version", request.Route{}, false},
		{"/api/v1/namespaces/ns/configmaps/cm/status/extra", request.Route{}, false},
		// Segments are kept as kube-apiserver's RequestInfoFactory keeps
		// them: an empty namespace, "." and ".." names (refused later).
		{"/api/v1/namespaces//configmaps", request.Route{Version: "v1", InNamespace: true, Resource: "configmaps"}, true},
		{"/api/v1/namespaces/ns/configmaps/..", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "configmaps", Name: ".."}, true},
		{"/api/v1/namespaces/ns/configmaps/../../x/secrets", request.Route{}, false},
		{"/api/v1/namespaces/ns/configmaps/cm/", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "configmaps", Name: "cm"}, true},
		{"/api/v1/namespaces/ns/pods//status", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "pods", Subresource: "status"}, true},
		{"/api/v1/namespaces/ns/pods/p/proxy/a/b", request.Route{Version: "v1", Namespace: "ns", InNamespace: true, Resource: "pods", Name: "p", Subresource: "proxy", Rest: "a/b"}, true},
		{"/api/v1/watch/namespaces/ns/pods/p/status", request.Route{}, false},
		{"//api/v1/namespaces/ns/configmaps", request.Route{}, false},
		{"/api/v1/watch", request.Route{}, false},
		// kube-apiserver's router matches no static segment (version,
		// resource, subresource, watch) that is empty (issue 23).
		{"/api/v1//secrets", request.Route{}, false},
		{"/api/v1//namespaces/ns/secrets", request.Route{}, false},
		{"/apis/apps/v1//deployments", request.Route{}, false},
		{"/apis/apps//v1/deployments", request.Route{}, false},
		{"/api//v1/secrets", request.Route{}, false},
		{"/api/v1/namespaces/ns//secrets", request.Route{}, false},
		{"/api/v1/namespaces/ns/pods/p//x", request.Route{}, false},
		{"/api/v1/watch//secrets", request.Route{}, false},
	}
	for _, tt := range tests {
		got, ok := routeFor(tt.path)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("routeFor(%q) = %+v, %v; want %+v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
}

// routeFor is the route of a GET of path.
func routeFor(path string) (request.Route, bool) {
	var ri RequestInfo
	request.Resolve(&ri, "GET", path, "")
	return ri.Route, ri.RouteOK
}

// params are the parameters of a LIST with the raw query.
func params(t *testing.T, query string) (Params, error) {
	t.Helper()
	return request.ListParams(query)
}

func TestParseParams(t *testing.T) {
	tests := []struct {
		query   string
		wantErr string // substring; "" = ok
	}{
		{"limit=500&resourceVersion=0", ""},
		{"limit=abc", `strconv.ParseInt: parsing "abc": invalid syntax`},
		{"limit=", `strconv.ParseInt: parsing "": invalid syntax`},
		{"limit=1&limit=x", ""},
		{"limit=x&limit=1", `parsing "x"`},
		{"limit=%zz&limit=1", ""}, // a bad escape: the pair is skipped
		{"watch=maybe", ""},       // every value but 0 and false is true
		{"resourceVersion=12&resourceVersionMatch=Exact", ""},
		{"resourceVersion=12&resourceVersionMatch=NotOlderThan", ""},
		{"resourceVersionMatch=Exact", "forbidden unless resourceVersion is provided"},
		{"resourceVersion=0&resourceVersionMatch=Exact", `"exact" is forbidden for resourceVersion "0"`},
		{"resourceVersion=1&resourceVersionMatch=Newest", "Unsupported value"},
		{"resourceVersion=abc", "invalid resource version"},
		{"resourceVersion=-1", "invalid resource version"},
		{"continue=abc&resourceVersion=5", "specifying resource version is not allowed when using continue"},
		{"continue=abc&resourceVersion=0", ""},
		{"continue=abc&resourceVersion=1&resourceVersionMatch=Exact", "forbidden when continue is provided"},
		{"watch=true&allowWatchBookmarks=true&sendInitialEvents=true", ""},
		{"includeObject=Object", ""},
		{"includeObject=All", "includeObject"},
		{"timeoutSeconds=x", `strconv.ParseInt: parsing "x": invalid syntax`},
		{"timeoutSeconds=", `strconv.ParseInt: parsing "": invalid syntax`},
	}
	for _, tt := range tests {
		_, err := params(t, tt.query)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("params(%q) = %v, want no error", tt.query, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !request.IsBadRequest(err)):
			t.Errorf("params(%q) = %v, want bad request containing %q", tt.query, err, tt.wantErr)
		}
	}
	p, _ := params(t, "limit=-5")
	if p.Limit != 0 {
		t.Errorf("negative limit = %d, want 0 (no limit)", p.Limit)
	}
	// The first value of each parameter, as apimachinery's conversions.
	p, _ = params(t, "fieldSelector=metadata.name%3Da&fieldSelector=&labelSelector=x&labelSelector=y&watch=0&watch=1&limit=5&limit=6")
	if p.FieldSelector != "metadata.name=a" || p.LabelSelector != "x" || p.Watch || p.Limit != 5 {
		t.Errorf("repeated parameters = %+v, want the first of each", p)
	}
	for _, w := range []string{"", "1", "true", "t", "f", "F", "no", "FALSE0"} {
		if p, _ := params(t, "watch="+w); !p.Watch {
			t.Errorf("watch=%s is not a watch", w)
		}
	}
	for _, w := range []string{"0", "false", "False", "fAlSe"} {
		if p, _ := params(t, "watch="+w); p.Watch {
			t.Errorf("watch=%s is a watch", w)
		}
	}
}

func TestContinueToken(t *testing.T) {
	prefix := "/registry/configmaps/ns/"
	tok, err := request.EncodeContinue([]byte("/registry/configmaps/ns/cm-1"), prefix, 42)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		t.Fatalf("token %q is not unpadded base64url: %v", tok, err)
	}
	if want := `{"v":"meta.k8s.io/v1","rv":42,"start":"cm-1\u0000"}`; string(raw) != want {
		t.Errorf("token JSON = %s, want %s", raw, want)
	}
	key, rev, err := request.DecodeContinue(tok, prefix)
	if err != nil || key != "/registry/configmaps/ns/cm-1\x00" || rev != 42 {
		t.Errorf("decodeContinue = %q, %d, %v", key, rev, err)
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	// DESIGN.md's form with a leading "/" decodes to the same key.
	if key, _, err := request.DecodeContinue(enc(`{"v":"meta.k8s.io/v1","rv":42,"start":"/cm-1\u0000"}`), prefix); err != nil || key != "/registry/configmaps/ns/cm-1\x00" {
		t.Errorf("decode leading slash = %q, %v", key, err)
	}
	bad := []struct{ token, want string }{
		{"!!!", "continue key is not valid"},
		{enc(`not json`), "continue key is not valid"},
		{enc(`{"v":"meta.k8s.io/v2","rv":1,"start":"a"}`), "server does not recognize this encoded version"},
		{enc(`{"v":"meta.k8s.io/v1","rv":0,"start":"a"}`), "incorrect encoded start resourceVersion"},
		{enc(`{"v":"meta.k8s.io/v1","rv":1,"start":""}`), "encoded start key empty"},
		{enc(`{"v":"meta.k8s.io/v1","rv":1,"start":"../secrets/x"}`), "continue key is not valid"},
		{enc(`{"v":"meta.k8s.io/v1","rv":1,"start":"a/../../b"}`), "continue key is not valid"},
		{base64.StdEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":1,"start":"a"}`)), "continue key is not valid"},
	}
	for _, b := range bad {
		_, _, err := request.DecodeContinue(b.token, prefix)
		if err == nil || !request.IsBadRequest(err) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("decodeContinue(%q) = %v, want bad request with %q", b.token, err, b.want)
		}
	}
}

func TestWantsAggregated(t *testing.T) {
	tests := []struct {
		accept string
		want   bool
	}{
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", true},
		{"application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", true},
		{"application/json, */*", false},
		{"", false},
		{"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json", false},
	}
	for _, tt := range tests {
		if got := wantsAggregated(tt.accept); got != tt.want {
			t.Errorf("wantsAggregated(%q) = %v, want %v", tt.accept, got, tt.want)
		}
	}
}

func TestParseFilter(t *testing.T) {
	convert := func(l string) (string, error) {
		switch l {
		case "metadata.name", "metadata.namespace", "status.phase":
			return l, nil
		case "spec.host":
			return "spec.nodeName", nil
		}
		return "", request.Errorf("field label not supported: %s", l)
	}
	f, err := request.ParseFilter("app in (a,b),!old,tier", "metadata.name=x,spec.host!=n1", convert)
	if err != nil {
		t.Fatal(err)
	}
	if f.Labels == nil || len(f.Fields) != 2 || f.Name != "x" || f.Fields[1].Field != "spec.nodeName" || !f.Fields[1].Not {
		t.Errorf("parseFilter = %+v", f)
	}
	for _, tt := range []struct{ l, f, want string }{
		{"app in (a", "", "unable to parse requirement"},
		{"", "spec.foo=1", "field label not supported: spec.foo"},
		{"", "metadata.name", "invalid selector"},
	} {
		if _, err := request.ParseFilter(tt.l, tt.f, convert); err == nil || !request.IsBadRequest(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFilter(%q, %q) = %v, want bad request with %q", tt.l, tt.f, err, tt.want)
		}
	}
	if f, err := request.ParseFilter("", "", convert); err != nil || !f.Empty() {
		t.Errorf("empty selectors: %+v %v", f, err)
	}
}
