//go:build !amd64 || purego

package codec

// safePrefix returns the length of the longest prefix of s that
// encoding/json writes unescaped (see safePrefixGo).
func safePrefix(s []byte) int { return safePrefixGo(s) }
