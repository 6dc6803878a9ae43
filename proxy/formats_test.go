package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/store"
)

const kubectlTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"

func TestTable(t *testing.T) {
	e := startEnv(t)
	fx := seedMixed(t, e)
	for _, tt := range []struct {
		path, include string
		rows          int
		column        string
	}{
		{"/api/v1/namespaces/ns1/configmaps", "", 2, "Data"},
		{"/api/v1/pods", "Object", 2, "Ready"},
		{"/api/v1/nodes", "None", 2, "Status"},
		{"/apis/apps/v1/namespaces/ns1/deployments", "", 1, "Ready"},
		{"/api/v1/namespaces/ns1/configmaps/cm-a", "", 1, "Data"},
	} {
		path := tt.path
		if tt.include != "" {
			path += "?includeObject=" + tt.include
		}
		code, hdr, body := e.raw(t, http.MethodGet, path, kubectlTableAccept)
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/json;as=Table;v=v1;g=meta.k8s.io") {
			t.Fatalf("GET %s as Table = %d %s %s", path, code, hdr.Get("Content-Type"), body)
		}
		var tbl metav1.Table
		if err := json.Unmarshal(body, &tbl); err != nil {
			t.Fatalf("GET %s: not a Table: %v\n%s", path, err, body)
		}
		if tbl.Kind != "Table" || len(tbl.Rows) != tt.rows {
			t.Fatalf("GET %s: kind %q rows %d, want Table with %d rows", path, tbl.Kind, len(tbl.Rows), tt.rows)
		}
		found := false
		for _, c := range tbl.ColumnDefinitions {
			found = found || c.Name == tt.column
		}
		if !found || tbl.ColumnDefinitions[0].Name != "Name" {
			t.Errorf("GET %s: columns %+v, want Name first and %s", path, tbl.ColumnDefinitions, tt.column)
		}
		for _, r := range tbl.Rows {
			switch tt.include {
			case "None":
				if r.Object.Raw != nil && string(r.Object.Raw) != "null" {
					t.Errorf("GET %s: includeObject=None row object %s", path, r.Object.Raw)
				}
			case "Object":
				var p corev1.Pod
				if err := json.Unmarshal(r.Object.Raw, &p); err != nil || p.Kind != "Pod" || len(p.Spec.Containers) == 0 {
					t.Errorf("GET %s: includeObject=Object row object %s", path, r.Object.Raw)
				}
			default:
				var m metav1.PartialObjectMetadata
				if err := json.Unmarshal(r.Object.Raw, &m); err != nil || m.Kind != "PartialObjectMetadata" || m.Name == "" || m.ResourceVersion == "" {
					t.Errorf("GET %s: row object %s, want PartialObjectMetadata", path, r.Object.Raw)
				}
			}
		}
	}
	// The ConfigMap table row of cm-a: name and 2 data keys.
	_, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns1/configmaps/cm-a", kubectlTableAccept)
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil {
		t.Fatal(err)
	}
	if tbl.ResourceVersion != strconv.FormatInt(fx["configmaps/ns1/cm-a"].rev, 10) || fmt.Sprint(tbl.Rows[0].Cells[:2]) != "[cm-a 2]" {
		t.Errorf("cm-a table = rv %s cells %v", tbl.ResourceVersion, tbl.Rows[0].Cells)
	}
}

