package codec

import (
	"encoding/json"
	"math/rand"
	"strings"
	"testing"
	"unicode/utf8"
)

// Differential tests of appendJSONString against encoding/json.Marshal of
// the same string (HTML escaping, \u2028/\u2029, invalid UTF-8 ->
// \ufffd), aimed at the rounds of safePrefix (64 and 32 bytes with AVX2,
// 32 and 8 bytes in pure Go): every special byte or sequence at every
// offset and alignment.

func checkJSONString(t *testing.T, s string) {
	t.Helper()
	want, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if got := appendJSONString(nil, []byte(s)); string(got) != string(want) {
		t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
	}
	checkSafePrefix(t, []byte(s))
	// appended after existing bytes, into a buffer with spare capacity
	// holding garbage
	buf := make([]byte, 3, 3+len(want)+7)
	copy(buf, "abc")
	for i := range buf[3:cap(buf)] {
		buf[:cap(buf)][3+i] = 0xff
	}
	if got := appendJSONString(buf, []byte(s)); string(got) != "abc"+string(want) {
		t.Fatalf("appendJSONString(%q, %q) = %s, want abc%s", "abc", s, got, want)
	}
}

// jsonStringSpecials are the bytes and sequences safePrefix must stop
// at (and some it must not), as they appear in strings.
var jsonStringSpecials = []string{
	"\x00", "\x01", "\b", "\t", "\n", "\f", "\r", "\x1f", " ", "!", "\"", "#", "%", "&", "'", "/",
	";", "<", "=", ">", "?", "[", "\\", "]", "\x7f",
	"é", "ß", "\u00a0", "\u07ff", "\u0800", "日", "\u2027", "\u2028", "\u2029", "\u202a", "\ufffd", "\uffff",
	"\U00010000", "😀", "\U0010ffff",
	// invalid UTF-8
	"\x80", "\xbf", "\xc0", "\xc1\xbf", "\xc2", "\xc3(", "\xdf", "\xe0\x80\x80", "\xe0\x9f\xbf", "\xe2\x80",
	"\xe2\x80\xa8\xa8", "\xe2\x82(", "\xed\xa0\x80", "\xed\xbf\xbf", "\xef\xbf", "\xf0\x8f\xbf\xbf",
	"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xf8", "\xfe", "\xff", "\xf0\x9f\x98",
}

