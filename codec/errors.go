package codec

import (
	"errors"
	"fmt"
)

// ErrNotScalar is wrapped by PeekField's error when the path names a list
// or an object, not a scalar (a Pod's status.podIPs): kube-apiserver
// accepts such a field selector label but its selectable fields do not
// hold it, so callers evaluating a selector read it as absent.
var ErrNotScalar = errors.New("not a scalar")

// CorruptError reports a value that is neither a storage envelope nor JSON,
// or one that is truncated or malformed.
type CorruptError struct {
	Offset int    // where the problem was found
	Len    int    // length of the value (or message) examined
	Head   []byte // up to 16 bytes at Offset (a copy)
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("codec: corrupt value: %s at offset %d of %d bytes, next bytes %q", e.Reason, e.Offset, e.Len, e.Head)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// corrupt builds the *CorruptError for b at off (a copy of up to 16 bytes
// there) with reason.
func corrupt(b []byte, off int, reason string) *CorruptError {
	h := b[off:]
	if len(h) > 16 {
		h = h[:16]
	}
	return &CorruptError{Offset: off, Len: len(b), Head: append([]byte(nil), h...), Reason: reason}
}
