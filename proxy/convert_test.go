package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// convertFixture is codec/testdata/convert/kube-apiserver.json: stored
// values and what kube-apiserver v1.37.2 serves for them at the versions
// it converts to (written by codec/testdata/convert/gen with
// kube-apiserver's own storage codec and conversion functions).
type convertFixture struct {
	RV    int64 `json:"rv"`
	Cases []struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		Stored   []byte `json:"stored"`
		Served   string `json:"served"`
		Path     string `json:"path"`
		JSON     string `json:"json"`
		Protobuf []byte `json:"protobuf"`
	} `json:"cases"`
	Lists []struct {
		Path     string `json:"path"`
		JSON     string `json:"json"`
		Protobuf []byte `json:"protobuf"`
	} `json:"lists"`
	Tables []struct {
		Path    string                         `json:"path"`
		Columns []metav1.TableColumnDefinition `json:"columns"`
		Cells   [][]any                        `json:"cells"`
	} `json:"tables"`
}

// startConverted starts an env whose etcd holds the fixture's stored
// objects, written in one transaction as the first write, so that they
// carry the revision the expected answers were generated for.
func startConverted(t *testing.T) (*env, *convertFixture) {
	t.Helper()
	b, err := os.ReadFile("../codec/testdata/convert/kube-apiserver.json")
	if err != nil {
		t.Fatal(err)
	}
	var f convertFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	e := startEnv(t)
	var kvs [][2]string
	for _, c := range f.Cases {
		kvs = append(kvs, [2]string{c.Key, string(c.Stored)})
	}
	if rev := e.putMany(t, kvs); rev != f.RV {
		t.Fatalf("fixtures written at revision %d, the expected answers are for %d", rev, f.RV)
	}
	return e, &f
}

const mediaProtobuf = "application/vnd.kubernetes.protobuf"

// TestConvertedVersions: events.k8s.io/v1 Events (stored as core v1),
// autoscaling/v1 HorizontalPodAutoscalers (stored as autoscaling/v2, with
// metrics of every type, behavior and conditions carried in annotations)
// and certificates.k8s.io/v1 PodCertificateRequests (stored as v1beta1)
// are served over HTTP byte for byte as kube-apiserver v1.37.2 serves the
// same stored values (its own conversion code, codec/testdata/convert):
// GET and LIST, JSON and protobuf.
func TestConvertedVersions(t *testing.T) {
	e, f := startConverted(t)
	for _, c := range f.Cases {
		for _, accept := range []string{"application/json", mediaProtobuf} {
			code, _, body := e.raw(t, "GET", c.Path, accept)
			want := []byte(c.JSON)
			if accept == mediaProtobuf {
				want = c.Protobuf
			}
			if code != 200 || !bytes.Equal(body, want) {
				t.Errorf("GET %s (%s) = %d\n%q\nwant kube-apiserver's\n%q", c.Path, accept, code, body, want)
			}
		}
	}
	for _, l := range f.Lists {
		for _, accept := range []string{"application/json", mediaProtobuf} {
			for _, q := range []string{"", "?resourceVersion=0"} {
				code, _, body := e.raw(t, "GET", l.Path+q, accept)
				want := []byte(l.JSON)
				if accept == mediaProtobuf {
					want = l.Protobuf
				}
				if code != 200 || !bytes.Equal(body, want) {
					t.Errorf("LIST %s%s (%s) = %d\n%q\nwant kube-apiserver's\n%q", l.Path, q, accept, code, body, want)
				}
			}
		}
	}
}