func TestMetadataClient(t *testing.T) {
	e := startEnv(t)
	fx := seedMixed(t, e)
	ctx := context.Background()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	for name, mc := range map[string]metadata.Interface{"json": metadata.NewForConfigOrDie(e.jsonCfg), "protobuf": metadata.NewForConfigOrDie(e.protCfg)} {
		l, err := mc.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{LabelSelector: "app=a"})
		if err != nil {
			t.Fatalf("%s: metadata List: %v", name, err)
		}
		if len(l.Items) != 2 || l.Items[0].Name != "cm-a" || l.Items[1].Name != "cm-c" {
			t.Fatalf("%s: metadata List = %+v", name, l.Items)
		}
		want := fx["configmaps/ns1/cm-a"]
		wm := oracle(t, want.stored, want.rev).(*corev1.ConfigMap).ObjectMeta
		if !equality.Semantic.DeepEqual(l.Items[0].ObjectMeta, wm) {
			t.Errorf("%s: metadata of cm-a = %+v, want %+v", name, l.Items[0].ObjectMeta, wm)
		}
		m, err := mc.Resource(gvr).Namespace("ns1").Get(ctx, "cm-b", metav1.GetOptions{})
		if err != nil || m.Name != "cm-b" || m.Labels["app"] != "b" || m.ResourceVersion != strconv.FormatInt(fx["configmaps/ns1/cm-b"].rev, 10) {
			t.Fatalf("%s: metadata Get = %+v, %v", name, m, err)
		}
		// Paged metadata list.
		l, err = mc.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{Limit: 2})
		if err != nil || len(l.Items) != 2 || l.Continue == "" || l.RemainingItemCount == nil || *l.RemainingItemCount != 1 {
			t.Fatalf("%s: metadata List limit=2 = %+v, %v", name, l, err)
		}
	}
}

func TestYAML(t *testing.T) {
	e := startEnv(t)
	fx := seedMixed(t, e)
	code, hdr, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns1/configmaps", "application/yaml")
	if code != 200 || hdr.Get("Content-Type") != "application/yaml" {
		t.Fatalf("YAML list = %d %s %s", code, hdr.Get("Content-Type"), body)
	}
	var l corev1.ConfigMapList
	if err := yaml.UnmarshalStrict(body, &l); err != nil {
		t.Fatalf("YAML list does not parse: %v\n%s", err, body)
	}
	if len(l.Items) != 2 || l.Kind != "ConfigMapList" {
		t.Fatalf("YAML list = %+v", l)
	}
	same(t, "yaml list item", &l.Items[1], fx["configmaps/ns1/cm-b"])
	code, _, body = e.raw(t, http.MethodGet, "/api/v1/namespaces/ns1/configmaps?limit=1", "application/yaml")
	if err := yaml.Unmarshal(body, &l); err != nil || code != 200 || len(l.Items) != 1 || l.Continue == "" {
		t.Fatalf("YAML list limit=1 = %d %v %+v", code, err, l.ListMeta)
	}
	code, _, body = e.raw(t, http.MethodGet, "/api/v1/namespaces/empty/configmaps", "application/yaml")
	if err := yaml.Unmarshal(body, &l); err != nil || code != 200 || len(l.Items) != 0 || !strings.Contains(string(body), "items: []") {
		t.Fatalf("empty YAML list = %d %v %s", code, err, body)
	}
	code, _, body = e.raw(t, http.MethodGet, "/api/v1/namespaces/ns1/pods/p1", "application/yaml")
	var p corev1.Pod
	if err := yaml.Unmarshal(body, &p); err != nil || code != 200 {
		t.Fatalf("YAML get = %d %v %s", code, err, body)
	}
	same(t, "yaml pod", &p, fx["pods/ns1/p1"])
	// Errors are negotiated like objects: a YAML client gets a YAML Status
	// (sigs.k8s.io/yaml of the JSON Status, as kube-apiserver writes it).
	for _, path := range []string{"/api/v1/namespaces/ns1/pods/missing", "/api/v1/namespaces/ns1/configmaps?limit=x", "/apis/apps/v9/things"} {
		code, hdr, body = e.raw(t, http.MethodGet, path, "application/yaml")
		_, _, jbody := e.raw(t, http.MethodGet, path, "application/json")
		want, err := yaml.JSONToYAML(jbody)
		if err != nil {
			t.Fatal(err)
		}
		var st metav1.Status
		if err := yaml.UnmarshalStrict(body, &st); err != nil || hdr.Get("Content-Type") != "application/yaml" ||
			st.Kind != "Status" || st.Code != int32(code) || code < 400 || string(body) != string(want) {
			t.Errorf("YAML error for %s = %d %s %v\n%s\nwant\n%s", path, code, hdr.Get("Content-Type"), err, body, want)
		}
	}
}

