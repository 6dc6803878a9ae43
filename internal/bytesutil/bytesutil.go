// Package bytesutil is the one home of lazyapi's unsafe conversions
// between byte slices and strings (as VictoriaMetrics' lib/bytesutil).
package bytesutil

import "unsafe"

// ToUnsafeString returns b as a string without copying. The string is
// valid only as long as b is, and b must not change meanwhile: use it for
// lookups and comparisons that do not keep the string, or on bytes that are
// never written again.
func ToUnsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// ToUnsafeBytes returns the bytes of s without copying. The result must not
// be modified.
func ToUnsafeBytes(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
