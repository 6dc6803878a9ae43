//go:build amd64 && !purego

package codec

import "testing"

// checkSafePrefixArch compares safePrefixAVX2 with the expected result when
// the CPU has AVX2 (it requires 32 bytes or more).
func checkSafePrefixArch(t *testing.T, s []byte, want int) {
	if !hasAVX2 || len(s) < 32 {
		return
	}
	if got := safePrefixAVX2(s); got != want {
		t.Fatalf("safePrefixAVX2(%q) = %d, want %d", s, got, want)
	}
}
