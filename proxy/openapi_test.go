package proxy_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	openapi_v2 "github.com/google/gnostic-models/openapiv2"
	openapi_v3 "github.com/google/gnostic-models/openapiv3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"

	"github.com/lazyapi/lazyapi/proxy"
)

const kubeOpenAPI = "../openapi/testdata/kube-apiserver/"

// putTestCRDs writes the CRDs kube-apiserver stored for
// internal/testing/kubecapture's test CRDs and waits until the table serves them.
func putTestCRDs(t *testing.T, e *env) {
	t.Helper()
	b, err := os.ReadFile(kubeOpenAPI + "crds.stored.json")
	if err != nil {
		t.Fatal(err)
	}
	var stored []json.RawMessage
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		var m struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(s, &m); err != nil {
			t.Fatal(err)
		}
		e.putRaw(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/"+m.Metadata.Name, s)
	}
	waitFor(t, "CRDs served", func() error {
		for _, gvr := range [][3]string{{"stable.example.com", "v1", "crontabs"}, {"example.com", "v1", "widgets"}, {"example.com", "v1", "gadgets"}} {
			if _, ok := e.table.Lookup(gvr[0], gvr[1], gvr[2]); !ok {
				return io.EOF
			}
		}
		return nil
	})
}

// semanticJSON decodes b (gzip-compressed when it starts with the gzip
// magic).
func semanticJSON(t *testing.T, what string, b []byte) any {
	t.Helper()
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v: %.200s", what, err, b)
	}
	return v
}