func TestErrors(t *testing.T) {
	e := startEnv(t)
	seedMixed(t, e)
	status := func(body []byte) metav1.Status {
		var st metav1.Status
		if err := json.Unmarshal(body, &st); err != nil {
			t.Fatalf("not a Status: %v: %s", err, body)
		}
		return st
	}
	for _, tt := range []struct {
		method, path, accept string
		code                 int
		reason               metav1.StatusReason
		msg                  string
	}{
		{"POST", "/api/v1/namespaces/ns1/configmaps", "", 405, metav1.StatusReasonMethodNotAllowed, "does not allow this method"},
		{"PUT", "/api/v1/namespaces/ns1/configmaps/cm-a", "", 405, metav1.StatusReasonMethodNotAllowed, ""},
		{"PATCH", "/api/v1/namespaces/ns1/configmaps/cm-a", "", 405, metav1.StatusReasonMethodNotAllowed, ""},
		{"DELETE", "/api/v1/namespaces/ns1/configmaps/cm-a", "", 405, metav1.StatusReasonMethodNotAllowed, ""},
		{"GET", "/api/v1/namespaces/ns1/configmaps", "text/html", 406, metav1.StatusReasonNotAcceptable, "only the following media types are accepted"},
		{"GET", "/api/v1/namespaces/ns1/configmaps", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io", 406, metav1.StatusReasonNotAcceptable, ""},
		{"GET", "/api/v1/namespaces/ns1/configmaps?continue=garbage", "", 400, metav1.StatusReasonBadRequest, "invalid continue token"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiJhIn0&resourceVersion=5", "", 400, metav1.StatusReasonBadRequest, "specifying resource version is not allowed when using continue"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?limit=x", "", 400, metav1.StatusReasonBadRequest, `strconv.ParseInt: parsing "x"`},
		{"GET", "/api/v1/namespaces/ns1/configmaps?resourceVersion=x", "", 400, metav1.StatusReasonBadRequest, "invalid resource version"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?labelSelector=a+in+(", "", 400, metav1.StatusReasonBadRequest, ""},
		{"GET", "/api/v1/namespaces/ns1/configmaps?fieldSelector=data.k%3Dv", "", 400, metav1.StatusReasonBadRequest, "data.k"},
		{"GET", "/api/v1/namespaces/ns1/pods?fieldSelector=spec.bogus%3Dv", "", 400, metav1.StatusReasonBadRequest, "field label not supported: spec.bogus"},
		{"GET", "/api/v1/namespaces/ns1/widgets", "", 404, metav1.StatusReasonNotFound, "the server could not find the requested resource"},
		{"GET", "/apis/apps/v9/things", "", 404, metav1.StatusReasonNotFound, ""}, // unknown groups: TestNotFoundAgainstKubeAPIServer
		{"GET", "/api/v1/namespaces/ns1/nodes", "", 404, metav1.StatusReasonNotFound, ""},
		{"GET", "/api/v1/pods/p1", "", 404, metav1.StatusReasonNotFound, ""},
		{"GET", "/api/v1/namespaces/ns1/pods/p1/log", "", 405, metav1.StatusReasonMethodNotAllowed, "pods/log is not served by lazyapi, which serves only the objects stored in etcd, read-only: send log, exec, attach, portforward and proxy requests to kube-apiserver"},
		{"POST", "/api/v1/namespaces/ns1/pods/p1/exec?command=ls", "", 405, metav1.StatusReasonMethodNotAllowed, "pods/exec is not served by lazyapi"},
		{"GET", "/api/v1/namespaces/ns1/pods/p1/proxy/metrics/x", "", 405, metav1.StatusReasonMethodNotAllowed, "pods/proxy is not served by lazyapi"},
		{"GET", "/api/v1/nodes/n1/proxy", "", 405, metav1.StatusReasonMethodNotAllowed, "nodes/proxy is not served by lazyapi"},
		{"GET", "/api/v1/namespaces/ns1/pods/p1/binding", "", 405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"GET", "/api/v1/namespaces/ns1/configmaps/c1/status", "", 404, metav1.StatusReasonNotFound, ""},
		{"GET", "/api/v1/namespaces/ns1/pods/missing", "", 404, metav1.StatusReasonNotFound, `pods "missing" not found`},
		{"GET", "/api/v1/watch/namespaces/ns1/configmaps?resourceVersion=5&resourceVersionMatch=Exact", "", 400, metav1.StatusReasonBadRequest, "resourceVersionMatch is forbidden for watch"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan", "", 400, metav1.StatusReasonBadRequest, "allowWatchBookmarks"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "", 400, metav1.StatusReasonBadRequest, "sendInitialEvents is forbidden for list"},
		{"GET", "/api/v1/namespaces/ns1/configmaps?sendInitialEvents=false", "", 400, metav1.StatusReasonBadRequest, "sendInitialEvents is forbidden for list"},
	} {
		code, hdr, body := e.raw(t, tt.method, tt.path, tt.accept)
		if code != tt.code || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s = %d %s, want %d application/json: %s", tt.method, tt.path, code, hdr.Get("Content-Type"), tt.code, body)
			continue
		}
		st := status(body)
		if st.Kind != "Status" || st.Code != int32(tt.code) || st.Reason != tt.reason || st.Status != "Failure" || !strings.Contains(st.Message, tt.msg) {
			t.Errorf("%s %s = %+v, want code %d reason %s message with %q", tt.method, tt.path, st, tt.code, tt.reason, tt.msg)
		}
	}
	// Errors in protobuf for protobuf clients.
	_, err := e.pcs.CoreV1().Pods("ns1").Get(context.Background(), "missing", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("protobuf client NotFound = %v", err)
	}
	code, hdr, _ := e.raw(t, "GET", "/api/v1/namespaces/ns1/pods/missing", "application/vnd.kubernetes.protobuf")
	if code != 404 || hdr.Get("Content-Type") != "application/vnd.kubernetes.protobuf" {
		t.Errorf("protobuf NotFound = %d %s", code, hdr.Get("Content-Type"))
	}
}

func TestDecodeErrorIs500(t *testing.T) {
	e := startEnv(t)
	seedMixed(t, e)
	e.putRaw(t, "/registry/configmaps/ns1/cm-broken", []byte("k8s\x00\x0a\xff\xff garbage"))
	code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps/cm-broken", "")
	if code != 500 || !strings.Contains(string(body), "/registry/configmaps/ns1/cm-broken") {
		t.Errorf("GET broken = %d %s, want 500 naming the key", code, body)
	}
	code, _, body = e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps", "")
	if code != 500 || !strings.Contains(string(body), "/registry/configmaps/ns1/cm-broken") {
		t.Errorf("LIST with broken item = %d %s, want 500 naming the key", code, body)
	}
	if v, err := metricValue(e.ms, "lazyapi_decode_errors_total"); err != nil || v < 2 {
		t.Errorf("lazyapi_decode_errors_total = %v, %v; want >= 2", v, err)
	}
}

// TestDecodeErrorMidStream: a broken value after the first page of a
// streamed list ends the stream; the client sees a truncated body, never a
// complete list missing an item.
func TestDecodeErrorMidStream(t *testing.T) {
	e := startEnv(t, withStore(func(sc *store.Config) { sc.PageSize = 20 }))
	seedConfigMaps(t, e, "ns", 400, 2<<10)
	e.putRaw(t, "/registry/configmaps/ns/zz-broken", []byte("k8s\x00\x0a\xff\xff garbage"))
	_, err := e.cs.CoreV1().ConfigMaps("ns").List(context.Background(), metav1.ListOptions{})
	if err == nil {
		t.Fatal("list with a broken value after the first page succeeded")
	}
	t.Logf("client error: %v", err)
	// The stream is aborted: no terminating chunk, so a plain HTTP client
	// gets a read error, never a well-formed body missing items.
	resp, err := http.Get(e.url + "/api/v1/namespaces/ns/configmaps")
	if err != nil {
		t.Fatal(err)
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || rerr == nil || json.Valid(body) {
		t.Fatalf("mid-stream failure = %d, read error %v, valid JSON %v; want 200, a read error and a truncated body", resp.StatusCode, rerr, json.Valid(body))
	}
}

func TestDiscoveryHealthMetrics(t *testing.T) {
	e := startEnv(t, withStore(func(sc *store.Config) { sc.CallTimeout = 500 * time.Millisecond }))
	seedMixed(t, e)
	for _, tt := range []struct{ path, accept, ctype, contains string }{
		{"/version", "", "application/json", `"gitVersion"`},
		{"/api", "", "application/json", `"APIVersions"`},
		{"/api/v1", "", "application/json", `"configmaps"`},
		{"/apis", "", "application/json", `"APIGroupList"`},
		{"/apis/apps", "", "application/json", `"APIGroup"`},
		{"/apis/apps/v1", "", "application/json", `"deployments"`},
		{"/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", `"APIGroupDiscoveryList"`},
		{"/api", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", `"APIGroupDiscoveryList"`},
	} {
		code, hdr, body := e.raw(t, "GET", tt.path, tt.accept)
		if code != 200 || hdr.Get("Content-Type") != tt.ctype || !strings.Contains(string(body), tt.contains) {
			t.Errorf("GET %s (%s) = %d %s %.200s", tt.path, tt.accept, code, hdr.Get("Content-Type"), body)
		}
	}
	if code, _, _ := e.raw(t, "GET", "/apis/nope.io", ""); code != 404 {
		t.Errorf("unknown group = %d, want 404", code)
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		if code, _, body := e.raw(t, "GET", p, ""); code != 200 || string(body) != "ok" {
			t.Errorf("GET %s = %d %q", p, code, body)
		}
	}
	code, _, body := e.raw(t, "GET", "/readyz?verbose", "")
	if code != 200 || !strings.Contains(string(body), "[+]etcd ok") || !strings.Contains(string(body), "[+]resources ok") || !strings.Contains(string(body), "readyz check passed") {
		t.Errorf("readyz?verbose = %d %s", code, body)
	}
	if code, _, _ := e.raw(t, "GET", "/readyz/etcd", ""); code != 200 {
		t.Errorf("/readyz/etcd = %d", code)
	}
	// A few requests, then metrics.
	if _, err := e.cs.CoreV1().ConfigMaps("ns1").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps/missing", "")
	code, _, body = e.raw(t, "GET", "/metrics", "")
	m := string(body)
	for _, want := range []string{
		`lazyapi_apiserver_request_total{verb="LIST",resource="configmaps",code="200",format="json"}`,
		`lazyapi_apiserver_request_total{verb="GET",resource="configmaps",code="404",format="json"}`,
		`lazyapi_apiserver_request_duration_seconds_bucket{verb="LIST",resource="configmaps"`,
		`lazyapi_apiserver_response_bytes_total{verb="LIST",resource="configmaps"}`,
		`lazyapi_objects_served_total{path="transcoded"}`,
		`lazyapi_etcd_request_duration_seconds`,
		`process_resident_memory_bytes`,
		`go_memstats_heap_inuse_bytes`,
	} {
		if code != 200 || !strings.Contains(m, want) {
			t.Logf("%s", grepLines(m, "request_total"))
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// etcd down: readyz fails (after the cached answer expires), lists 503.
	e.etcd.Embedded.Close()
	code, hdr, body := e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps", "")
	if code != 503 || hdr.Get("Retry-After") != "1" || !strings.Contains(string(body), `"reason":"ServiceUnavailable"`) {
		t.Errorf("LIST with etcd stopped = %d %v %s, want 503 with Retry-After", code, hdr, body)
	}
	start := time.Now()
	if code, _, _ := e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps/cm-a", ""); code != 503 || time.Since(start) > 400*time.Millisecond {
		t.Errorf("GET right after = %d after %v, want an immediate 503", code, time.Since(start))
	}
	waitFor(t, "readyz to fail with etcd stopped", func() error {
		code, _, body := e.raw(t, "GET", "/readyz?verbose", "")
		if code != 500 || !strings.Contains(string(body), "[-]etcd failed") {
			return fmt.Errorf("readyz = %d %s", code, body)
		}
		return nil
	})
}

// TestEtcdDownHoldNotExtended: a request refused during the hold after an
// etcd failure (503 without asking etcd) does not extend the hold, so a
// steady stream of requests is served again once the hold passes.
func TestEtcdDownHoldNotExtended(t *testing.T) {
	e := startEnv(t)
	seedMixed(t, e)
	at := time.Now()
	recorded := e.srv.SetEtcdDown(at)
	if code, hdr, body := e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps/cm-a", ""); code != 503 || hdr.Get("Retry-After") != "1" {
		t.Fatalf("GET during the hold = %d %v %s, want 503 with Retry-After", code, hdr, body)
	}
	if got := recorded(); !got.Equal(at) {
		t.Errorf("a refusal during the hold moved the recorded failure from %v to %v", at, got)
	}
	e.srv.SetEtcdDown(time.Now().Add(-2 * time.Second))
	if code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns1/configmaps/cm-a", ""); code != 200 {
		t.Errorf("GET after the hold with etcd up = %d %s, want 200", code, body)
	}
}

func TestCustomResources(t *testing.T) {
	e := startEnv(t)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com", "uid": "u1"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{
				map[string]any{"name": "v1", "served": true, "storage": true, "additionalPrinterColumns": []any{
					map[string]any{"name": "Color", "type": "string", "jsonPath": ".spec.color"},
					map[string]any{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
				}},
				map[string]any{"name": "v1beta1", "served": true, "storage": false},
			},
		},
		"status": map[string]any{
			"conditions":    []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
		},
	}}
	val, err := storagefmt.JSON(crd)
	if err != nil {
		t.Fatal(err)
	}
	e.putRaw(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", val)
	stored := map[string][]byte{}
	revs := map[string]int64{}
	for i, name := range []string{"w1", "w2", "w3"} {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "namespace": "ns", "labels": map[string]any{"n": strconv.Itoa(i)}},
			"spec":     map[string]any{"size": int64(i), "color": "blue"},
		}}
		v, err := storagefmt.JSON(w)
		if err != nil {
			t.Fatal(err)
		}
		stored[name] = v
		revs[name] = e.putRaw(t, "/registry/example.com/widgets/ns/"+name, v)
	}
	waitFor(t, "CRD in the resource table", func() error {
		if _, ok := e.table.Lookup("example.com", "v1", "widgets"); !ok {
			return fmt.Errorf("widgets.example.com/v1 not in the table")
		}
		return nil
	})
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	dc := dynamic.NewForConfigOrDie(e.jsonCfg)
	ctx := context.Background()
	l, err := dc.Resource(gvr).Namespace("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(l.Items) != 3 {
		t.Fatalf("dynamic List = %v, %v", l, err)
	}
	for _, it := range l.Items {
		var want map[string]any
		if err := json.Unmarshal(stored[it.GetName()], &want); err != nil {
			t.Fatal(err)
		}
		unstructured.SetNestedField(want, strconv.FormatInt(revs[it.GetName()], 10), "metadata", "resourceVersion")
		got := it.Object
		if !equality.Semantic.DeepEqual(normalize(t, got), normalize(t, want)) {
			t.Errorf("widget %s = %v, want %v", it.GetName(), got, want)
		}
	}
	w, err := dc.Resource(gvr).Namespace("ns").Get(ctx, "w2", metav1.GetOptions{})
	if err != nil || w.GetResourceVersion() != strconv.FormatInt(revs["w2"], 10) || w.GetKind() != "Widget" {
		t.Fatalf("dynamic Get = %v, %v", w, err)
	}
	l, err = dc.Resource(gvr).Namespace("").List(ctx, metav1.ListOptions{LabelSelector: "n=1", Limit: 1})
	if err != nil || len(l.Items) != 1 || l.Items[0].GetName() != "w2" {
		t.Fatalf("dynamic List selector = %v, %v", l, err)
	}
	_, err = dc.Resource(gvr).Namespace("ns").Get(ctx, "missing", metav1.GetOptions{})
	if !apierrors.IsNotFound(err) || err.Error() != `widgets.example.com "missing" not found` {
		t.Fatalf("dynamic Get missing = %v", err)
	}
	// The other served version (conversion strategy None): served from
	// the stored v1 objects with apiVersion set, as apiextensions-
	// apiserver's nopConverter does, byte for byte as kube-apiserver
	// writes the unstructured object (sorted keys).
	asV1beta1 := func(name string) []byte {
		var m map[string]any
		if err := json.Unmarshal(stored[name], &m); err != nil {
			t.Fatal(err)
		}
		m["apiVersion"] = "example.com/v1beta1"
		unstructured.SetNestedField(m, strconv.FormatInt(revs[name], 10), "metadata", "resourceVersion")
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if code, _, body := e.raw(t, "GET", "/apis/example.com/v1beta1/namespaces/ns/widgets/w2", "application/json"); code != 200 ||
		string(body) != string(asV1beta1("w2"))+"\n" {
		t.Errorf("GET v1beta1 widget = %d %s, want %s", code, body, asV1beta1("w2"))
	}
	// An object stored at another version (an older storage version) is
	// served with the version asked for, as by the nopConverter.
	old := []byte(`{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"w0","namespace":"old"},"spec":{"color":"red"}}`)
	oldRV := e.putRaw(t, "/registry/example.com/widgets/old/w0", old)
	if code, _, body := e.raw(t, "GET", "/apis/example.com/v1/namespaces/old/widgets/w0", "application/json"); code != 200 ||
		string(body) != `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w0","namespace":"old","resourceVersion":"`+strconv.FormatInt(oldRV, 10)+`"},"spec":{"color":"red"}}`+"\n" {
		t.Errorf("GET v1 of a widget stored at v1beta1 = %d %s", code, body)
	}
	// A LIST as kube-apiserver writes an UnstructuredList: sorted keys,
	// kind and metadata (continue always) after the items.
	code, _, lbody := e.raw(t, "GET", "/apis/example.com/v1beta1/namespaces/ns/widgets", "application/json")
	var lm struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(lbody, &lm)
	var items []json.RawMessage
	for _, n := range []string{"w1", "w2", "w3"} {
		items = append(items, asV1beta1(n))
	}
	wantList, _ := json.Marshal(map[string]any{"apiVersion": "example.com/v1beta1", "kind": "WidgetList", "items": items,
		"metadata": map[string]any{"continue": "", "resourceVersion": lm.Metadata.ResourceVersion}})
	if code != 200 || string(lbody) != string(wantList)+"\n" {
		t.Errorf("LIST v1beta1 widgets = %d %s\nwant kube-apiserver's %s", code, lbody, wantList)
	}
	lb, err := dc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}).Namespace("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(lb.Items) != 3 || lb.GetAPIVersion() != "example.com/v1beta1" {
		t.Fatalf("v1beta1 List = %v, %v", lb, err)
	}
	for _, it := range lb.Items {
		if b, _ := json.Marshal(it.Object); string(b) != string(asV1beta1(it.GetName())) {
			t.Errorf("v1beta1 list item %s = %s, want %s", it.GetName(), b, asV1beta1(it.GetName()))
		}
	}
	wb, err := dc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}).Namespace("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		ev := <-wb.ResultChan()
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || u.GetAPIVersion() != "example.com/v1beta1" {
			t.Errorf("v1beta1 watch event %v %v", ev.Type, ev.Object)
		}
	}
	wb.Stop()
	// Protobuf-only Accept for a custom resource: 406.
	if code, _, _ := e.raw(t, "GET", "/apis/example.com/v1/namespaces/ns/widgets", "application/vnd.kubernetes.protobuf"); code != 406 {
		t.Errorf("protobuf widgets = %d, want 406", code)
	}
	// Table with the CRD's additionalPrinterColumns.
	code, _, body := e.raw(t, "GET", "/apis/example.com/v1/namespaces/ns/widgets", kubectlTableAccept)
	var tbl metav1.Table
	if err := json.Unmarshal(body, &tbl); err != nil || code != 200 {
		t.Fatalf("widgets table = %d %v %s", code, err, body)
	}
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if fmt.Sprint(cols) != "[Name Color Size]" || len(tbl.Rows) != 3 || fmt.Sprint(tbl.Rows[2].Cells) != "[w3 blue 2]" {
		t.Errorf("widgets table = columns %v rows %v", cols, tbl.Rows)
	}
	// Metadata client over a CR.
	ml, err := metadata.NewForConfigOrDie(e.protCfg).Resource(gvr).Namespace("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(ml.Items) != 3 || ml.Items[2].Name != "w3" {
		t.Fatalf("metadata List of widgets = %v, %v", ml, err)
	}
}

func normalize(t *testing.T, m map[string]any) map[string]any {
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