// TestConvertedWatch: a watch of a converted version sends each object
// as kube-apiserver converts it: JSON frames byte for byte, protobuf
// decoded by client-go equal to kube-apiserver's.
func TestConvertedWatch(t *testing.T) {
	e, f := startConverted(t)
	want := map[string]map[string]bool{} // collection path -> frames
	for _, c := range f.Cases {
		coll := c.Path[:strings.LastIndexByte(c.Path, '/')]
		if want[coll] == nil {
			want[coll] = map[string]bool{}
		}
		want[coll][`{"type":"ADDED","object":`+strings.TrimSuffix(c.JSON, "\n")+"}\n"] = true
	}
	for coll, frames := range want {
		req, err := http.NewRequest("GET", e.url+coll+"?watch=true&resourceVersion=0", nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		for range len(frames) {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("watch %s: %v", coll, err)
			}
			if !frames[line] {
				t.Errorf("watch %s: frame %s is not kube-apiserver's", coll, line)
			}
		}
		resp.Body.Close()
		cancel()
	}

	// Protobuf, through client-go's typed clients.
	decode := func(b []byte) runtime.Object {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		obj.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		return obj
	}
	wantObj := map[string]runtime.Object{}
	for _, c := range f.Cases {
		wantObj[c.Served+"/"+c.Name] = decode(c.Protobuf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := metav1.ListOptions{ResourceVersion: "0"}
	ws := map[string]func() (watch.Interface, error){
		"events.k8s.io/v1": func() (watch.Interface, error) { return e.pcs.EventsV1().Events("default").Watch(ctx, opts) },
		"autoscaling/v1": func() (watch.Interface, error) {
			return e.pcs.AutoscalingV1().HorizontalPodAutoscalers("default").Watch(ctx, opts)
		},
		"certificates.k8s.io/v1": func() (watch.Interface, error) {
			return e.pcs.CertificatesV1().PodCertificateRequests("default").Watch(ctx, opts)
		},
	}
	for gv, open := range ws {
		w, err := open()
		if err != nil {
			t.Fatalf("watch %s: %v", gv, err)
		}
		n := 0
		for k := range wantObj {
			if strings.HasPrefix(k, gv+"/") {
				n++
			}
		}
		for range n {
			ev := <-w.ResultChan()
			acc, err := metaAccessor(ev.Object)
			if ev.Type != watch.Added || err != nil {
				t.Fatalf("watch %s: %v %v", gv, ev.Type, ev.Object)
			}
			ev.Object.GetObjectKind().SetGroupVersionKind(wantObj[gv+"/"+acc.GetName()].GetObjectKind().GroupVersionKind())
			if !equality.Semantic.DeepEqual(ev.Object, wantObj[gv+"/"+acc.GetName()]) {
				t.Errorf("watch %s: %s = %+v\nwant %+v", gv, acc.GetName(), ev.Object, wantObj[gv+"/"+acc.GetName()])
			}
		}
		w.Stop()
	}
}

func metaAccessor(obj runtime.Object) (metav1.Object, error) {
	acc, ok := obj.(metav1.Object)
	if !ok {
		return nil, &json.UnsupportedTypeError{}
	}
	return acc, nil
}

// TestConvertedTablesAndMetadata: kube-apiserver prints the internal
// object whatever the version asked for, so a converted version's Table
// has the stored version's columns and cells (events.k8s.io/v1 the core
// Event table, autoscaling/v1 the HPA table), and its row object
// (includeObject=Object) is the converted object; metadata
// (PartialObjectMetadata, the default row object) is the stored object's,
// without the annotations autoscaling/v1 adds.
func TestConvertedTablesAndMetadata(t *testing.T) {
	e, f := startConverted(t)
	type table struct {
		Columns json.RawMessage `json:"columnDefinitions"`
		Rows    []struct {
			Cells  json.RawMessage `json:"cells"`
			Object json.RawMessage `json:"object"`
		} `json:"rows"`
	}
	get := func(path string) table {
		code, _, body := e.raw(t, "GET", path, "application/json;as=Table;v=v1;g=meta.k8s.io")
		var tb table
		if err := json.Unmarshal(body, &tb); code != 200 || err != nil {
			t.Fatalf("GET %s as Table = %d %v %s", path, code, err, body)
		}
		return tb
	}
	for _, p := range [][2]string{
		{"/apis/events.k8s.io/v1/namespaces/default/events", "/api/v1/namespaces/default/events"},
		{"/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers", "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"},
	} {
		conv, stored := get(p[0]+"?includeObject=None"), get(p[1]+"?includeObject=None")
		if !bytes.Equal(conv.Columns, stored.Columns) || len(conv.Rows) != len(stored.Rows) {
			t.Fatalf("%s table columns %s (%d rows), %s has %s (%d rows)", p[0], conv.Columns, len(conv.Rows), p[1], stored.Columns, len(stored.Rows))
		}
		for i := range conv.Rows {
			if !bytes.Equal(conv.Rows[i].Cells, stored.Rows[i].Cells) {
				t.Errorf("%s row %d cells %s, %s's %s", p[0], i, conv.Rows[i].Cells, p[1], stored.Rows[i].Cells)
			}
		}
	}
	// kube-apiserver's printers on the same objects (the generator's
	// Tables: the kinds whose cells do not read the clock).
	for _, want := range f.Tables {
		code, _, body := e.raw(t, "GET", want.Path+"?includeObject=None", "application/json;as=Table;v=v1;g=meta.k8s.io")
		var got metav1.Table
		if err := json.Unmarshal(body, &got); code != 200 || err != nil {
			t.Fatalf("GET %s as Table = %d %v", want.Path, code, err)
		}
		var cells [][]any
		for _, r := range got.Rows {
			var c []any
			b, _ := json.Marshal(r.Cells)
			_ = json.Unmarshal(b, &c)
			cells = append(cells, c)
		}
		if !equality.Semantic.DeepEqual(got.ColumnDefinitions, want.Columns) || !equality.Semantic.DeepEqual(cells, want.Cells) {
			t.Errorf("%s Table = %+v %v\nwant kube-apiserver's %+v %v", want.Path, got.ColumnDefinitions, cells, want.Columns, want.Cells)
		}
	}
	byPath := map[string]string{}
	for _, c := range f.Cases {
		byPath[c.Path] = strings.TrimSuffix(c.JSON, "\n")
	}
	for _, c := range f.Cases {
		tb := get(c.Path + "?includeObject=Object")
		if len(tb.Rows) != 1 || string(tb.Rows[0].Object) != byPath[c.Path] {
			t.Errorf("%s Table row object = %s, want kube-apiserver's %s", c.Path, tb.Rows[0].Object, byPath[c.Path])
		}
	}
	code, _, body := e.raw(t, "GET", "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers/hpa-all",
		"application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io")
	var pom metav1.PartialObjectMetadata
	if err := json.Unmarshal(body, &pom); code != 200 || err != nil || len(pom.Annotations) != 1 || pom.Annotations["owner"] == "" {
		t.Errorf("autoscaling/v1 PartialObjectMetadata = %d %v %s, want the stored annotations only", code, err, body)
	}
}

// TestConvertedFieldsAndErrors: events.k8s.io/v1 takes its own field
// labels (regarding.name for involvedObject.name) and refuses the core
// ones; a missing object's NotFound names the core events registry as
// kube-apiserver's does.
func TestConvertedFieldsAndErrors(t *testing.T) {
	e, _ := startConverted(t)
	l, err := e.cs.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "regarding.name=web-0,reportingController=kubelet"})
	if err != nil || len(l.Items) != 2 {
		t.Fatalf("events.k8s.io/v1 LIST regarding.name=web-0,reportingController=kubelet = %v, %v; want ev-basic and ev-series", l, err)
	}
	code, _, body := e.raw(t, "GET", "/apis/events.k8s.io/v1/events?fieldSelector=involvedObject.name%3Dweb-0", "application/json")
	if code != 400 || !bytes.Contains(body, []byte(`field label not supported: involvedObject.name`)) {
		t.Errorf("events.k8s.io/v1 involvedObject.name selector = %d %s, want 400 field label not supported", code, body)
	}
	code, _, body = e.raw(t, "GET", "/apis/events.k8s.io/v1/namespaces/default/events/nope", "application/json")
	want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"events \"nope\" not found","reason":"NotFound","details":{"name":"nope","kind":"events"},"code":404}` + "\n"
	if code != 404 || string(body) != want {
		t.Errorf("GET missing events.k8s.io/v1 event = %d %s, want kube-apiserver's %s", code, body, want)
	}
	code, _, _ = e.raw(t, "GET", "/apis/certificates.k8s.io/v1beta1/namespaces/default/podcertificaterequests", "application/json")
	if code != 404 {
		t.Errorf("certificates.k8s.io/v1beta1 podcertificaterequests = %d, want 404 (kube-apiserver v1.37 serves v1 only)", code)
	}
}

// TestCustomResourceWebhookVersion: a CRD that converts with a webhook is
// served at its storage version; its other served version is answered
// 404 with a Status that says why (lazyapi does not call conversion
// webhooks), while a strategy None CRD's versions are all served
// (TestCustomResources).
func TestCustomResourceWebhookVersion(t *testing.T) {
	e := startEnv(t)
	crd := map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos.example.com", "uid": "u2"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
			"versions": []any{
				map[string]any{"name": "v1", "served": true, "storage": true},
				map[string]any{"name": "v2", "served": true, "storage": false},
			},
			"conversion": map[string]any{"strategy": "Webhook", "webhook": map[string]any{"conversionReviewVersions": []any{"v1"},
				"clientConfig": map[string]any{"url": "https://127.0.0.1:1/convert"}}},
		},
		"status": map[string]any{
			"conditions":    []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
		},
	}
	b, err := json.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	e.putRaw(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/gizmos.example.com", b)
	e.putRaw(t, "/registry/example.com/gizmos/ns/g1", []byte(`{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"g1","namespace":"ns"}}`))
	waitFor(t, "gizmos in the table", func() error {
		if _, ok := e.table.Lookup("example.com", "v2", "gizmos"); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	if code, _, body := e.raw(t, "GET", "/apis/example.com/v1/namespaces/ns/gizmos/g1", "application/json"); code != 200 {
		t.Errorf("GET storage version = %d %s", code, body)
	}
	code, _, body := e.raw(t, "GET", "/apis/example.com/v2/namespaces/ns/gizmos/g1", "application/json")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); code != 404 || err != nil || st.Reason != metav1.StatusReasonNotFound ||
		!strings.Contains(st.Message, "webhook") {
		t.Errorf("GET webhook-converted version = %d %s, want 404 NotFound naming the webhook", code, body)
	}
}