// TestOpenAPIV3CRDs: the v3 document of a CRD group-version, built from
// the CRDs kube-apiserver stored, equals (as JSON) what kube-apiserver
// served for them: several CRDs merged in one group-version, namespaced
// and cluster-scoped, status and scale, every kind of schema property.
// Read-only, the documents are kube-apiserver's without the write
// operations.
func TestOpenAPIV3CRDs(t *testing.T) {
	for _, writes := range []bool{true, false} {
		e := startEnv(t, servesWrites(writes))
		putTestCRDs(t, e)
		for _, p := range []string{"apis/stable.example.com/v1", "apis/stable.example.com/v1beta1", "apis/example.com/v1"} {
			want, err := os.ReadFile(kubeOpenAPI + "v3-" + strings.ReplaceAll(p, "/", "~") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			code, _, got := e.raw(t, "GET", "/openapi/v3/"+p, "application/json")
			if code != 200 {
				t.Fatalf("GET /openapi/v3/%s = %d %s", p, code, got)
			}
			w := semanticJSON(t, "kube-apiserver "+p, want)
			if !writes {
				w = readOnlyDoc(w)
			}
			diffJSON(t, p, semanticJSON(t, p, got), w)
		}
	}
}

// servesWrites is an env option: Config.ServesWrites.
func servesWrites(on bool) envOption {
	return func(c *proxy.Config) { c.ServesWrites = on }
}

// readOnlyDoc returns an OpenAPI document (decoded JSON) with only the
// operations a read-only lazyapi serves: GET, and POST of the self
// reviews; a path with no operation left is removed.
func readOnlyDoc(doc any) any {
	m, _ := doc.(map[string]any)
	paths, _ := m["paths"].(map[string]any)
	if paths == nil {
		return doc
	}
	for p, item := range paths {
		ops, _ := item.(map[string]any)
		keep := false
		for k := range ops {
			switch {
			case k == "get" || k == "post" && strings.HasSuffix(p, "reviews") && strings.Contains(p, "/selfsubject"):
				keep = true
			case k != "parameters":
				delete(ops, k)
			}
		}
		if !keep {
			delete(paths, p)
		}
	}
	return doc
}

// TestOpenAPIV2CRDs: the CRDs' paths and definitions in /openapi/v2 equal
// kube-apiserver's.
func TestOpenAPIV2CRDs(t *testing.T) {
	e := startEnv(t, servesWrites(true))
	putTestCRDs(t, e)
	code, _, got := e.raw(t, "GET", "/openapi/v2", "application/json")
	if code != 200 {
		t.Fatalf("GET /openapi/v2 = %d %.300s", code, got)
	}
	wantB, err := os.ReadFile(kubeOpenAPI + "v2-crds.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc, want struct {
		Paths       map[string]any `json:"paths"`
		Definitions map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(wantB, &want); err != nil {
		t.Fatal(err)
	}
	for p, w := range want.Paths {
		if strings.Contains(p, "/zzgroup.") {
			continue // the template CRDs, not stored here
		}
		diffJSON(t, "v2 path "+p, doc.Paths[p], w)
	}
	for d, w := range want.Definitions {
		diffJSON(t, "v2 definition "+d, doc.Definitions[d], w)
	}
	if _, ok := doc.Paths["/apis/authentication.k8s.io/v1/tokenreviews"]; !ok {
		t.Errorf("forwarding, /openapi/v2 does not list authentication.k8s.io/v1 tokenreviews")
	}
	if _, ok := doc.Paths["/apis/apps/v1/namespaces/{namespace}/deployments"]; !ok {
		t.Errorf("/openapi/v2 does not list apps/v1 deployments")
	}
}

// TestOpenAPIReadOnly: read-only, /openapi/v2 and every /openapi/v3
// document list GET operations only, and POST of the self reviews, which
// lazyapi answers; /openapi/v3 lists the self reviews' group-versions and
// not the ones lazyapi serves nothing of. Forwarding, /openapi/v3 lists
// every group-version kube-apiserver v1.37 lists, and the documents have
// its write operations.
func TestOpenAPIReadOnly(t *testing.T) {
	kubeB, err := os.ReadFile(kubeOpenAPI + "v3-discovery.json")
	if err != nil {
		t.Fatal(err)
	}
	var kube struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(kubeB, &kube); err != nil {
		t.Fatal(err)
	}
	for _, writes := range []bool{false, true} {
		e := startEnv(t, servesWrites(writes))
		var disc struct {
			Paths map[string]any `json:"paths"`
		}
		code, _, b := e.raw(t, "GET", "/openapi/v3", "application/json")
		if err := json.Unmarshal(b, &disc); err != nil || code != 200 {
			t.Fatalf("GET /openapi/v3 = %d %v", code, err)
		}
		writeOps := 0
		for p := range disc.Paths {
			code, _, b := e.raw(t, "GET", "/openapi/v3/"+p, "application/json")
			var doc struct {
				Paths map[string]map[string]any `json:"paths"`
			}
			if err := json.Unmarshal(b, &doc); err != nil || code != 200 {
				t.Fatalf("GET /openapi/v3/%s = %d %v", p, code, err)
			}
			for path, ops := range doc.Paths {
				for op := range ops {
					switch op {
					case "get", "parameters":
					case "post":
						if !strings.Contains(path, "/selfsubject") {
							writeOps++
						}
					default:
						writeOps++
					}
				}
			}
		}
		var v2 struct {
			Paths map[string]map[string]any `json:"paths"`
		}
		code, _, b = e.raw(t, "GET", "/openapi/v2", "application/json")
		if err := json.Unmarshal(b, &v2); err != nil || code != 200 {
			t.Fatalf("GET /openapi/v2 = %d %v", code, err)
		}
		v2Writes := 0
		for path, ops := range v2.Paths {
			for op := range ops {
				if op != "get" && op != "parameters" && !(op == "post" && strings.Contains(path, "/selfsubject")) {
					v2Writes++
				}
			}
		}
		_, ssar := v2.Paths["/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"]["post"]
		if writes {
			if writeOps == 0 || v2Writes == 0 || !ssar {
				t.Errorf("forwarding: %d v3 and %d v2 write operations, self access review POST %v; want kube-apiserver's", writeOps, v2Writes, ssar)
			}
			for p := range kube.Paths {
				if _, ok := disc.Paths[p]; !ok {
					t.Errorf("forwarding: /openapi/v3 lacks %s", p)
				}
			}
			if len(disc.Paths) != len(kube.Paths) {
				t.Errorf("forwarding: /openapi/v3 lists %d paths, kube-apiserver %d", len(disc.Paths), len(kube.Paths))
			}
			continue
		}
		if writeOps != 0 || v2Writes != 0 || !ssar {
			t.Errorf("read-only: %d v3 and %d v2 write operations, self access review POST %v; want none, none, listed", writeOps, v2Writes, ssar)
		}
		for p, want := range map[string]bool{"apis/authentication.k8s.io/v1": true, "apis/authorization.k8s.io/v1": true,
			"apis/apps/v1": true, "openid/v1/jwks": false, ".well-known/openid-configuration": false} {
			if _, ok := disc.Paths[p]; ok != want {
				t.Errorf("read-only: /openapi/v3 lists %s: %v, want %v", p, ok, want)
			}
		}
	}
}

func diffJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	g, _ := json.MarshalIndent(got, "", " ")
	w, _ := json.MarshalIndent(want, "", " ")
	gl, wl := strings.Split(string(g), "\n"), strings.Split(string(w), "\n")
	for i := range max(len(gl), len(wl)) {
		var a, b string
		if i < len(gl) {
			a = gl[i]
		}
		if i < len(wl) {
			b = wl[i]
		}
		if a != b {
			t.Errorf("%s differs from kube-apiserver's at line %d:\n got: %s\nwant: %s\n(got %d lines, want %d)", what, i+1, a, b, len(gl), len(wl))
			return
		}
	}
}

// TestOpenAPIHTTP: ETags, If-None-Match, ?hash=, gzip, protobuf, 404 and
// 406 as kube-apiserver's handlers answer them.
func TestOpenAPIHTTP(t *testing.T) {
	e := startEnv(t)
	get := func(path string, h map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+path, nil)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		tr := &http.Transport{DisableCompression: true}
		resp, err := (&http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	body := func(r *http.Response) []byte {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Discovery lists served group-versions with their hash, and only them.
	r := get("/openapi/v3", nil)
	var disc struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(body(r), &disc); err != nil || r.StatusCode != 200 {
		t.Fatalf("GET /openapi/v3 = %d, %v", r.StatusCode, err)
	}
	apps, ok := disc.Paths["apis/apps/v1"]
	if !ok || !strings.HasPrefix(apps.ServerRelativeURL, "/openapi/v3/apis/apps/v1?hash=") {
		t.Fatalf("/openapi/v3 apis/apps/v1 = %+v", apps)
	}
	for _, p := range []string{"logs", "openid/v1/jwks"} {
		if _, ok := disc.Paths[p]; ok {
			t.Errorf("/openapi/v3 lists %q, which lazyapi does not serve", p)
		}
	}
	hash := strings.TrimPrefix(apps.ServerRelativeURL, "/openapi/v3/apis/apps/v1?hash=")

	r = get(apps.ServerRelativeURL, nil)
	if r.StatusCode != 200 || r.Header.Get("Etag") != `"`+hash+`"` || r.Header.Get("Cache-Control") != "public, immutable" ||
		r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("GET %s = %d %v", apps.ServerRelativeURL, r.StatusCode, r.Header)
	}
	want, err := os.ReadFile("../openapi/data/v3-apis~apps~v1.json.gz")
	if err == nil {
		diffJSON(t, "apps/v1", semanticJSON(t, "apps/v1", body(r)), readOnlyDoc(semanticJSON(t, "kube-apiserver apps/v1", want)))
	} else {
		body(r)
	}
	r = get("/openapi/v3/apis/apps/v1?hash=stale", nil)
	if r.StatusCode != 301 || r.Header.Get("Location") != apps.ServerRelativeURL {
		t.Errorf("GET with a stale hash = %d Location %q, want 301 to %q", r.StatusCode, r.Header.Get("Location"), apps.ServerRelativeURL)
	}
	r = get("/openapi/v3/apis/apps/v1", map[string]string{"If-None-Match": `"` + hash + `"`})
	if r.StatusCode != 304 {
		t.Errorf("GET with If-None-Match = %d, want 304", r.StatusCode)
	}
	r = get("/openapi/v3/apis/apps/v1", map[string]string{"Accept-Encoding": "gzip"})
	if r.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("GET with Accept-Encoding gzip: Content-Encoding %q", r.Header.Get("Content-Encoding"))
	}
	gz := semanticJSON(t, "gzip", body(r))
	if m, _ := gz.(map[string]any); m["paths"] == nil {
		t.Errorf("gzip body has no paths")
	}
	r = get("/openapi/v3/apis/apps/v1", map[string]string{"Accept": "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"})
	var d3 openapi_v3.Document
	if err := proto.Unmarshal(body(r), &d3); err != nil || r.Header.Get("Content-Type") != "application/com.github.proto-openapi.spec.v3.v1.0+protobuf" {
		t.Errorf("v3 protobuf: %v, Content-Type %q", err, r.Header.Get("Content-Type"))
	} else if d3.Components == nil || len(d3.Components.Schemas.AdditionalProperties) == 0 {
		t.Errorf("v3 protobuf document has no schemas")
	}
	r = get("/openapi/v3/apis/apps/v1", map[string]string{"Accept": "text/html"})
	if r.StatusCode != 406 {
		t.Errorf("GET Accept text/html = %d, want 406", r.StatusCode)
	}
	r = get("/openapi/v3/apis/nope.example.com/v1", nil)
	if b := body(r); r.StatusCode != 404 || len(b) != 0 {
		t.Errorf("GET unknown group-version = %d %q, want 404 and no body", r.StatusCode, b)
	}
	r = get("/openapi/v2", map[string]string{"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"})
	var d2 openapi_v2.Document
	if err := proto.Unmarshal(body(r), &d2); err != nil || r.StatusCode != 200 {
		t.Errorf("v2 protobuf: %d %v", r.StatusCode, err)
	} else if d2.Definitions == nil || len(d2.Definitions.AdditionalProperties) < 100 {
		t.Errorf("v2 protobuf document has few definitions")
	}
}

// TestOpenAPIClientGo: client-go's OpenAPI v2 (discovery, protobuf) and v3
// (openapi3 root) clients read lazyapi's documents, including a CRD's.
func TestOpenAPIClientGo(t *testing.T) {
	e := startEnv(t)
	putTestCRDs(t, e)
	dc := discovery.NewDiscoveryClientForConfigOrDie(e.jsonCfg)
	v2, err := dc.OpenAPISchema()
	if err != nil {
		t.Fatalf("OpenAPISchema: %v", err)
	}
	found := false
	for _, d := range v2.GetDefinitions().GetAdditionalProperties() {
		found = found || d.Name == "com.example.stable.v1.CronTab"
	}
	if !found {
		t.Errorf("v2 has no com.example.stable.v1.CronTab")
	}
	root := openapi3.NewRoot(dc.OpenAPIV3())
	gvs, err := root.GroupVersions()
	if err != nil {
		t.Fatalf("GroupVersions: %v", err)
	}
	if len(gvs) < 10 {
		t.Errorf("GroupVersions = %v", gvs)
	}
	spec, err := root.GVSpec(schemaGV("stable.example.com", "v1"))
	if err != nil {
		t.Fatalf("GVSpec: %v", err)
	}
	if _, ok := spec.Components.Schemas["com.example.stable.v1.CronTab"]; !ok {
		t.Errorf("stable.example.com/v1 has no CronTab schema")
	}
}

func schemaGV(g, v string) schema.GroupVersion { return schema.GroupVersion{Group: g, Version: v} }
