package codec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCRDv1Oracle: a CustomResourceDefinition stored as kube-apiserver
// stores it (apiextensions.k8s.io/v1beta1 JSON) is unwrapped into exactly
// the v1 JSON kube-apiserver serves for it. The fixtures in testdata/crdv1
// were written by k8s.io/apiextensions-apiserver v0.37.2 itself
// (testdata/crdv1/gen: its storage codec for the stored side, its v1beta1
// defaulting and v1 conversion for the served side), from CRDs created
// through v1 (single, multi, url) and from values older kube-apiservers
// left (legacy-*).
func TestCRDv1Oracle(t *testing.T) {
	stored, err := filepath.Glob("testdata/crdv1/*.stored.json")
	if err != nil || len(stored) < 6 {
		t.Fatalf("fixtures: %v, %d files", err, len(stored))
	}
	for _, path := range stored {
		name := strings.TrimSuffix(filepath.Base(path), ".stored.json")
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(path, ".stored.json") + ".v1.json")
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(in, []byte(`"apiVersion":"apiextensions.k8s.io/v1beta1"`)) {
				t.Fatalf("fixture is not a v1beta1 CRD: %.100s", in)
			}
			obj, err := Unwrap(in)
			if err != nil {
				t.Fatalf("Unwrap = %v", err)
			}
			if obj.Format != FormatJSON || obj.APIVersion != "apiextensions.k8s.io/v1" || obj.Kind != "CustomResourceDefinition" {
				t.Errorf("Unwrap = %v %q %q, want json apiextensions.k8s.io/v1 CustomResourceDefinition", obj.Format, obj.APIVersion, obj.Kind)
			}
			if !bytes.Equal(obj.Raw, want) {
				t.Errorf("Unwrap(%s) differs from kube-apiserver's v1:\n got %s\nwant %s\nfirst difference at byte %d",
					name, obj.Raw, want, firstByteDiff(obj.Raw, want))
			}
			// Served with a resourceVersion: the same as patching the
			// oracle's bytes.
			got, err := DefaultSchema().AppendJSON(nil, obj, 4242, JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wantRV, err := AppendJSONPassthrough(nil, want, 4242)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, wantRV) || !bytes.Contains(got, []byte(`"resourceVersion":"4242"`)) {
				t.Errorf("AppendJSON(rv 4242) =\n%s\nwant\n%s", got, wantRV)
			}
			// v1 JSON (what a CRD stored by a future kube-apiserver, or
			// this conversion's output, looks like) is served as stored.
			again, err := Unwrap(obj.Raw)
			if err != nil || !bytes.Equal(again.Raw, obj.Raw) || &again.Raw[0] != &obj.Raw[0] {
				t.Errorf("Unwrap of the v1 JSON = %v, changed or copied; want it served as stored", err)
			}
		})
	}
}

func firstByteDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestUnwrapCRDOnlyV1beta1CRDs(t *testing.T) {
	tests := []struct {
		name, in string
		convert  bool
	}{
		{"custom resource", `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"x":"apiextensions.k8s.io/v1beta1"}}`, false},
		{"v1 CRD", `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"a.b"},"spec":{}}`, false},
		{"other v1beta1 kind", `{"kind":"ConversionReview","apiVersion":"apiextensions.k8s.io/v1beta1"}`, false},
		{"marker in a value", `{"kind":"ConfigMap","apiVersion":"v1","data":{"k":"apiextensions.k8s.io/v1beta1"}}`, false},
		{"v1beta1 CRD, struct order", `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","metadata":{"name":"a.b"},"spec":{"group":"b","version":"v1","names":{"plural":"a","kind":"A"}}}`, true},
		{"v1beta1 CRD, sorted keys", ` {"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"CustomResourceDefinition","spec":{"group":"b"}}`, true},
		// Not how any kube-apiserver encoder writes it: served as stored.
		{"v1beta1 CRD, spaces", `{"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition", "spec": {"group": "b"}}`, false},
		{"v1beta1 CRD, metadata first", `{"metadata":{"name":"a.b"},"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1"}`, false},
	}
	for _, tt := range tests {
		obj, err := Unwrap([]byte(tt.in))
		if err != nil {
			t.Errorf("%s: Unwrap = %v", tt.name, err)
			continue
		}
		converted := bytes.Contains(obj.Raw, []byte(`"apiVersion":"apiextensions.k8s.io/v1"`)) && string(obj.Raw) != tt.in
		if converted != tt.convert {
			t.Errorf("%s: Unwrap(%s) = %s, converted %v, want %v", tt.name, tt.in, obj.Raw, converted, tt.convert)
		}
	}
	// spec.version only, nothing else: the v1beta1 defaults.
	obj, err := Unwrap([]byte(tests[4].in))
	want := `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1","metadata":{"name":"a.b"},` +
		`"spec":{"group":"b","names":{"plural":"a","singular":"a","kind":"A","listKind":"AList"},"scope":"Namespaced",` +
		`"versions":[{"name":"v1","served":true,"storage":true}],"conversion":{"strategy":"None"},"preserveUnknownFields":true},` +
		`"status":{"conditions":null,"acceptedNames":{"plural":"","kind":""},"storedVersions":["v1"]}}`
	if err != nil || string(obj.Raw) != want {
		t.Errorf("Unwrap(minimal v1beta1 CRD) = %s, %v\nwant %s", obj.Raw, err, want)
	}
}

// TestUnwrapCRDCorrupt: a v1beta1 CRD that cannot be decoded is an
// ErrCorrupt error, never a panic, for every truncation of a real one.
func TestUnwrapCRDCorrupt(t *testing.T) {
	in, err := os.ReadFile("testdata/crdv1/multi.stored.json")
	if err != nil {
		t.Fatal(err)
	}
	for n := 100; n < len(in); n += 7 {
		_, err := Unwrap(in[:n])
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Unwrap(first %d bytes) = %v, want ErrCorrupt", n, err)
		}
	}
	bad := `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","spec":{"versions":"v1"}}`
	if _, err := Unwrap([]byte(bad)); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "cannot decode CustomResourceDefinition") {
		t.Errorf("Unwrap(%s) = %v, want ErrCorrupt naming the CRD", bad, err)
	}
}
