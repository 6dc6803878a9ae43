package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

type gogoUnmarshaler interface{ Unmarshal([]byte) error }

// TestProtobufPassthroughDifferential checks that AppendProtobuf,
// AppendProtobufEnvelope and AppendProtobufMetadata decode with
// apimachinery to the stored object with the resourceVersion set.
func TestProtobufPassthroughDifferential(t *testing.T) {
	s := DefaultSchema()
	n := objectsPerKind(t, 20)
	total := 0
	for _, k := range kindsUnderTest(t, s) {
		rt := scheme.Scheme.AllKnownTypes()[k]
		f := newFiller(seedFor(k) + 1)
		for i := 0; i < n; i++ {
			obj := reflect.New(rt).Interface().(runtime.Object)
			f.Fill(obj)
			if _, err := meta.Accessor(obj); err != nil {
				break // lists, options: no ObjectMeta
			}
			stored, err := storagefmt.Protobuf(obj)
			if err != nil {
				t.Fatal(err)
			}
			o, err := Unwrap(stored)
			if err != nil {
				t.Fatal(err)
			}
			rv := int64(i)*1000003 + 1
			if i == 0 {
				rv = 0
			}
			want, _, err := oracleProto.Decode(stored, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rv != 0 {
				meta.NewAccessor().SetResourceVersion(want, strconv.FormatInt(rv, 10))
			}

			env := AppendProtobufEnvelope([]byte("xx"), o, rv)[2:]
			if len(env) != ProtobufEnvelopeSize(o, rv) {
				t.Fatalf("%v: ProtobufEnvelopeSize = %d, len = %d", k, ProtobufEnvelopeSize(o, rv), len(env))
			}
			got, _, err := oracleProto.Decode(env, nil, nil)
			if err != nil {
				t.Fatalf("%v: decode AppendProtobufEnvelope: %v", k, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%v #%d: envelope decodes to\n%+v\nwant\n%+v", k, i, got, want)
			}

			raw := AppendProtobuf([]byte("yy"), o, rv)[2:]
			if len(raw) != ProtobufSize(o, rv) {
				t.Fatalf("%v: ProtobufSize = %d, len = %d", k, ProtobufSize(o, rv), len(raw))
			}
			plain := reflect.New(rt).Interface().(runtime.Object)
			if err := plain.(gogoUnmarshaler).Unmarshal(raw); err != nil {
				t.Fatalf("%v: Unmarshal(AppendProtobuf): %v", k, err)
			}
			plain.GetObjectKind().SetGroupVersionKind(want.GetObjectKind().GroupVersionKind())
			if !reflect.DeepEqual(plain, want) {
				t.Errorf("%v #%d: AppendProtobuf decodes to\n%+v\nwant\n%+v", k, i, plain, want)
			}

			mb, err := AppendProtobufMetadata(nil, o, rv)
			if err != nil {
				t.Fatal(err)
			}
			var om metav1.ObjectMeta
			if err := om.Unmarshal(mb); err != nil {
				t.Fatalf("%v: ObjectMeta.Unmarshal(AppendProtobufMetadata): %v", k, err)
			}
			wantMeta := reflect.ValueOf(want).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
			if !reflect.DeepEqual(om, wantMeta) {
				t.Errorf("%v #%d: AppendProtobufMetadata decodes to\n%+v\nwant\n%+v", k, i, om, wantMeta)
			}

			// AppendJSONMetadata is the oracle's "metadata", byte for byte
			wantJSON, _ := oracleJSONOf(t, stored, schema.FromAPIVersionAndKind(o.APIVersion, o.Kind), rv)
			if wantJSON != nil {
				var top map[string]json.RawMessage
				if err := json.Unmarshal(wantJSON, &top); err != nil {
					t.Fatal(err)
				}
				mj, err := s.AppendJSONMetadata(nil, o, rv)
				if err != nil {
					t.Fatalf("%v: AppendJSONMetadata: %v", k, err)
				}
				if !bytes.Equal(mj, top["metadata"]) {
					t.Errorf("%v #%d: AppendJSONMetadata = %s\nwant %s", k, i, mj, top["metadata"])
				}
			}
			total++
		}
	}
	if total == 0 {
		t.Fatal("nothing compared")
	}
	t.Logf("%d objects", total)
}

// TestJSONStoredBuiltins covers --storage-media-type=application/json:
// built-in objects stored as JSON go through the passthrough and must equal
// apimachinery's decode + set RV + encode.
func TestJSONStoredBuiltins(t *testing.T) {
	s := DefaultSchema()
	n := objectsPerKind(t, 5)
	total, same := 0, 0
	for _, k := range kindsUnderTest(t, s) {
		rt := scheme.Scheme.AllKnownTypes()[k]
		f := newFiller(seedFor(k) + 2)
		for i := 0; i < n; i++ {
			obj := reflect.New(rt).Interface().(runtime.Object)
			f.Fill(obj)
			if _, err := meta.Accessor(obj); err != nil {
				break
			}
			stored, err := storagefmt.JSON(obj)
			if err != nil {
				continue // e.g. invalid RawExtension: apimachinery cannot store it either
			}
			o, err := Unwrap(stored)
			if err != nil || o.Format != FormatJSON {
				t.Fatalf("%v: Unwrap(JSON) = %+v, %v", k, o, err)
			}
			rv := int64(i + 42)
			want := oracleFromJSON(t, stored, rv)
			got, err := s.AppendJSON(nil, o, rv, JSONOptions{})
			if err != nil {
				t.Fatalf("%v: AppendJSON(FormatJSON): %v", k, err)
			}
			// as a list item: no kind/apiVersion, like kube-apiserver's typed list
			item, err := s.AppendJSON(nil, o, rv, JSONOptions{OmitTypeMeta: true})
			if err != nil {
				t.Fatalf("%v: AppendJSON(FormatJSON, OmitTypeMeta): %v", k, err)
			}
			if d := jsonDiff(item, oracleListItem(t, stored, rv)); d != "" {
				t.Errorf("%v #%d: OmitTypeMeta: %s\n got %s", k, i, d, item)
			}
			total++
			if bytes.Equal(got, want) {
				same++
				continue
			}
			if d := jsonDiff(got, want); d != "" {
				t.Errorf("%v #%d: %s\n got %s\nwant %s", k, i, d, got, want)
			} else if os.Getenv("LAZYAPI_SHOW_BYTEDIFF") != "" {
				t.Logf("%v #%d: bytes differ\n got %s\nwant %s", k, i, got, want)
			}
		}
	}
	t.Logf("%d objects, %d byte-identical", total, same)
	if total == 0 {
		t.Fatal("nothing compared")
	}
}

func oracleFromJSON(t testing.TB, stored []byte, rv int64) []byte {
	t.Helper()
	obj, _, err := oracleJSON.Decode(stored, nil, nil)
	if err != nil {
		t.Fatalf("oracle JSON decode: %v", err)
	}
	if rv != 0 {
		meta.NewAccessor().SetResourceVersion(obj, strconv.FormatInt(rv, 10))
	}
	var buf bytes.Buffer
	if err := oracleJSON.Encode(obj, &buf); err != nil {
		t.Fatalf("oracle JSON encode: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// oracleListItem is oracleFromJSON with the TypeMeta cleared, as items of
// a built-in list are written.
func oracleListItem(t testing.TB, stored []byte, rv int64) []byte {
	t.Helper()
	obj, _, err := oracleJSON.Decode(stored, nil, nil)
	if err != nil {
		t.Fatalf("oracle JSON decode: %v", err)
	}
	meta.NewAccessor().SetResourceVersion(obj, strconv.FormatInt(rv, 10))
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatalf("oracle JSON encode: %v", err)
	}
	return b
}

// randJSONValue returns a random value of the kinds unstructured holds.
func randJSONValue(r *rand.Rand, depth int) any {
	k := r.Intn(9)
	if depth > 3 && k >= 6 {
		k = r.Intn(6)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.Intn(2) == 0
	case 2:
		return r.Int63() - r.Int63()
	case 3:
		return r.NormFloat64() * 1e6
	case 4, 5:
		return randString(r)
	case 6:
		var a []any
		for i := r.Intn(4); i > 0; i-- {
			a = append(a, randJSONValue(r, depth+1))
		}
		return a
	default:
		m := map[string]any{}
		for i := r.Intn(5); i > 0; i-- {
			m[randString(r)] = randJSONValue(r, depth+1)
		}
		return m
	}
}

func randString(r *rand.Rand) string {
	parts := []string{"a", "metadata", "resourceVersion", "\"", "\\", "{", "}", "[", "]", ",", ":", "<&>", "\u2028", "é", "\x01", "zz", "uid", "name"}
	s := ""
	for i := r.Intn(4); i >= 0; i-- {
		s += parts[r.Intn(len(parts))]
	}
	return s
}

func randCustomResource(r *rand.Rand) *unstructured.Unstructured {
	obj := map[string]any{"apiVersion": "example.com/v1", "kind": "Widget"}
	if r.Intn(8) != 0 {
		md := map[string]any{}
		for _, k := range []string{"name", "namespace", "uid", "generateName", "selfLink"} {
			if r.Intn(2) == 0 {
				md[k] = randString(r)
			}
		}
		for _, k := range []string{"labels", "annotations"} {
			if r.Intn(2) == 0 {
				m := map[string]any{}
				for i := r.Intn(4); i > 0; i-- {
					m[randString(r)] = randString(r)
				}
				md[k] = m
			}
		}
		if r.Intn(2) == 0 {
			md["zzz"] = randJSONValue(r, 2)
		}
		if r.Intn(2) == 0 {
			md["name"] = randString(r)
			md["creationTimestamp"] = "2024-05-06T07:08:09Z"
			md["generation"] = int64(r.Intn(100))
		}
		if r.Intn(6) == 0 {
			md["resourceVersion"] = "999"
		}
		obj["metadata"] = md
	}
	for i := r.Intn(4); i > 0; i-- {
		if k := randString(r); k != "metadata" && k != "apiVersion" && k != "kind" {
			obj[k] = randJSONValue(r, 1)
		}
	}
	obj["spec"] = randJSONValue(r, 0)
	return &unstructured.Unstructured{Object: obj}
}

// TestJSONPassthroughCustomResources compares the passthrough with
// apimachinery's unstructured decode + set RV + encode, byte for byte.
func TestJSONPassthroughCustomResources(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	n := 20 * objectsPerKind(t, 20)
	for i := 0; i < n; i++ {
		u := randCustomResource(r)
		stored, err := storagefmt.JSON(u)
		if err != nil {
			t.Fatal(err)
		}
		if r.Intn(3) == 0 {
			// not everything stored is compact: add insignificant space
			stored = append(append([]byte(" \n"), bytes.ReplaceAll(stored, []byte(`":`), []byte(`" : `))...), '\n')
		}
		rv := int64(r.Intn(1 << 30))
		if i%10 == 0 {
			rv = 0
		}
		var back unstructured.Unstructured
		if err := runtime.DecodeInto(unstructured.UnstructuredJSONScheme, stored, &back); err != nil {
			t.Fatalf("oracle decode %s: %v", stored, err)
		}
		if rv != 0 {
			back.SetResourceVersion(strconv.FormatInt(rv, 10))
		}
		want, err := runtime.Encode(unstructured.UnstructuredJSONScheme, &back)
		if err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(want, []byte("\n"))
		got, err := AppendJSONPassthrough([]byte("p"), stored, rv)
		if err != nil {
			t.Fatalf("AppendJSONPassthrough(%s): %v", stored, err)
		}
		got = got[1:]
		if d := jsonDiff(got, want); d != "" {
			t.Fatalf("AppendJSONPassthrough(%s, %d): %s\n got %s\nwant %s", stored, rv, d, got, want)
		}
		if stored[0] == '{' && !bytes.Equal(got, want) {
			t.Errorf("AppendJSONPassthrough(%s, %d) not byte-identical:\n got %s\nwant %s", stored, rv, got, want)
		}
		// PeekMeta on JSON agrees with the accessor
		var m Meta
		if err := DefaultSchema().PeekMeta(Object{Format: FormatJSON, Raw: stored}, &m); err != nil {
			t.Fatalf("PeekMeta(%s): %v", stored, err)
		}
		checkMeta(t, fmt.Sprintf("custom resource %s", stored), &m, &back)
	}
}

func TestJSONPassthroughErrors(t *testing.T) {
	for _, s := range []string{"", "[]", `{"metadata":`, `{"metadata":{"a":}`, `{"metadata":"x"}`, `{"a":"b`, `{"a" 1}`, `{"metadata":{"resourceVersion":"1"`} {
		got, err := AppendJSONPassthrough([]byte("keep"), []byte(s), 5)
		if err == nil {
			t.Errorf("AppendJSONPassthrough(%q) = %q, want an error", s, got)
		}
		if string(got) != "keep" {
			t.Errorf("AppendJSONPassthrough(%q) changed dst on error: %q", s, got)
		}
	}
	strip := []struct{ in, want string }{
		{`{"kind":"Pod","apiVersion":"v1","metadata":{},"spec":{"kind":1}}`, `{"metadata":{},"spec":{"kind":1}}`},
		{`{"apiVersion":"v1","kind":"Pod","metadata":{}}`, `{"metadata":{}}`},
		{`{ "kind" : "Pod" , "x":1, "apiVersion":"v1" }`, `{ "x":1 }`},
		{`{"kind":"Pod"}`, `{}`},
		{`{"a":{"kind":1},"kind":"X","metadata":{},"apiVersion":"v1"}`, `{"a":{"kind":1},"metadata":{},"apiVersion":"v1"}`},
		{`{}`, `{}`},
	}
	for _, c := range strip {
		if got := stripTypeMeta([]byte(c.in)); string(got) != c.want {
			t.Errorf("stripTypeMeta(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	cases := []struct{ in, want string }{
		{`{}`, `{"metadata":{"resourceVersion":"5"}}`},
		{`{"apiVersion":"v1","kind":"X"}`, `{"apiVersion":"v1","kind":"X","metadata":{"resourceVersion":"5"}}`},
		{`{"apiVersion":"v1","spec":1}`, `{"apiVersion":"v1","metadata":{"resourceVersion":"5"},"spec":1}`},
		{`{"metadata":{}}`, `{"metadata":{"resourceVersion":"5"}}`},
		{`{"metadata":{"name":"a","uid":"u"}}`, `{"metadata":{"name":"a","resourceVersion":"5","uid":"u"}}`},
		{`{"metadata":{"uid":"u","name":"a","generation":2}}`, `{"metadata":{"uid":"u","name":"a","resourceVersion":"5","generation":2}}`},
		{`{"metadata":{"resourceVersion":"77","name":"a"}}`, `{"metadata":{"resourceVersion":"5","name":"a"}}`},
		{`{"metadata":{"resource\u0056ersion":"77"}}`, `{"metadata":{"resource\u0056ersion":"5"}}`},
	}
	for _, c := range cases {
		got, err := AppendJSONPassthrough(nil, []byte(c.in), 5)
		if err != nil || string(got) != c.want {
			t.Errorf("AppendJSONPassthrough(%q) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
}

func TestAppendJSONAPIVersion(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"apiVersion":"example.com/v1","kind":"W","metadata":{}}`, `{"apiVersion":"example.com/v2","kind":"W","metadata":{}}`},
		{`{"kind":"W","apiVersion":"example.com/v1"}`, `{"kind":"W","apiVersion":"example.com/v2"}`},
		{`{"kind":"W","metadata":{}}`, `{"apiVersion":"example.com/v2","kind":"W","metadata":{}}`},
		{`{"a":1}`, `{"a":1,"apiVersion":"example.com/v2"}`},
		{`{}`, `{"apiVersion":"example.com/v2"}`},
	} {
		got, err := AppendJSONAPIVersion([]byte("x"), []byte(tt.in), "example.com/v2")
		if err != nil || string(got) != "x"+tt.want {
			t.Errorf("AppendJSONAPIVersion(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := AppendJSONAPIVersion(nil, []byte(`{"apiVersion":`), "v"); err == nil {
		t.Error("truncated JSON: no error")
	}
	if !HasJSONAPIVersion([]byte(`{"apiVersion":"example.com/v2","kind":"W"}`), "example.com/v2") ||
		HasJSONAPIVersion([]byte(`{"apiVersion":"example.com/v2beta1","kind":"W"}`), "example.com/v2") ||
		HasJSONAPIVersion([]byte(`{"kind":"W","apiVersion":"example.com/v2"}`), "example.com/v2") {
		t.Error("HasJSONAPIVersion")
	}
}

// TestUnwrapJSONTrailingNewline: a JSON value ends with the newline
// kube-apiserver's encoders write (json.Encoder); the object's bytes end
// at its closing brace, so that a list or a watch frame carries no
// newline inside.
func TestUnwrapJSONTrailingNewline(t *testing.T) {
	obj, err := Unwrap([]byte("{\"apiVersion\":\"example.com/v1\",\"kind\":\"W\"}\n"))
	if err != nil || string(obj.Raw) != `{"apiVersion":"example.com/v1","kind":"W"}` {
		t.Errorf("Unwrap = %q, %v", obj.Raw, err)
	}
}
