package cache

import "unsafe"

// b2s returns b as a string without copying. The cache only calls it on
// bytes it never writes again (an entry's buf), so the string stays valid.
func b2s(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
