package codec

import (
	"errors"
	"fmt"
)

// ErrEncrypted and ErrCorrupt are errors.Is targets for the typed errors
// Unwrap returns.
var (
	ErrEncrypted = errors.New("codec: encrypted value")
	ErrCorrupt   = errors.New("codec: corrupt value")
)

// EncryptedError reports a value written by an encryption provider
// ("k8s:enc:<provider>:v1:<key>:").
type EncryptedError struct{ Provider, Key string }

func (e *EncryptedError) Error() string {
	return fmt.Sprintf("codec: value is encrypted by provider %q with key %q", e.Provider, e.Key)
}

// Is reports whether target is ErrEncrypted.
func (e *EncryptedError) Is(target error) bool { return target == ErrEncrypted }

// CorruptError reports a value that is neither a storage envelope nor JSON,
// or one that is truncated or malformed.
type CorruptError struct {
	Offset, Len int
	Head        []byte
	Reason      string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("codec: corrupt value: %s at offset %d of %d bytes, head %q", e.Reason, e.Offset, e.Len, e.Head)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap removes the storage envelope of a stored value.
func Unwrap(stored []byte) (Object, error) {
	return Object{}, fmt.Errorf("codec: not implemented")
}
