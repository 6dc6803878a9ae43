package codec

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// TestItemSizes: the sizes computed from ItemSizes equal the list item
// sizes computed from the object, for protobuf and JSON objects, at
// resourceVersions of every decimal length.
func TestItemSizes(t *testing.T) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u",
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"big": string(make([]byte, 300))}},
		Data: map[string][]byte{"k": make([]byte, 5000)}}
	pb, err := storagefmt.Protobuf(s)
	if err != nil {
		t.Fatal(err)
	}
	// Metadata in two field-1 occurrences (merged by a decoder).
	split, _ := Unwrap(pb)
	split.Raw = append(append([]byte(nil), split.Raw...), 0x0a, 0x03, 0x0a, 0x01, 'x')
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"namespace": "ns", "name": "w", "uid": "u", "labels": map[string]any{"a": "b"}},
		"spec":     map[string]any{"color": "red"}}}
	js, err := storagefmt.JSON(w)
	if err != nil {
		t.Fatal(err)
	}
	pobj, _ := Unwrap(pb)
	jobj, _ := Unwrap(js)
	for _, c := range []struct {
		name string
		obj  Object
	}{{"protobuf", pobj}, {"protobuf split metadata", split}, {"json", jobj}} {
		z := SizesOf(c.obj)
		for _, rv := range []int64{1, 9, 10, 99, 100, 12345, 1 << 40, math.MaxInt64} {
			got, ok := z.ProtobufListItemSize(rv)
			if c.obj.Format == FormatProtobuf && (!ok || got != ProtobufListItemSize(c.obj, rv)) {
				t.Errorf("%s: ProtobufListItemSize(%d) = %d, %v; want %d", c.name, rv, got, ok, ProtobufListItemSize(c.obj, rv))
			}
			if c.obj.Format == FormatJSON && ok {
				t.Errorf("%s: ProtobufListItemSize(%d) ok for a JSON object", c.name, rv)
			}
			want, err := PartialProtobufListItemSize(c.obj, rv)
			if err != nil {
				t.Fatal(err)
			}
			got, ok = z.PartialProtobufListItemSize(rv)
			if !ok || got != want {
				t.Errorf("%s: PartialProtobufListItemSize(%d) = %d, %v; want %d", c.name, rv, got, ok, want)
			}
		}
	}
	if _, ok := (ItemSizes{}).ProtobufListItemSize(1); ok {
		t.Errorf("zero ItemSizes gives a size")
	}
}
