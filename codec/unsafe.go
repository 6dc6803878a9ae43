package codec

import "unsafe"

// unsafeBytes returns the bytes of s without copying. The result must not
// be modified.
func unsafeBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// unsafeString returns b as a string without copying. The string is valid
// only while b is not modified.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
