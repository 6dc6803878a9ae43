//go:build amd64 && !purego

package codec

import "golang.org/x/sys/cpu"

// hasAVX2 is set once from the CPU (and OS) features; it is never written
// after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// safePrefix returns the length of the longest prefix of s that
// encoding/json writes unescaped (see safePrefixGo); strings of 32 bytes
// and more are scanned with AVX2 when the CPU has it.
func safePrefix(s []byte) int {
	if len(s) >= 32 && hasAVX2 {
		return safePrefixAVX2(s)
	}
	return safePrefixGo(s)
}

// safePrefixAVX2 is safePrefixGo for len(s) >= 32 on a CPU with AVX2
// (jsonstring_amd64.s): 64 bytes per round, then 32, then the last 32
// bytes again (overlapping).
//
//go:noescape
func safePrefixAVX2(s []byte) int
