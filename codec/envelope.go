package codec

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// ErrEncrypted and ErrCorrupt are errors.Is targets for the typed errors
// Unwrap returns.
var (
	ErrEncrypted = errors.New("codec: encrypted value")
	ErrCorrupt   = errors.New("codec: corrupt value")
)

// EncryptedError reports a value written by a kube-apiserver encryption
// provider: "k8s:enc:<provider>:<version>:<key>:" followed by ciphertext.
type EncryptedError struct {
	Provider string // aescbc, aesgcm, secretbox, kms, ...
	Key      string // the key's (or KMS provider's) name
}

func (e *EncryptedError) Error() string {
	return fmt.Sprintf("codec: value is encrypted by provider %q with key %q", e.Provider, e.Key)
}

// Is reports whether target is ErrEncrypted.
func (e *EncryptedError) Is(target error) bool { return target == ErrEncrypted }

var (
	protobufMagic  = []byte("k8s\x00")
	encryptedMagic = []byte("k8s:enc:")
)

// IsProtobuf reports whether stored is in kube-apiserver's protobuf
// envelope ("k8s\x00"): Unwrap gives FormatProtobuf for it, or an error.
func IsProtobuf(stored []byte) bool { return bytes.HasPrefix(stored, protobufMagic) }

// Unwrap removes the storage envelope of a stored value.
//
// "k8s\x00" + runtime.Unknown gives FormatProtobuf with APIVersion and Kind
// from the Unknown's typeMeta and Raw = its raw field; a value whose first
// non-space byte is '{' gives FormatJSON with Raw = stored; a
// "k8s:enc:" prefix gives an *EncryptedError; anything else a
// *CorruptError. Raw points into stored. Unwrap never panics and allocates
// at most a few small strings (kinds of the default scheme are interned).
// The exception is a CustomResourceDefinition stored as
// apiextensions.k8s.io/v1beta1, which kube-apiserver serves only as v1:
// its Raw is the v1 JSON in a new buffer, and APIVersion and Kind are set
// (crdv1.go).
func Unwrap(stored []byte) (Object, error) {
	if bytes.HasPrefix(stored, protobufMagic) {
		return unwrapProtobuf(stored)
	}
	if bytes.HasPrefix(stored, encryptedMagic) {
		return Object{}, encryptedError(stored)
	}
	for i, c := range stored {
		if isSpace(c) {
			continue
		}
		if c == '{' {
			if isCRDv1beta1(stored[i:]) {
				return unwrapCRD(stored)
			}
			// Without the newline kube-apiserver's JSON encoders end
			// a value with (json.Encoder): an object's bytes end at
			// its closing brace, in a list or a watch frame.
			return Object{Format: FormatJSON, Raw: trimRightSpace(stored)}, nil
		}
		return Object{}, corrupt(stored, i, "value is neither protobuf (k8s\\x00), JSON nor encrypted (k8s:enc:)")
	}
	if len(stored) == 0 {
		return Object{}, &CorruptError{Reason: "empty value"}
	}
	return Object{}, corrupt(stored, 0, "value is only whitespace")
}

func unwrapProtobuf(stored []byte) (Object, error) {
	b := stored
	obj := Object{Format: FormatProtobuf}
	var hasRaw bool
	for i := len(protobufMagic); i < len(b); {
		o, next, err := readField(b, i)
		if err != nil {
			return Object{}, corrupt(b, i, "runtime.Unknown: "+err.Error())
		}
		switch o.num {
		case 1, 2, 3, 4:
			if o.wt != 2 {
				return Object{}, corrupt(b, i, fmt.Sprintf("runtime.Unknown: wrong wire type %d for field %d", o.wt, o.num))
			}
		}
		switch o.num {
		case 1:
			for j := 0; j < len(o.p); {
				t, jn, err := readField(o.p, j)
				if err != nil {
					return Object{}, corrupt(b, i, "runtime.TypeMeta: "+err.Error())
				}
				if (t.num == 1 || t.num == 2) && t.wt != 2 {
					return Object{}, corrupt(b, i, "runtime.TypeMeta: wrong wire type")
				}
				switch t.num {
				case 1:
					obj.APIVersion = intern(t.p)
				case 2:
					obj.Kind = intern(t.p)
				}
				j = jn
			}
		case 2:
			obj.Raw, hasRaw = o.p, true
		}
		i = next
	}
	if !hasRaw {
		return Object{}, corrupt(b, len(b), "runtime.Unknown has no raw field")
	}
	if obj.Kind == "" {
		return Object{}, corrupt(b, len(protobufMagic), "runtime.Unknown has no kind")
	}
	return obj, nil
}

// internTable holds the apiVersion and kind strings of client-go's scheme
// so that Unwrap does not allocate them. It is built once and read-only.
var internTable = sync.OnceValue(func() map[string]string {
	t := map[string]string{}
	for k := range scheme.Scheme.AllKnownTypes() {
		if k.Version == runtime.APIVersionInternal {
			continue
		}
		av := k.GroupVersion().String()
		t[av] = av
		t[k.Kind] = k.Kind
	}
	return t
})

func intern(b []byte) string {
	if s, ok := internTable()[string(b)]; ok {
		return s
	}
	return string(b)
}

// encryptedError parses "k8s:enc:<provider>:<version>:<key>:".
func encryptedError(stored []byte) error {
	rest := stored[len(encryptedMagic):]
	next := func() string {
		i := bytes.IndexByte(rest, ':')
		if i < 0 || i > 256 {
			return ""
		}
		s := string(rest[:i])
		rest = rest[i+1:]
		return s
	}
	e := &EncryptedError{}
	e.Provider = next()
	if e.Provider != "" && next() != "" {
		e.Key = next()
	}
	return e
}

// trimRightSpace returns b without its trailing JSON whitespace.
func trimRightSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}
