package codec

import (
	"bytes"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

func storedConfigMap(t testing.TB) []byte {
	t.Helper()
	b, err := storagefmt.Protobuf(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"k": "v"}},
		Data:       map[string]string{"x": "y"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestUnwrap(t *testing.T) {
	stored := storedConfigMap(t)
	o, err := Unwrap(stored)
	if err != nil {
		t.Fatal(err)
	}
	if o.Format != FormatProtobuf || o.APIVersion != "v1" || o.Kind != "ConfigMap" || len(o.Raw) == 0 || !bytes.Contains(stored, o.Raw) {
		t.Fatalf("Unwrap(configmap) = %+v", o)
	}
	if got := AppendProtobufEnvelope(nil, o, 0); !bytes.Equal(got, stored) {
		t.Errorf("AppendProtobufEnvelope(rv=0) = %q, want the stored bytes %q", got, stored)
	}

	for _, s := range []string{`{"a":1}`, " \n\t{}", `{`} {
		o, err := Unwrap([]byte(s))
		if err != nil || o.Format != FormatJSON || string(o.Raw) != s {
			t.Errorf("Unwrap(%q) = %+v, %v; want FormatJSON", s, o, err)
		}
	}

	enc := []struct{ in, provider, key string }{
		{"k8s:enc:aescbc:v1:key1:\x01\x02", "aescbc", "key1"},
		{"k8s:enc:aesgcm:v1:k2:xx", "aesgcm", "k2"},
		{"k8s:enc:secretbox:v1:sb:", "secretbox", "sb"},
		{"k8s:enc:kms:v2:my-kms:\x00\x01", "kms", "my-kms"},
		{"k8s:enc:", "", ""},
	}
	for _, c := range enc {
		_, err := Unwrap([]byte(c.in))
		var e *EncryptedError
		if !errors.As(err, &e) || !errors.Is(err, ErrEncrypted) || e.Provider != c.provider || e.Key != c.key {
			t.Errorf("Unwrap(%q) = %v, want EncryptedError{%q, %q}", c.in, err, c.provider, c.key)
		}
	}

	bad := []string{"", "   ", "hello", "[1,2]", "k8s", "k8s\x00\x0a", "k8s\x00\x0a\x05ab", "k8s\x00\x12\xff\xff\xff\xff\x0f", "k8s\x00\x08\x01", "\x00\x01\x02"}
	for _, s := range bad {
		_, err := Unwrap([]byte(s))
		var e *CorruptError
		if !errors.As(err, &e) || !errors.Is(err, ErrCorrupt) {
			t.Errorf("Unwrap(%q) = %v, want a CorruptError", s, err)
			continue
		}
		if e.Len != len(s) && s != "" {
			t.Errorf("Unwrap(%q): Len = %d, want %d", s, e.Len, len(s))
		}
		if e.Error() == "" {
			t.Errorf("empty error text")
		}
	}

	// every truncation of a valid value is an error or a smaller object, never a panic
	for i := 0; i < len(stored); i++ {
		if o, err := Unwrap(stored[:i]); err == nil && o.Format == FormatProtobuf && len(o.Raw) > i {
			t.Fatalf("Unwrap(truncated %d) = raw of %d bytes", i, len(o.Raw))
		}
	}
}
