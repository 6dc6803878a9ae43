package codec

import (
	"bytes"

	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// The JSON scanners shared by the passthrough (passthrough.go), the
// metadata peek (peek.go) and the transcoder: they walk stored JSON without
// decoding it, and report malformed input as a *CorruptError.

// span is a half-open byte range [start, end) of a scanned value.
type span struct{ start, end int }

// findTopKey scans the top-level object starting at raw[i] == '{' for key.
// It returns the value's span (start -1 when absent), the offset of the
// first key sorting after key (-1 when none; a place to insert key), and
// the offset of the object's closing brace (when the whole object was
// scanned).
func findTopKey(raw []byte, i int, key string) (val span, ins, closing int, err error) {
	val = span{-1, -1}
	ins, closing = -1, -1
	i++ // '{'
	for {
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return val, ins, closing, corrupt(raw, i, "truncated JSON object")
		}
		if raw[i] == '}' {
			return val, ins, i, nil
		}
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		if i >= len(raw) || raw[i] != '"' {
			return val, ins, closing, corrupt(raw, i, "expected a JSON object key")
		}
		ks := i
		ke, err := skipString(raw, i)
		if err != nil {
			return val, ins, closing, err
		}
		i = skipSpace(raw, ke)
		if i >= len(raw) || raw[i] != ':' {
			return val, ins, closing, corrupt(raw, i, "expected ':' after a JSON object key")
		}
		i = skipSpace(raw, i+1)
		ve, err := skipValue(raw, i)
		if err != nil {
			return val, ins, closing, err
		}
		k := raw[ks+1 : ke-1]
		if keyEquals(k, key) {
			return span{i, ve}, ins, closing, nil
		}
		if ins < 0 && compareKeys(k, bytesutil.ToUnsafeBytes(key)) > 0 {
			ins = ks
		}
		i = skipSpace(raw, ve)
		if i < len(raw) && raw[i] != ',' && raw[i] != '}' {
			return val, ins, closing, corrupt(raw, i, "expected ',' or '}' in a JSON object")
		}
	}
}

// emptyObjectBefore reports whether the only non-space byte before at is
// the object's opening brace.
func emptyObjectBefore(raw []byte, at int) bool {
	for j := at - 1; j >= 0; j-- {
		if !isSpace(raw[j]) {
			return raw[j] == '{'
		}
	}
	return true
}

// keyEquals compares a raw JSON key (between the quotes, possibly with
// escapes) with s.
func keyEquals(k []byte, s string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k) == s
	}
	var buf [64]byte
	u, ok := unescapeInto(buf[:0], k)
	return ok && string(u) == s
}

// compareKeys compares two raw JSON keys by their decoded bytes, the order
// encoding/json sorts map keys in.
func compareKeys(a, b []byte) int {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return bytes.Compare(a, b)
	}
	var ba, bb [128]byte
	ua, oka := unescapeInto(ba[:0], a)
	ub, okb := unescapeInto(bb[:0], b)
	if !oka || !okb {
		return bytes.Compare(a, b)
	}
	return bytes.Compare(ua, ub)
}

// unescapeInto decodes the escapes of a JSON string body into dst. It
// handles \uXXXX including surrogate pairs.
func unescapeInto(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 >= len(s) {
			return dst, false
		}
		switch s[i+1] {
		case '"', '\\', '/':
			dst = append(dst, s[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				return dst, false
			}
			i += 6
			if r >= 0xD800 && r < 0xDC00 {
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					if r2, ok := hex4(s, i+2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
						r = (r-0xD800)<<10 | (r2 - 0xDC00) + 0x10000
						i += 6
					} else {
						r = 0xFFFD
					}
				} else {
					r = 0xFFFD
				}
			} else if r >= 0xDC00 && r < 0xE000 {
				r = 0xFFFD
			}
			dst = appendRune(dst, r)
			continue
		default:
			return dst, false
		}
		i += 2
	}
	return dst, true
}

func hex4(s []byte, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range s[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func appendRune(dst []byte, r rune) []byte {
	switch {
	case r < 0x80:
		return append(dst, byte(r))
	case r < 0x800:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r)&0x3F)
	case r < 0x10000:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
	}
	return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12)&0x3F, 0x80|byte(r>>6)&0x3F, 0x80|byte(r)&0x3F)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the offset after the JSON string starting at b[i]=='"'.
func skipString(b []byte, i int) (int, error) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return i, corrupt(b, i, "unterminated JSON string")
		}
		j += k
		// count the backslashes before the quote
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j, nil
		}
	}
}

// skipValue returns the offset after the JSON value starting at b[i]. It
// checks string and bracket structure, not the full grammar.
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return i, corrupt(b, i, "expected a JSON value")
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		var stack [64]byte
		depth := 0
		for j := i; j < len(b); {
			switch c := b[j]; c {
			case '"':
				k, err := skipString(b, j)
				if err != nil {
					return i, err
				}
				j = k
				continue
			case '{', '[':
				if depth < len(stack) {
					stack[depth] = c
				}
				depth++
			case '}', ']':
				if depth == 0 {
					return i, corrupt(b, j, "unbalanced JSON brackets")
				}
				depth--
				if depth < len(stack) && stack[depth] != c-2 {
					return i, corrupt(b, j, "mismatched JSON brackets")
				}
				if depth == 0 {
					return j + 1, nil
				}
			}
			j++
		}
		return i, corrupt(b, i, "truncated JSON value")
	}
	j := i
	for j < len(b) {
		c := b[j]
		if c == ',' || c == '}' || c == ']' || c == ':' || isSpace(c) {
			break
		}
		if c == '"' || c == '{' || c == '[' {
			return i, corrupt(b, j, "malformed JSON literal")
		}
		j++
	}
	if j == i {
		return i, corrupt(b, i, "expected a JSON value")
	}
	return j, nil
}

// eachKey calls fn for every key (raw body between quotes) and value (raw
// JSON) of the object o.
func eachKey(o []byte, fn func(k, v []byte) error) error {
	i := 1
	for {
		i = skipSpace(o, i)
		if i >= len(o) {
			return corrupt(o, i, "truncated JSON object")
		}
		if o[i] == '}' {
			return nil
		}
		if o[i] == ',' {
			i = skipSpace(o, i+1)
		}
		if i >= len(o) || o[i] != '"' {
			return corrupt(o, i, "expected a JSON object key")
		}
		ks := i
		ke, err := skipString(o, i)
		if err != nil {
			return err
		}
		i = skipSpace(o, ke)
		if i >= len(o) || o[i] != ':' {
			return corrupt(o, i, "expected ':' in a JSON object")
		}
		i = skipSpace(o, i+1)
		ve, err := skipValue(o, i)
		if err != nil {
			return err
		}
		if err := fn(o[ks+1:ke-1], o[i:ve]); err != nil {
			return err
		}
		i = ve
	}
}

// eachElem calls fn for every element of the JSON array a.
func eachElem(a []byte, fn func(e []byte) error) error {
	i := 1
	for {
		i = skipSpace(a, i)
		if i >= len(a) {
			return corrupt(a, i, "truncated JSON array")
		}
		if a[i] == ']' {
			return nil
		}
		if a[i] == ',' {
			i = skipSpace(a, i+1)
		}
		ve, err := skipValue(a, i)
		if err != nil {
			return err
		}
		if err := fn(a[i:ve]); err != nil {
			return err
		}
		i = ve
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }
