package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// checkMeta compares what PeekMeta read with meta.Accessor of the object
// apimachinery decoded.
func checkMeta(t *testing.T, what string, m *Meta, obj runtime.Object) {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	eq := func(field string, got []byte, want string) {
		if string(got) != want {
			t.Errorf("%s: PeekMeta %s = %q, want %q", what, field, got, want)
		}
	}
	eq("name", m.Name, acc.GetName())
	eq("namespace", m.Namespace, acc.GetNamespace())
	eq("uid", m.UID, string(acc.GetUID()))
	eq("generateName", m.GenerateName, acc.GetGenerateName())
	if m.Generation != acc.GetGeneration() {
		t.Errorf("%s: PeekMeta generation = %d, want %d", what, m.Generation, acc.GetGeneration())
	}
	ct := acc.GetCreationTimestamp()
	if ct.IsZero() {
		if m.CreationTimestamp != nil || !m.Created.IsZero() {
			t.Errorf("%s: PeekMeta creationTimestamp = %q, want none", what, m.CreationTimestamp)
		}
	} else {
		eq("creationTimestamp", m.CreationTimestamp, ct.UTC().Format(time.RFC3339))
		if !m.Created.Equal(ct.Time) {
			t.Errorf("%s: PeekMeta Created = %v, want %v", what, m.Created, ct.Time)
		}
	}
	checkKV(t, what+" labels", m.Labels, acc.GetLabels())
	checkKV(t, what+" annotations", m.Annotations, acc.GetAnnotations())
	for k, v := range acc.GetLabels() {
		if got, ok := m.Label(k); !ok || string(got) != v {
			t.Errorf("%s: Label(%q) = %q, %v; want %q", what, k, got, ok, v)
		}
	}
	refs := acc.GetOwnerReferences()
	if len(refs) != len(m.OwnerReferences) {
		t.Fatalf("%s: %d ownerReferences, want %d", what, len(m.OwnerReferences), len(refs))
	}
	for i, r := range refs {
		g := m.OwnerReferences[i]
		if string(g.APIVersion) != r.APIVersion || string(g.Kind) != r.Kind || string(g.Name) != r.Name || string(g.UID) != string(r.UID) ||
			g.Controller != (r.Controller != nil && *r.Controller) || g.BlockOwnerDeletion != (r.BlockOwnerDeletion != nil && *r.BlockOwnerDeletion) {
			t.Errorf("%s: ownerReferences[%d] = %+v, want %+v", what, i, g, r)
		}
	}
}

func checkKV(t *testing.T, what string, got []KV, want map[string]string) {
	t.Helper()
	m := map[string]string{}
	for _, kv := range got {
		m[string(kv.Key)] = string(kv.Value)
	}
	if len(m) != len(want) {
		t.Errorf("%s: got %d entries %v, want %d %v", what, len(m), m, len(want), want)
		return
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s[%q] = %q, want %q", what, k, m[k], v)
		}
	}
}

// TestPeekMetaDifferential: PeekMeta on protobuf and on JSON storage of
// every kind with ObjectMeta against meta.Accessor.
func TestPeekMetaDifferential(t *testing.T) {
	s := DefaultSchema()
	n := objectsPerKind(t, 20)
	var m Meta
	total := 0
	for _, k := range kindsUnderTest(t, s) {
		rt := scheme.Scheme.AllKnownTypes()[k]
		f := newFiller(seedFor(k) + 3)
		for i := 0; i < n; i++ {
			obj := reflect.New(rt).Interface().(runtime.Object)
			f.Fill(obj)
			if _, err := meta.Accessor(obj); err != nil {
				break
			}
			stored, err := storagefmt.Protobuf(obj)
			if err != nil {
				t.Fatal(err)
			}
			decoded, _, err := oracleProto.Decode(stored, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			o, _ := Unwrap(stored)
			if err := s.PeekMeta(o, &m); err != nil {
				t.Fatalf("%v: PeekMeta: %v", k, err)
			}
			checkMeta(t, fmt.Sprintf("%v #%d protobuf", k, i), &m, decoded)

			js, err := storagefmt.JSON(decoded)
			if err != nil {
				continue
			}
			if err := s.PeekMeta(Object{Format: FormatJSON, Raw: js}, &m); err != nil {
				t.Fatalf("%v: PeekMeta(JSON): %v", k, err)
			}
			// JSON storage has replaced invalid UTF-8: compare with its own decode
			fromJSON, _, err := oracleJSON.Decode(js, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			checkMeta(t, fmt.Sprintf("%v #%d json", k, i), &m, fromJSON)
			total++
		}
	}
	if total == 0 {
		t.Fatal("nothing compared")
	}
}

// scalarPaths lists the dotted JSON paths of the single scalar fields of m,
// through single nested structs, up to depth levels.
func scalarPaths(m *message, prefix string, depth int, out *[]string) {
	for i := range m.fields {
		f := &m.fields[i]
		if f.v.kind == kTypeMeta {
			continue
		}
		if f.inline {
			scalarPaths(f.v.msg, prefix, depth, out)
			continue
		}
		if f.card != cSingle || f.num == 0 {
			continue
		}
		switch f.v.kind {
		case kString, kBool, kInt32, kInt64, kUint32, kUint64:
			*out = append(*out, prefix+f.name)
		case kMessage:
			if depth > 1 {
				scalarPaths(f.v.msg, prefix+f.name+".", depth-1, out)
			}
		}
	}
}

// jsonPathValue walks the oracle JSON and returns the value's string form
// (ok=false when absent or null).
func jsonPathValue(v any, path string) (string, bool) {
	for _, seg := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		if v, ok = m[seg]; !ok {
			return "", false
		}
	}
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		return x, true
	case bool:
		if x {
			return "true", true
		}
		return "false", true
	case json.Number:
		return x.String(), true
	}
	return fmt.Sprint(v), true
}

