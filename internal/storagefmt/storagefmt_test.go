package storagefmt

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestProtobufRoundTrip(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "9", Labels: map[string]string{"k": "v"}},
		Data:       map[string]string{"x": "y"},
	}
	b, err := Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("k8s\x00")) {
		t.Fatalf("Protobuf() = %q, want k8s\\x00 prefix", b[:8])
	}
	got, _, err := protoSerializer.Decode(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	gcm := got.(*corev1.ConfigMap)
	if gcm.ResourceVersion != "" || gcm.Data["x"] != "y" || gcm.Labels["k"] != "v" || gcm.Kind != "ConfigMap" || gcm.APIVersion != "v1" {
		t.Fatalf("decoded %+v", gcm)
	}
	if cm.ResourceVersion != "9" {
		t.Fatalf("Protobuf modified its argument")
	}
}

func TestJSONCustomResource(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "resourceVersion": "5"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	b, err := JSON(u)
	if err != nil {
		t.Fatal(err)
	}
	var back unstructured.Unstructured
	if err := runtime.DecodeInto(unstructured.UnstructuredJSONScheme, b, &back); err != nil {
		t.Fatal(err)
	}
	if back.GetResourceVersion() != "" || back.GetName() != "w" {
		t.Fatalf("JSON() = %s", b)
	}
}

func TestKey(t *testing.T) {
	if got := Key("/registry", "configmaps", "ns", "a"); got != "/registry/configmaps/ns/a" {
		t.Errorf("Key = %q", got)
	}
	if got := Key("/registry", "minions", "", "n1"); got != "/registry/minions/n1" {
		t.Errorf("Key = %q", got)
	}
}
