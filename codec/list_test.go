package codec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Fixtures shared by the framing tests: objects stored the way
// kube-apiserver stores them (internal/storagefmt), unwrapped with Unwrap,
// and the expected objects (the originals with their resourceVersion set).

var (
	fxProto = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	fxJSON  = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, jsonserializer.SerializerOptions{})
)

// fxItem is one stored object: what Unwrap made of it, its mod revision, and
// the object a client must decode from lazyapi's output.
type fxItem struct {
	stored []byte
	obj    Object
	rv     int64
	want   runtime.Object // with resourceVersion set, TypeMeta empty
}

var fxCreated = metav1.NewTime(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))

func testConfigMaps(n int) []runtime.Object {
	out := make([]runtime.Object, n)
	for i := range out {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("cm-%03d", i), Namespace: "ns", UID: types.UID(fmt.Sprint("uid-", i)),
				CreationTimestamp: fxCreated,
				Labels:            map[string]string{"app": "web", "idx": fmt.Sprint(i % 3)},
			},
			Data: map[string]string{"key": strings.Repeat("v", i), "html": "<a href=\"x\">&amp;</a>", "nl": "line1\nline2\n"},
		}
		if i%2 == 1 {
			cm.BinaryData = map[string][]byte{"bin": {0, 1, 2, byte(i)}}
		}
		if i == 0 {
			cm.Data = nil // no data at all
		}
		out[i] = cm
	}
	return out
}

func testPods() []runtime.Object {
	return []runtime.Object{
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "ns", CreationTimestamp: fxCreated, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "nginx:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: "ns", CreationTimestamp: fxCreated},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "busybox"}, {Name: "b", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
			Status:     corev1.PodStatus{Phase: corev1.PodPending},
		},
	}
}

// fxStore stores objs as kube-apiserver does (protobuf), unwraps them and
// gives item i the revision firstRV+i.
func fxStore(t testing.TB, objs []runtime.Object, firstRV int64) []fxItem {
	t.Helper()
	out := make([]fxItem, len(objs))
	for i, o := range objs {
		stored, err := storagefmt.Protobuf(o)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := Unwrap(stored)
		if err != nil {
			t.Fatalf("Unwrap: %v", err)
		}
		rv := firstRV + int64(i)
		want := o.DeepCopyObject()
		acc, _ := meta.Accessor(want)
		acc.SetResourceVersion(fmt.Sprint(rv))
		want.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		out[i] = fxItem{stored: stored, obj: obj, rv: rv, want: want}
	}
	return out
}

// fxStoreCustom stores custom resources as JSON, as kube-apiserver does.
func fxStoreCustom(t testing.TB, n int, firstRV int64) []fxItem {
	t.Helper()
	out := make([]fxItem, n)
	for i := range out {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": fmt.Sprintf("w-%d", i), "namespace": "ns", "creationTimestamp": "2026-11-30T10:00:00Z"},
			"spec":     map[string]any{"size": int64(i), "tags": []any{"a", "<b>"}},
		}}
		stored, err := storagefmt.JSON(u)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := Unwrap(stored)
		if err != nil {
			t.Fatalf("Unwrap: %v", err)
		}
		want := u.DeepCopy()
		want.SetResourceVersion(fmt.Sprint(firstRV + int64(i)))
		out[i] = fxItem{stored: stored, obj: obj, rv: firstRV + int64(i), want: want}
	}
	return out
}

// fxSchema returns the default schema.
func fxSchema(t testing.TB) *Schema {
	t.Helper()
	s := DefaultSchema()
	if s == nil {
		t.Fatal("DefaultSchema() = nil")
	}
	return s
}

// writeJSONList writes a JSON list the way the proxy streams one: the
// items come in pages of pageSize, each page is written into a fresh buffer
// that is then "flushed" (appended to the response).
func writeJSONList(t testing.TB, s *Schema, apiVersion, listKind string, m ListMeta, items []fxItem, omitTypeMeta bool, pageSize int) []byte {
	t.Helper()
	var resp []byte
	buf := AppendJSONListHead(nil, apiVersion, listKind, m)
	for i, it := range items {
		if i > 0 {
			buf = AppendJSONListSep(buf)
		}
		var err error
		if buf, err = s.AppendJSON(buf, it.obj, it.rv, JSONOptions{OmitTypeMeta: omitTypeMeta}); err != nil {
			t.Fatalf("AppendJSON(item %d): %v", i, err)
		}
		if pageSize > 0 && (i+1)%pageSize == 0 {
			resp = append(resp, buf...)
			buf = buf[:0]
		}
	}
	buf = AppendJSONListTail(buf)
	return append(resp, buf...)
}