// TestPeekFieldDifferential reads every scalar path (3 levels deep) of
// every kind from protobuf and compares with the oracle JSON.
func TestPeekFieldDifferential(t *testing.T) {
	s := DefaultSchema()
	n := objectsPerKind(t, 20) / 4
	if n < 2 {
		n = 2
	}
	checked := 0
	for _, k := range kindsUnderTest(t, s) {
		av, kind := k.GroupVersion().String(), k.Kind
		var paths []string
		scalarPaths(s.kinds[gvk{av, kind}], "", 3, &paths)
		rt := scheme.Scheme.AllKnownTypes()[k]
		f := newFiller(seedFor(k) + 4)
		for i := 0; i < n; i++ {
			obj := reflect.New(rt).Interface().(runtime.Object)
			f.Fill(obj)
			stored, err := storagefmt.Protobuf(obj)
			if err != nil {
				t.Fatal(err)
			}
			o, err := Unwrap(stored)
			if err != nil {
				break // no TypeMeta (e.g. WatchEvent): cannot be stored
			}
			want, _ := oracleJSONOf(t, stored, schema.FromAPIVersionAndKind(o.APIVersion, o.Kind), 0)
			if want == nil {
				continue
			}
			d := json.NewDecoder(bytes.NewReader(want))
			d.UseNumber()
			var tree any
			if err := d.Decode(&tree); err != nil {
				t.Fatal(err)
			}
			js := Object{Format: FormatJSON, Raw: want}
			jsk := Object{Format: FormatJSON, Raw: want, APIVersion: o.APIVersion, Kind: o.Kind}
			for _, p := range paths {
				wv, wok := jsonPathValue(tree, p)
				got, ok, err := s.PeekField(o, p)
				if err != nil {
					t.Fatalf("%v: PeekField(%q): %v", k, p, err)
				}
				// PeekField gives the stored bytes (what a field selector
				// sees in the Go object); JSON replaced invalid UTF-8
				got = []byte(string([]rune(string(got))))
				switch {
				case wok && (!ok || string(got) != wv):
					t.Errorf("%v #%d: PeekField(%q) = %q, %v; want %q", k, i, p, got, ok, wv)
				case !wok && ok && string(got) != "" && string(got) != "0" && string(got) != "false":
					t.Errorf("%v #%d: PeekField(%q) = %q, want absent or zero", k, i, p, got)
				}
				jg, jok, err := s.PeekField(js, p)
				if err != nil {
					t.Fatalf("%v: PeekField(JSON, %q): %v", k, p, err)
				}
				if jok != wok || string(jg) != wv {
					t.Errorf("%v #%d: PeekField(JSON, %q) = %q, %v; want %q, %v", k, i, p, jg, jok, wv, wok)
				}
				kg, kok, err := s.PeekField(jsk, p)
				if err != nil {
					t.Fatalf("%v: PeekField(JSON with kind, %q): %v", k, p, err)
				}
				if kok != ok || string(kg) != string(got) && wok {
					// with the kind known, JSON reads like protobuf (zero
					// values for absent non-pointer scalars)
					t.Errorf("%v #%d: PeekField(JSON with kind, %q) = %q, %v; protobuf gave %q, %v", k, i, p, kg, kok, got, ok)
				}
				checked++
			}
		}
	}
	t.Logf("%d field reads compared", checked)
	if checked == 0 {
		t.Fatal("nothing compared")
	}
}

func TestPeekFieldErrors(t *testing.T) {
	s := DefaultSchema()
	o, _ := Unwrap(storedConfigMap(t))
	for _, p := range []string{"nope", "metadata.nope", "data", "metadata.labels", "metadata.name.x"} {
		if _, _, err := s.PeekField(o, p); err == nil {
			t.Errorf("PeekField(%q) succeeded, want an error", p)
		}
	}
	if v, ok, err := s.PeekField(o, "metadata.name"); err != nil || !ok || string(v) != "a" {
		t.Errorf("PeekField(metadata.name) = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := s.PeekField(o, "metadata.deletionGracePeriodSeconds"); err != nil || ok {
		t.Errorf("PeekField(nil pointer) = %v, %v; want absent", ok, err)
	}
	var m Meta
	if err := s.PeekMeta(o, &m); err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Label("k"); !ok || string(v) != "v" {
		t.Errorf("Label(k) = %q, %v", v, ok)
	}
	if _, ok := m.Label("missing"); ok {
		t.Errorf("Label(missing) found")
	}
	_ = metav1.Now
}
