package codec

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// Benchmarks of the JSON string writer (appendJSONString) on 10 KiB
// strings, against encoding/json.Marshal of the same string and against
// appendJSONStringV0, the previous 8-bytes-per-call scan kept below as a
// baseline for the same run. SetBytes is the input length, so MB/s is the
// scan+copy throughput; cpu-ns/op (process CPU time per op) is steadier
// than wall time on the shared machine.

func jsonStringInputs() []struct{ name, s string } {
	const size = 10 << 10
	ascii := strings.Repeat("key=value; some configuration text ", size/35+1)[:size]
	escEnd := ascii[:size-16] + "\n" + ascii[size-15:]
	german := strings.Repeat("Größere Änderungen an der Konfiguration müssen überprüft werden. ", size/64+1)[:size]
	japanese := strings.Repeat("設定の変更は必ず確認してください。", size/51+1)[:size/3*3]
	return []struct{ name, s string }{
		{"ascii-10KiB", ascii},
		{"ascii-escape-near-end-10KiB", escEnd},
		{"ascii-newline-every-1KiB-10KiB", strings.Repeat(ascii[:1023]+"\n", 10)},
		{"german-10KiB", german},
		{"japanese-10KiB", japanese},
		{"short-16B", "checkout-7d9f8b6"},
	}
}

func BenchmarkJSONString(b *testing.B) {
	for _, in := range jsonStringInputs() {
		src := []byte(in.s)
		b.Run(in.name+"/appendJSONString", func(b *testing.B) {
			buf := make([]byte, 0, 2*len(src)+16)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			defer startCPU().report(b)
			for b.Loop() {
				buf = appendJSONString(buf[:0], src)
			}
		})
		b.Run(in.name+"/v0", func(b *testing.B) {
			buf := make([]byte, 0, 2*len(src)+16)
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			defer startCPU().report(b)
			for b.Loop() {
				buf = appendJSONStringV0(buf[:0], src)
			}
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			defer startCPU().report(b)
			for b.Loop() {
				if _, err := json.Marshal(in.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkJSONStringScan is the escape scan alone on 10 KiB of ASCII
// without escapes: safePrefix (AVX2 on amd64), its pure-Go version, and
// the previous scan (safePrefixV0).
func BenchmarkJSONStringScan(b *testing.B) {
	src := []byte(jsonStringInputs()[0].s)
	for _, impl := range []struct {
		name string
		f    func([]byte) int
	}{{"safePrefix", safePrefix}, {"safePrefixGo", safePrefixGo}, {"v0", safePrefixV0}} {
		b.Run(impl.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			defer startCPU().report(b)
			for b.Loop() {
				if impl.f(src) != len(src) {
					b.Fatal("escape found")
				}
			}
		})
	}
}

// BenchmarkJSONStringCold writes 6,400 distinct 10 KiB ASCII strings (64
// MiB, larger than the caches) one per op, as a LIST of 10 KiB ConfigMaps
// does: the source is read from memory, not from L1.
func BenchmarkJSONStringCold(b *testing.B) {
	const size, n = 10 << 10, 6400
	base := strings.Repeat("key=value; some configuration text ", size/35+1)[:size]
	all := []byte(strings.Repeat(base, n))
	run := func(b *testing.B, f func(dst, s []byte) []byte) {
		buf := make([]byte, 0, 64<<10)
		b.SetBytes(size)
		defer startCPU().report(b)
		i := 0
		for b.Loop() {
			if len(buf) > 48<<10 {
				buf = buf[:0]
			}
			buf = f(buf, all[i*size:(i+1)*size])
			if i++; i == n {
				i = 0
			}
		}
	}
	b.Run("appendJSONString", func(b *testing.B) { run(b, appendJSONString) })
	b.Run("v0", func(b *testing.B) { run(b, appendJSONStringV0) })
}

// appendJSONStringV0 and its helpers are the string writer before the
// 32-byte scan (commit 84f85f1), kept as the benchmark baseline.
func appendJSONStringV0(dst, s []byte) []byte {
	dst = append(dst, '"')
	i := safePrefixV0(s)
	if i == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	return appendJSONStringSlowV0(dst, s, i)
}

func safePrefixV0(s []byte) int {
	i := 0
	for ; len(s)-i >= 8; i += 8 {
		if needsEscapeV0(binary.LittleEndian.Uint64(s[i:])) {
			break
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf && htmlSafe[s[i]] {
		i++
	}
	return i
}

func needsEscapeV0(w uint64) bool {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	hasZero := func(v uint64) uint64 { return (v - lsb) &^ v & msb }
	m := (w-lsb*0x20)&^w | w
	m |= hasZero((w | lsb*0x04) ^ (lsb * 0x26))
	m |= hasZero((w | lsb*0x02) ^ (lsb * 0x3e))
	m |= hasZero(w ^ (lsb * '\\'))
	return m&msb != 0
}

func appendJSONStringSlowV0(dst, s []byte, i int) []byte {
	start := 0
	for i < len(s) {
		if b := s[i]; b < utf8.RuneSelf {
			if htmlSafe[b] {
				i += 1 + safePrefixV0(s[i+1:])
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
