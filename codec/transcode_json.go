package codec

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"unicode/utf8"
)

// This file writes JSON scalars exactly as encoding/json does with its
// default HTML escaping, which is what apimachinery's JSON serializer uses.

const hexDigits = "0123456789abcdef"

// htmlSafe[b] is true for ASCII bytes encoding/json writes unescaped when
// escaping HTML.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string: encoding/json's escaping with
// escapeHTML, invalid UTF-8 replaced by \ufffd, U+2028/U+2029 escaped.
//
// safePrefix finds the run that needs no escaping (AVX2 on amd64, 64 bytes
// per round; a 32-byte SWAR round in pure Go elsewhere and below 32
// bytes), then one memmove copies it.
func appendJSONString(dst, s []byte) []byte {
	k := safePrefix(s)
	dst = slices.Grow(dst, len(s)+2)
	dst = append(dst, '"')
	dst = append(dst, s[:k]...)
	if k == len(s) {
		return append(dst, '"')
	}
	return appendJSONStringSlow(dst, s, k)
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// escapeBits returns a word whose byte k has its top bit set if byte k of w
// is < 0x20, >= 0x80 or one of " \ < > &, the bytes encoding/json does not
// copy as they are. Only the top bits (& msb) count. A set bit may be a
// false positive only above a byte that truly needs escaping (a borrow
// that carries up from it), so the lowest set bit is always exact.
//
// SWAR: for a byte v < 0x80, v-1 has its top bit set iff v == 0 (or a
// borrow comes in from a lower zero byte); bytes >= 0x80 are set by the |w
// term, so the usual &^v is not needed.
func escapeBits(w uint64) uint64 {
	lt20 := w - lsb*0x20                         // < 0x20 (>= 0x80 is in w itself)
	quotAmp := ((w | lsb*0x04) ^ lsb*0x26) - lsb // '"' 0x22, '&' 0x26
	ltGt := ((w | lsb*0x02) ^ lsb*0x3e) - lsb    // '<' 0x3c, '>' 0x3e
	bslash := (w ^ lsb*'\\') - lsb
	return lt20 | w | quotAmp | ltGt | bslash
}

// safePrefixGo returns the length of the longest prefix of s that
// encoding/json writes unescaped: ASCII without control characters and
// " \ < > &. It tests 32 bytes per round (4 words, one branch), then 8,
// then the last 8 bytes again (overlapping) or, below 8 bytes, one byte at
// a time.
func safePrefixGo(s []byte) int {
	n := len(s)
	i := 0
	for ; i <= n-32; i += 32 {
		p := (*[32]byte)(s[i : i+32])
		w0 := binary.LittleEndian.Uint64(p[0:])
		w1 := binary.LittleEndian.Uint64(p[8:])
		w2 := binary.LittleEndian.Uint64(p[16:])
		w3 := binary.LittleEndian.Uint64(p[24:])
		if (escapeBits(w0)|escapeBits(w1)|escapeBits(w2)|escapeBits(w3))&msb != 0 {
			break // the 8-byte rounds below find the byte
		}
	}
	for ; i <= n-8; i += 8 {
		if m := escapeBits(binary.LittleEndian.Uint64(s[i:])) & msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	if i == n {
		return n
	}
	if n >= 8 {
		// The last 8 bytes, overlapping bytes already tested: those are
		// safe, so they neither set bits nor carry borrows.
		if m := escapeBits(binary.LittleEndian.Uint64(s[n-8:])) & msb; m != 0 {
			return n - 8 + bits.TrailingZeros64(m)/8
		}
		return n
	}
	for ; i < n; i++ {
		if b := s[i]; b >= utf8.RuneSelf || !htmlSafe[b] {
			return i
		}
	}
	return n
}

// appendJSONStringSlow appends the rest of s from s[i], a byte that needs
// escaping or is not ASCII; dst holds the quote and s[:i] already. Runs
// written as they are (s[start:i]) are copied once, when an escape or the
// end comes.
func appendJSONStringSlow(dst, s []byte, i int) []byte {
	start := i
	for i < len(s) {
		b := s[i]
		if b < utf8.RuneSelf {
			if htmlSafe[b] {
				// Short runs (words between non-ASCII letters) are
				// walked here; a run of 16 bytes goes to safePrefix.
				j, end := i+1, min(i+16, len(s))
				for j < end && s[j] < utf8.RuneSelf && htmlSafe[s[j]] {
					j++
				}
				if j == i+16 {
					j += safePrefix(s[j:])
				}
				i = j
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscapedASCII(dst, b)
			i++
			start = i
			continue
		}
		i += validUTF8Prefix(s[i:])
		if i == len(s) || s[i] < utf8.RuneSelf {
			continue
		}
		// invalid UTF-8 or U+2028/U+2029
		dst = append(dst, s[start:i]...)
		c, size := utf8.DecodeRune(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendEscapedASCII appends the escape encoding/json writes for the ASCII
// byte b, which is not htmlSafe.
func appendEscapedASCII(dst []byte, b byte) []byte {
	switch b {
	case '\\', '"':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}

// validUTF8Prefix returns the length of the longest prefix of s made of
// valid multi-byte UTF-8 sequences other than U+2028 and U+2029, the
// non-ASCII runes encoding/json copies as they are. Two- and three-byte
// sequences are checked inline; four-byte ones by utf8.DecodeRune.
func validUTF8Prefix(s []byte) int {
	i := 0
	for i < len(s) {
		b := s[i]
		switch {
		case b < 0xC2:
			return i // ASCII, continuation byte, or overlong C0/C1
		case b < 0xE0:
			if i+1 >= len(s) || s[i+1]&0xC0 != 0x80 {
				return i
			}
			i += 2
		case b < 0xF0:
			if i+2 >= len(s) {
				return i
			}
			b1, b2 := s[i+1], s[i+2]
			lo, hi := byte(0x80), byte(0xBF)
			switch b {
			case 0xE0:
				lo = 0xA0 // overlong
			case 0xED:
				hi = 0x9F // surrogates
			case 0xE2:
				if b1 == 0x80 && b2&^1 == 0xA8 {
					return i // U+2028, U+2029
				}
			}
			if b1 < lo || b1 > hi || b2&0xC0 != 0x80 {
				return i
			}
			i += 3
		default:
			c, size := utf8.DecodeRune(s[i:])
			if c == utf8.RuneError && size == 1 {
				return i
			}
			i += size
		}
	}
	return i
}

// appendJSONBase64 appends b as encoding/json writes a []byte: standard
// base64 with padding, quoted.
func appendJSONBase64(dst, b []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(b))
	dst = slices.Grow(dst, n+2)
	start := len(dst)
	dst = dst[:start+n+2]
	dst[start] = '"'
	out := dst[start+1 : start+1+n]
	// fast path: 6 input bytes (read as 8) -> 8 output bytes via a table of
	// base64 character pairs for each 12 bits, two groups per round
	src := b
	for len(src) >= 14 && len(out) >= 16 {
		v, w := binary.BigEndian.Uint64(src), binary.BigEndian.Uint64(src[6:])
		binary.LittleEndian.PutUint64(out, b64Group(v))
		binary.LittleEndian.PutUint64(out[8:], b64Group(w))
		src, out = src[12:], out[16:]
	}
	for len(src) >= 8 && len(out) >= 8 {
		binary.LittleEndian.PutUint64(out, b64Group(binary.BigEndian.Uint64(src)))
		src, out = src[6:], out[8:]
	}
	base64.StdEncoding.Encode(out, src)
	dst[start+1+n] = '"'
	return dst
}

// b64Group encodes the top 48 bits of v as 8 base64 characters, first
// character in the low byte.
func b64Group(v uint64) uint64 {
	return uint64(b64Pairs[v>>52]) | uint64(b64Pairs[v>>40&0xFFF])<<16 |
		uint64(b64Pairs[v>>28&0xFFF])<<32 | uint64(b64Pairs[v>>16&0xFFF])<<48
}

// b64Pairs[x] holds the two base64 characters of the 12 bits x, first
// character in the low byte.
var b64Pairs = func() (t [4096]uint16) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	for i := range t {
		t[i] = uint16(alphabet[i>>6]) | uint16(alphabet[i&63])<<8
	}
	return t
}()

// appendJSONFloat appends f as encoding/json writes a float of the given
// bit size; ok is false for NaN and infinities, which encoding/json rejects.
func appendJSONFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendDuration appends time.Duration(d).String() without allocating.
func appendDuration(dst []byte, d int64) []byte {
	var buf [32]byte
	w := len(buf)
	u := uint64(d)
	neg := d < 0
	if neg {
		u = -u
	}
	const (
		microsecond = 1000
		millisecond = 1000 * microsecond
		second      = 1000 * millisecond
	)
	if u < second {
		var prec int
		w--
		buf[w] = 's'
		w--
		switch {
		case u == 0:
			buf[w] = '0'
			return append(dst, buf[w:]...)
		case u < microsecond:
			prec = 0
			buf[w] = 'n'
		case u < millisecond:
			prec = 3
			w--
			copy(buf[w:], "µ")
		default:
			prec = 6
			buf[w] = 'm'
		}
		w, u = fmtFrac(buf[:w], u, prec)
		w = fmtInt(buf[:w], u)
	} else {
		w--
		buf[w] = 's'
		w, u = fmtFrac(buf[:w], u, 9)
		w = fmtInt(buf[:w], u%60)
		u /= 60
		if u > 0 {
			w--
			buf[w] = 'm'
			w = fmtInt(buf[:w], u%60)
			u /= 60
			if u > 0 {
				w--
				buf[w] = 'h'
				w = fmtInt(buf[:w], u)
			}
		}
	}
	if neg {
		w--
		buf[w] = '-'
	}
	return append(dst, buf[w:]...)
}

func fmtFrac(buf []byte, v uint64, prec int) (nw int, nv uint64) {
	w := len(buf)
	print := false
	for i := 0; i < prec; i++ {
		digit := v % 10
		print = print || digit != 0
		if print {
			w--
			buf[w] = byte(digit) + '0'
		}
		v /= 10
	}
	if print {
		w--
		buf[w] = '.'
	}
	return w, v
}

func fmtInt(buf []byte, v uint64) int {
	w := len(buf)
	if v == 0 {
		w--
		buf[w] = '0'
	} else {
		for v > 0 {
			w--
			buf[w] = byte(v%10) + '0'
			v /= 10
		}
	}
	return w
}

// maxJSONDepth is encoding/json's scanner nesting limit.
const maxJSONDepth = 10000

// appendCompactJSON validates src as one JSON value and appends it without
// insignificant whitespace, escaping <, >, &, U+2028 and U+2029 the way
// encoding/json treats the output of a json.Marshaler (RawExtension,
// FieldsV1). On invalid input it returns dst unchanged and false.
func appendCompactJSON(dst, src []byte) ([]byte, bool) {
	mark := len(dst)
	c := compactor{src: src}
	c.skipSpace()
	dst, ok := c.value(dst, 0)
	if !ok {
		return dst[:mark], false
	}
	c.skipSpace()
	if c.i != len(src) {
		return dst[:mark], false
	}
	return dst, true
}

type compactor struct {
	src []byte
	i   int
}

func (c *compactor) skipSpace() {
	for c.i < len(c.src) && isSpace(c.src[c.i]) {
		c.i++
	}
}

func (c *compactor) value(dst []byte, depth int) ([]byte, bool) {
	if c.i >= len(c.src) {
		return dst, false
	}
	switch b := c.src[c.i]; {
	case b == '{':
		return c.object(dst, depth)
	case b == '[':
		return c.array(dst, depth)
	case b == '"':
		return c.str(dst)
	case b == 't':
		return c.lit(dst, "true")
	case b == 'f':
		return c.lit(dst, "false")
	case b == 'n':
		return c.lit(dst, "null")
	case b == '-' || (b >= '0' && b <= '9'):
		return c.num(dst)
	}
	return dst, false
}

// object writes the JSON object at c.i compacted (value's case '{').
func (c *compactor) object(dst []byte, depth int) ([]byte, bool) {
	if depth >= maxJSONDepth {
		return dst, false
	}
	c.i++
	dst = append(dst, '{')
	c.skipSpace()
	if c.i < len(c.src) && c.src[c.i] == '}' {
		c.i++
		return append(dst, '}'), true
	}
	for {
		c.skipSpace()
		if c.i >= len(c.src) || c.src[c.i] != '"' {
			return dst, false
		}
		var ok bool
		if dst, ok = c.str(dst); !ok {
			return dst, false
		}
		c.skipSpace()
		if c.i >= len(c.src) || c.src[c.i] != ':' {
			return dst, false
		}
		c.i++
		dst = append(dst, ':')
		c.skipSpace()
		if dst, ok = c.value(dst, depth+1); !ok {
			return dst, false
		}
		c.skipSpace()
		if c.i >= len(c.src) {
			return dst, false
		}
		switch c.src[c.i] {
		case ',':
			c.i++
			dst = append(dst, ',')
		case '}':
			c.i++
			return append(dst, '}'), true
		default:
			return dst, false
		}
	}
}

// array writes the JSON array at c.i compacted (value's case '[').
func (c *compactor) array(dst []byte, depth int) ([]byte, bool) {
	if depth >= maxJSONDepth {
		return dst, false
	}
	c.i++
	dst = append(dst, '[')
	c.skipSpace()
	if c.i < len(c.src) && c.src[c.i] == ']' {
		c.i++
		return append(dst, ']'), true
	}
	for {
		c.skipSpace()
		var ok bool
		if dst, ok = c.value(dst, depth+1); !ok {
			return dst, false
		}
		c.skipSpace()
		if c.i >= len(c.src) {
			return dst, false
		}
		switch c.src[c.i] {
		case ',':
			c.i++
			dst = append(dst, ',')
		case ']':
			c.i++
			return append(dst, ']'), true
		default:
			return dst, false
		}
	}
}

func (c *compactor) lit(dst []byte, s string) ([]byte, bool) {
	if len(c.src)-c.i < len(s) || string(c.src[c.i:c.i+len(s)]) != s {
		return dst, false
	}
	c.i += len(s)
	return append(dst, s...), true
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

func (c *compactor) num(dst []byte) ([]byte, bool) {
	s, i := c.src, c.i
	start := i
	if s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return dst, false
	}
	if s[i] == '0' {
		i++
	} else if s[i] >= '1' && s[i] <= '9' {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	} else {
		return dst, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return dst, false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return dst, false
		}
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	}
	c.i = i
	return append(dst, s[start:i]...), true
}

func isHex(b byte) bool {
	return isDigit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

// str copies a JSON string, validating escapes and control characters and
// escaping <, >, &, U+2028, U+2029. Invalid UTF-8 is copied as is, as
// encoding/json's compact does.
func (c *compactor) str(dst []byte) ([]byte, bool) {
	s := c.src
	i := c.i + 1
	dst = append(dst, '"')
	start := i
	for i < len(s) {
		b := s[i]
		switch {
		case b == '"':
			dst = append(dst, s[start:i]...)
			c.i = i + 1
			return append(dst, '"'), true
		case b == '\\':
			if i+1 >= len(s) {
				return dst, false
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(s) || !isHex(s[i+2]) || !isHex(s[i+3]) || !isHex(s[i+4]) || !isHex(s[i+5]) {
					return dst, false
				}
				i += 6
			default:
				return dst, false
			}
		case b < 0x20:
			return dst, false
		case b == '<' || b == '>' || b == '&':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			i++
			start = i
		case b == 0xE2 && i+2 < len(s) && s[i+1] == 0x80 && s[i+2]&^1 == 0xA8:
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[s[i+2]&0xF])
			i += 3
			start = i
		default:
			i++
		}
	}
	return dst, false
}
