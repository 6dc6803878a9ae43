package codec

import (
	"bytes"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// TestTableRowFromProtobuf: the rows of ConfigMaps and Secrets computed
// from the protobuf are byte-identical to those computed from the JSON.
func TestTableRowFromProtobuf(t *testing.T) {
	s := DefaultSchema()
	now := time.Date(2026, 12, 3, 4, 0, 0, 0, time.UTC)
	created := metav1.NewTime(now.Add(-49 * time.Hour))
	objs := []struct {
		resource string
		obj      runtime.Object
	}{
		{"configmaps", fixtureConfigMap()},
		{"configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "empty", Namespace: "ns"}}},
		{"configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bin", Namespace: "ns", CreationTimestamp: created},
			Data: map[string]string{"a": "1"}, BinaryData: map[string][]byte{"b": {0, 1}, "c": nil}}},
		{"secrets", fixtureSecret()},
		{"secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "untyped", Namespace: "ns", CreationTimestamp: created}}},
		{"secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tls", Namespace: "ns", CreationTimestamp: created},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}}},
	}
	for _, o := range objs {
		if !s.TableRowFromProtobuf("", o.resource, IncludeMetadata) || s.TableRowFromProtobuf("", o.resource, IncludeObject) {
			t.Fatalf("TableRowFromProtobuf(%s) is wrong", o.resource)
		}
		stored, err := storagefmt.Protobuf(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		obj, err := Unwrap(stored)
		if err != nil {
			t.Fatal(err)
		}
		js, err := s.AppendJSON(nil, obj, 42, JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, inc := range []IncludeObjectPolicy{IncludeMetadata, IncludeNone} {
			a, err := s.AppendTableRow(nil, "", o.resource, obj, 42, inc, now)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.AppendTableRowFromJSON(nil, "", o.resource, js, obj, 42, inc, now)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("%s row (%v) from protobuf:\n%s\nfrom JSON:\n%s", o.resource, inc, a, b)
			}
		}
	}
}
