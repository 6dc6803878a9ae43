package proxy

import "unsafe"

// b2s returns b as a string without copying. The string is valid only as
// long as b is and b must not change meanwhile; use it for lookups and
// comparisons that do not keep the string.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