func fxPtr[T any](v T) *T { return &v }

func itemsOf(items []fxItem) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i, it := range items {
		out[i] = it.want
	}
	return out
}

// expectedList returns the list kube-apiserver would serve: list (an empty
// typed list) with TypeMeta, m and the items set.
func expectedList(t testing.TB, list runtime.Object, apiVersion, listKind string, m ListMeta, items []fxItem) runtime.Object {
	t.Helper()
	list = list.DeepCopyObject()
	if err := meta.SetList(list, itemsOf(items)); err != nil {
		t.Fatal(err)
	}
	list.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, listKind))
	acc, err := meta.ListAccessor(list)
	if err != nil {
		t.Fatal(err)
	}
	if m.ResourceVersion != 0 {
		acc.SetResourceVersion(fmt.Sprint(m.ResourceVersion))
	}
	acc.SetContinue(m.Continue)
	acc.SetRemainingItemCount(m.RemainingItemCount)
	return list
}

func encodeOracle(t testing.TB, enc runtime.Encoder, obj runtime.Object) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := enc.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

var listMetas = []struct {
	name string
	m    ListMeta
}{
	{"rv only", ListMeta{ResourceVersion: 500}},
	{"paged", ListMeta{ResourceVersion: 500, Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NTAwLCJzdGFydCI6Ii9jbS0wMDRcXHUwMDAwIn0", RemainingItemCount: fxPtr(int64(7))}},
	{"no rv", ListMeta{}},
	{"zero remaining", ListMeta{ResourceVersion: 1, RemainingItemCount: fxPtr(int64(0))}},
}

// TestJSONListBuiltin writes lists of ConfigMaps and Pods and checks them
// byte for byte against apimachinery's JSON of the same list, decodes them
// with client-go's scheme, and checks that writing page by page gives the
// same bytes.
func TestJSONListBuiltin(t *testing.T) {
	s := fxSchema(t)
	cases := []struct {
		name  string
		list  runtime.Object
		kind  string
		items []fxItem
	}{
		{"configmaps", &corev1.ConfigMapList{}, "ConfigMapList", fxStore(t, testConfigMaps(10), 100)},
		{"pods", &corev1.PodList{}, "PodList", fxStore(t, testPods(), 200)},
		{"empty", &corev1.ConfigMapList{}, "ConfigMapList", nil},
	}
	for _, tc := range cases {
		for _, lm := range listMetas {
			t.Run(tc.name+"/"+lm.name, func(t *testing.T) {
				got := writeJSONList(t, s, "v1", tc.kind, lm.m, tc.items, true, 0)
				want := expectedList(t, tc.list, "v1", tc.kind, lm.m, tc.items)
				if oracle := encodeOracle(t, fxJSON, want); !bytes.Equal(got, oracle) {
					t.Fatalf("JSON list differs from apimachinery's:\ngot  %s\nwant %s", got, oracle)
				}
				if len(tc.items) == 0 && !bytes.Contains(got, []byte(`"items":[]`)) {
					t.Fatalf("empty list = %s, want \"items\":[]", got)
				}
				dec, _, err := fxJSON.Decode(got, nil, nil)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				if diff := cmp.Diff(want, dec); diff != "" {
					t.Fatalf("decoded list differs (-want +got):\n%s", diff)
				}
				for _, ps := range []int{1, 3, 7} {
					if paged := writeJSONList(t, s, "v1", tc.kind, lm.m, tc.items, true, ps); !bytes.Equal(paged, got) {
						t.Fatalf("page size %d: list differs from the one-go list:\n%s\n%s", ps, paged, got)
					}
				}
			})
		}
	}
}

// TestJSONListCustomResources writes a list of JSON-stored custom resources
// (items keep kind and apiVersion) and decodes it as client-go's dynamic
// client does.
func TestJSONListCustomResources(t *testing.T) {
	s := fxSchema(t)
	items := fxStoreCustom(t, 5, 300)
	m := ListMeta{ResourceVersion: 900, Continue: "c", RemainingItemCount: fxPtr(int64(2))}
	got := writeJSONList(t, s, "example.com/v1", "WidgetList", m, items, false, 0)
	obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, got)
	if err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	list, ok := obj.(*unstructured.UnstructuredList)
	if !ok {
		t.Fatalf("decoded %T, want *unstructured.UnstructuredList", obj)
	}
	if list.GetResourceVersion() != "900" || list.GetContinue() != "c" || *list.GetRemainingItemCount() != 2 || list.GetKind() != "WidgetList" {
		t.Fatalf("list metadata = %v", list.Object)
	}
	if len(list.Items) != len(items) {
		t.Fatalf("got %d items, want %d", len(list.Items), len(items))
	}
	for i := range items {
		if diff := cmp.Diff(items[i].want.(*unstructured.Unstructured).Object, list.Items[i].Object); diff != "" {
			t.Fatalf("item %d differs (-want +got):\n%s", i, diff)
		}
	}
	if paged := writeJSONList(t, s, "example.com/v1", "WidgetList", m, items, false, 2); !bytes.Equal(paged, got) {
		t.Fatalf("paged custom resource list differs")
	}
}

// writeProtobufList writes a protobuf list as the proxy does: sizes first,
// then head, items, tail.
func writeProtobufList(apiVersion, listKind string, m ListMeta, items []fxItem, useRV bool) []byte {
	rv := func(it fxItem) int64 {
		if useRV {
			return it.rv
		}
		return 0
	}
	size := 0
	for _, it := range items {
		size += ProtobufListItemSize(it.obj, rv(it))
	}
	b := AppendProtobufListHead(nil, apiVersion, listKind, m, size)
	for _, it := range items {
		b = AppendProtobufListItem(b, it.obj, rv(it))
	}
	return AppendProtobufListTail(b)
}

// TestProtobufListBuiltin decodes protobuf lists of ConfigMaps and Pods with
// client-go's scheme, and checks them byte for byte against apimachinery's
// protobuf list where the items are unchanged (resourceVersion 0).
func TestProtobufListBuiltin(t *testing.T) {
	cases := []struct {
		name  string
		list  runtime.Object
		kind  string
		items []fxItem
	}{
		{"configmaps", &corev1.ConfigMapList{}, "ConfigMapList", fxStore(t, testConfigMaps(10), 100)},
		{"pods", &corev1.PodList{}, "PodList", fxStore(t, testPods(), 200000000)},
		{"empty", &corev1.ConfigMapList{}, "ConfigMapList", nil},
	}
	for _, tc := range cases {
		for _, lm := range listMetas {
			t.Run(tc.name+"/"+lm.name, func(t *testing.T) {
				got := writeProtobufList("v1", tc.kind, lm.m, tc.items, true)
				want := expectedList(t, tc.list, "v1", tc.kind, lm.m, tc.items)
				dec, _, err := fxProto.Decode(got, nil, nil)
				if err != nil {
					t.Fatalf("decode: %v", err)
				}
				// protobuf has no empty-vs-absent distinction for items
				if diff := cmp.Diff(want, dec, cmpopts.EquateEmpty()); diff != "" {
					t.Fatalf("decoded list differs (-want +got):\n%s", diff)
				}

				// With the items as stored, the bytes are apimachinery's.
				unchanged := make([]fxItem, len(tc.items))
				for i, it := range tc.items {
					w := it.want.DeepCopyObject()
					acc, _ := meta.Accessor(w)
					acc.SetResourceVersion("")
					unchanged[i] = fxItem{obj: it.obj, want: w}
				}
				got = writeProtobufList("v1", tc.kind, lm.m, unchanged, false)
				if oracle := encodeOracle(t, fxProto, expectedList(t, tc.list, "v1", tc.kind, lm.m, unchanged)); !bytes.Equal(got, oracle) {
					t.Fatalf("protobuf list differs from apimachinery's:\ngot  %q\nwant %q", got, oracle)
				}
			})
		}
	}
}

// fuzzSeeds are stored objects of the kinds the framing writers treat
// specially.
func fuzzSeeds(t testing.TB) [][]byte {
	three := int32(3)
	objs := append(testConfigMaps(2), testPods()...)
	objs = append(objs, tableCasesObjects()...)
	objs = append(objs, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: appsv1.DeploymentSpec{Replicas: &three}})
	var out [][]byte
	for _, o := range objs {
		b, err := storagefmt.Protobuf(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	for _, it := range fxStoreCustom(t, 1, 1) {
		out = append(out, it.stored)
	}
	return out
}

func tableCasesObjects() []runtime.Object {
	var out []runtime.Object
	for _, tc := range tableCases() {
		out = append(out, tc.objs...)
	}
	return out
}

// FuzzFraming feeds arbitrary stored bytes through Unwrap and every framing
// writer: each returns an error or output, never panics, and what it writes
// is consistent (protobuf sizes announced before writing match what is
// written; JSON output is valid JSON).
func FuzzFraming(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b, int64(12345))
	}
	s := fxSchema(f)
	cc, err := NewCustomColumns([]PrinterColumn{{Name: "S", Type: "string", JSONPath: ".spec"}, {Name: "I", Type: "integer", JSONPath: ".spec.size"},
		{Name: "D", Type: "date", JSONPath: ".metadata.creationTimestamp"}, {Name: "B", Type: "boolean", JSONPath: ".status.ready"}, {Name: "N", Type: "number", JSONPath: ".spec.ratio"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, stored []byte, rv int64) {
		if rv < 0 {
			rv = -rv
		}
		if rv < 0 {
			rv = 0
		}
		obj, err := Unwrap(stored)
		if err != nil {
			return
		}
		validJSON := func(what string, b []byte, err error) {
			if err == nil && !json.Valid(b) {
				t.Fatalf("%s wrote invalid JSON: %q", what, b)
			}
		}
		for _, omit := range []bool{false, true} {
			b, err := s.AppendJSON(AppendJSONListHead(nil, "v1", "ConfigMapList", ListMeta{ResourceVersion: rv}), obj, rv, JSONOptions{OmitTypeMeta: omit})
			validJSON("JSON list", AppendJSONListTail(b), err)
			_, _ = s.AppendYAMLListItem(nil, obj, rv, omit)
		}
		b, err := s.AppendJSONWatchEvent(nil, EventModified, obj, rv)
		if err == nil {
			validJSON("JSON watch event", bytes.TrimSuffix(b, []byte("\n")), nil)
		}
		_, _ = s.AppendYAML(nil, obj, rv)

		if obj.Format == FormatProtobuf {
			n := ProtobufListItemSize(obj, rv)
			if b := AppendProtobufListItem(nil, obj, rv); len(b) != n {
				t.Fatalf("ProtobufListItemSize = %d, AppendProtobufListItem wrote %d", n, len(b))
			}
			b := AppendProtobufWatchEvent([]byte{1}, EventAdded, obj, rv)[1:]
			if got := int(binary.BigEndian.Uint32(b)); got != len(b)-4 {
				t.Fatalf("protobuf watch frame announces %d bytes, has %d", got, len(b)-4)
			}
		}
		b, err = s.AppendPartialJSON(nil, obj, rv)
		validJSON("PartialObjectMetadata", b, err)
		if b, err := s.AppendPartialJSONWatchEvent(nil, EventAdded, obj, rv); err == nil {
			validJSON("PartialObjectMetadata watch event", bytes.TrimSuffix(b, []byte("\n")), nil)
		}
		if b, err := AppendPartialProtobufWatchEvent([]byte{1}, EventAdded, obj, rv); err == nil {
			if got := int(binary.BigEndian.Uint32(b[1:])); got != len(b)-5 {
				t.Fatalf("partial protobuf watch frame announces %d bytes, has %d", got, len(b)-5)
			}
		}
		if _, err := AppendPartialProtobuf(nil, obj, rv); err == nil {
			n, err := PartialProtobufListItemSize(obj, rv)
			if err != nil {
				t.Fatalf("PartialProtobufListItemSize: %v after AppendPartialProtobuf succeeded", err)
			}
			if b, err := AppendPartialProtobufListItem(nil, obj, rv); err != nil || len(b) != n {
				t.Fatalf("PartialProtobufListItemSize = %d, item = %d bytes, %v", n, len(b), err)
			}
		}
		for _, gr := range [][2]string{{"", "configmaps"}, {"", "secrets"}, {"", "pods"}, {"", "nodes"}, {"", "services"}, {"", "namespaces"}, {"apps", "deployments"}, {"batch", "jobs"}, {"example.com", "widgets"},
			{"", "events"}, {"", "persistentvolumes"}, {"", "persistentvolumeclaims"}, {"batch", "cronjobs"}, {"apps", "daemonsets"},
			{"networking.k8s.io", "ingresses"}, {"policy", "poddisruptionbudgets"}, {"rbac.authorization.k8s.io", "rolebindings"}} {
			for _, inc := range []IncludeObjectPolicy{IncludeMetadata, IncludeNone, IncludeObject} {
				row, err := s.AppendTableRow(nil, gr[0], gr[1], obj, rv, inc, tableNow)
				validJSON("table row", row, err)
			}
		}
		row, err := s.AppendCustomTableRow(nil, cc, obj, rv, IncludeObject, tableNow)
		validJSON("custom table row", row, err)
		ev, err := s.AppendTableWatchEvent(nil, EventAdded, "", "pods", nil, obj, rv, IncludeMetadata, tableNow, true)
		if err == nil {
			validJSON("table watch event", bytes.TrimSuffix(ev, []byte("\n")), nil)
		}
	})
}