func TestJSONStringSpecialAtEveryOffset(t *testing.T) {
	const safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .:-_=;,+*(){}[]|~`^$#@!?/'%"
	long := strings.Repeat(safe, 3)
	for _, sp := range jsonStringSpecials {
		for total := 0; total <= 72; total++ {
			for off := 0; off <= total; off++ {
				// sp at offset off of a string of total safe bytes (+ sp)
				checkJSONString(t, long[:off]+sp+long[off:total])
			}
		}
		// two specials, every distance, and the special at the start of
		// every round after a first one
		for off := 0; off <= 40; off++ {
			for gap := 0; gap <= 40; gap++ {
				checkJSONString(t, long[:off]+sp+long[off:off+gap]+sp+long[:5])
			}
		}
	}
	// every byte value at every offset of a 40-byte string
	for b := 0; b < 256; b++ {
		for off := 0; off < 40; off++ {
			checkJSONString(t, long[:off]+string([]byte{byte(b)})+long[off:39])
		}
	}
	// the same strings at every alignment of the source
	for align := 0; align < 8; align++ {
		for _, sp := range jsonStringSpecials {
			s := long[:40] + sp + long[:30]
			buf := []byte(strings.Repeat("x", align) + s)
			want, _ := json.Marshal(s)
			if got := appendJSONString(nil, buf[align:]); string(got) != string(want) {
				t.Fatalf("align %d: appendJSONString(%q) = %s, want %s", align, s, got, want)
			}
		}
	}
}

func TestJSONStringUTF8(t *testing.T) {
	texts := []string{
		"Größere Änderungen an der Konfiguration müssen überprüft werden.",
		"設定の変更は必ず確認してください。",
		"Ελληνικά και кириллица и עברית 😀🚀 ",
		"\u2028line\u2029paragraph\u2028\u2029",
	}
	for _, text := range texts {
		// multi-byte runes across every word boundary
		for pad := 0; pad < 40; pad++ {
			s := strings.Repeat("a", pad) + text + strings.Repeat(text, 3)
			checkJSONString(t, s)
			// truncated at every byte: invalid UTF-8 at the end and in
			// the middle
			for cut := pad; cut < len(s) && cut < pad+40; cut++ {
				checkJSONString(t, s[:cut])
				checkJSONString(t, s[:cut]+"tail<ascii>&"+s[cut+1:])
			}
		}
	}
	// every rune of the BMP planes 0 and 1 edges, in ASCII context
	for r := rune(0x80); r < 0x3100; r++ {
		checkJSONString(t, "ab"+string(r)+"cd")
	}
	for _, r := range []rune{0xd7ff, 0xe000, 0xfeff, 0xfffd, 0xffff, 0x10000, 0x1f600, 0x10ffff} {
		checkJSONString(t, "abcdefgh"+string(r)+"abcdefgh"+string(r))
	}
}

func TestJSONStringRandom(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		for j := r.Intn(60); j > 0; j-- {
			switch r.Intn(4) {
			case 0:
				sb.WriteString(jsonStringSpecials[r.Intn(len(jsonStringSpecials))])
			case 1:
				sb.WriteByte(byte(r.Intn(256)))
			default:
				sb.WriteString("abcdefghijklmnopqrstuvwxyz"[:r.Intn(26)])
			}
		}
		checkJSONString(t, sb.String())
	}
}

func FuzzJSONString(f *testing.F) {
	for _, in := range jsonStringInputs() {
		f.Add(in.s[:min(len(in.s), 200)])
	}
	for _, sp := range jsonStringSpecials {
		f.Add("0123456789abcdefghijklmnopqrstuvwxyz" + sp + "0123456789")
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkJSONString(t, s)
		if !utf8.ValidString(s) {
			return
		}
		// valid UTF-8 decodes back to itself
		var back string
		if err := json.Unmarshal(appendJSONString(nil, []byte(s)), &back); err != nil || back != s {
			t.Fatalf("round trip of %q: %q, %v", s, back, err)
		}
	})
}

// safePrefixRef is the byte-at-a-time definition of safePrefix.
func safePrefixRef(s []byte) int {
	for i, b := range s {
		if b >= utf8.RuneSelf || !htmlSafe[b] {
			return i
		}
	}
	return len(s)
}

// checkSafePrefix compares safePrefix, safePrefixGo and (on amd64 with
// AVX2) safePrefixAVX2 with safePrefixRef. (No t.Helper: it is called
// millions of times.)
func checkSafePrefix(t *testing.T, s []byte) {
	want := safePrefixRef(s)
	if got := safePrefix(s); got != want {
		t.Fatalf("safePrefix(%q) = %d, want %d", s, got, want)
	}
	if got := safePrefixGo(s); got != want {
		t.Fatalf("safePrefixGo(%q) = %d, want %d", s, got, want)
	}
	checkSafePrefixArch(t, s, want)
}

// TestSafePrefixEveryByteEveryOffset puts bytes at every offset of strings
// of 0..200 safe bytes (every safe byte value in turn) at every alignment:
// all rounds (64, 32, 8 bytes, the overlapping last load, single bytes) of
// every implementation. Every byte value up to 72 bytes at alignment 0;
// elsewhere the bytes next to the edges of the safe set; other alignments
// up to 72 bytes.
func TestSafePrefixEveryByteEveryOffset(t *testing.T) {
	var safe, all []byte
	for b := 0; b < 256; b++ {
		all = append(all, byte(b))
		if b < utf8.RuneSelf && htmlSafe[b] {
			safe = append(safe, byte(b))
		}
	}
	edges := []byte{0x00, 0x01, 0x09, 0x0a, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x25, 0x26, 0x27, 0x3b, 0x3c, 0x3d, 0x3e, 0x3f,
		0x5b, 0x5c, 0x5d, 0x7e, 0x7f, 0x80, 0xa0, 0xc3, 0xe2, 0xfe, 0xff}
	fill := make([]byte, 8+256)
	for i := range fill {
		fill[i] = safe[(i*7)%len(safe)]
	}
	for align := 0; align < 8; align++ {
		for n := 0; n <= 200; n++ {
			if align != 0 && n > 72 {
				break
			}
			bytes := edges
			if align == 0 && n <= 72 {
				bytes = all
			}
			s := append(make([]byte, align, align+n), fill[align:align+n]...)[align:] // s at this alignment
			checkSafePrefix(t, s)
			for off := 0; off < n; off++ {
				keep := s[off]
				for _, b := range bytes {
					s[off] = b
					checkSafePrefix(t, s)
				}
				s[off] = keep
			}
		}
	}
}

func TestSafePrefixRandom(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	for i := 0; i < 100000; i++ {
		s := make([]byte, r.Intn(300))
		for j := range s {
			s[j] = byte(0x20 + r.Intn(0x5f))
			if r.Intn(200) == 0 {
				s[j] = byte(r.Intn(256))
			}
		}
		checkSafePrefix(t, s)
	}
}

func FuzzSafePrefix(f *testing.F) {
	f.Add([]byte("key=value; some configuration text key=value; some configuration text\n"))
	f.Add([]byte(strings.Repeat("a", 100) + "\\" + strings.Repeat("b", 27)))
	f.Fuzz(func(t *testing.T, s []byte) { checkSafePrefix(t, s) })
}
