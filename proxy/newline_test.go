package proxy_test

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// TestJSONTrailingNewline: JSON responses end with the newline
// kube-apiserver's serializer (json.Encoder) writes, byte for byte: a GET
// equals apimachinery's encoding of the stored object; LISTs, Tables,
// PartialObjectMetadata and Statuses end with "}\n" as kube-apiserver's
// (checked against kube-apiserver v1.37.2: GET, LIST, Table, Status 404,
// Scale all end in "\n").
func TestJSONTrailingNewline(t *testing.T) {
	e := startEnv(t)
	sec := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", UID: "uid-s", Labels: map[string]string{"a": "b"}},
		Data:       map[string][]byte{"token": []byte("x")},
		Type:       corev1.SecretTypeOpaque,
	}
	rv := e.put(t, "secrets", sec)
	stored, err := storagefmt.Protobuf(sec)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	if err := enc.Encode(oracle(t, stored, rv), &want); err != nil {
		t.Fatal(err)
	}
	// Twice: the second GET may come from the rendering cache.
	for range 3 {
		code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns/secrets/s", "application/json")
		if code != 200 || !bytes.Equal(body, want.Bytes()) {
			t.Fatalf("GET secret = %d\n%q\nwant apimachinery's\n%q", code, body, want.Bytes())
		}
	}
	for _, tt := range []struct{ path, accept string }{
		{"/api/v1/namespaces/ns/secrets", "application/json"},
		{"/api/v1/namespaces/ns/secrets?limit=1", "application/json"},
		{"/api/v1/namespaces/ns/secrets", "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{"/api/v1/namespaces/ns/secrets/s", "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{"/api/v1/namespaces/ns/secrets", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		{"/api/v1/namespaces/ns/secrets/s", "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io"},
		{"/api/v1/namespaces/ns/secrets/missing", "application/json"},
		{"/api/v1/namespaces/ns/secrets?labelSelector=a+in+(", "application/json"},
	} {
		_, _, body := e.raw(t, "GET", tt.path, tt.accept)
		if !strings.HasSuffix(string(body), "}\n") {
			t.Errorf("GET %s (%s) ends %q, want kube-apiserver's \"}\\n\"", tt.path, tt.accept, body[max(0, len(body)-10):])
		}
	}
}

// TestWatchYAMLOnly: a watch has no YAML framing; a client that accepts
// only YAML gets kube-apiserver's 406 (NegotiateOutputMediaTypeStream),
// one that also accepts JSON gets JSON frames.
func TestWatchYAMLOnly(t *testing.T) {
	e := startEnv(t)
	code, hdr, body := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?watch=1&timeoutSeconds=1", "application/yaml")
	if code != 406 || hdr.Get("Content-Type") != "application/yaml" ||
		!strings.Contains(string(body), "only the following media types are accepted: application/json;stream=watch,") ||
		!strings.Contains(string(body), "application/vnd.kubernetes.protobuf;stream=watch") {
		t.Errorf("YAML-only watch = %d %s %s, want 406 as kube-apiserver", code, hdr.Get("Content-Type"), body)
	}
	code, hdr, _ = e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?watch=1&timeoutSeconds=1", "application/yaml, application/json;q=0.5")
	if code != 200 || hdr.Get("Content-Type") != "application/json" {
		t.Errorf("YAML-or-JSON watch = %d %s, want 200 application/json", code, hdr.Get("Content-Type"))
	}
}
