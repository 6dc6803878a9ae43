package codec

import (
	"bytes"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The well-known types: messages whose JSON is not their fields' (the
// values written by their own MarshalJSON in apimachinery): Time and
// MicroTime, Duration, IntOrString, RawExtension, FieldsV1 and Quantity.
// The transcoder (state.value) calls these for their kinds.

// smallFields reads the last occurrence of fields 1..3 of a small message,
// checking their wire types against want (0 = field unused).
func smallFields(p []byte, want [4]uint8) (vals [4]occ, has [4]bool, err error) {
	for j := 0; j < len(p); {
		o, next, rerr := readField(p, j)
		if rerr != nil {
			return vals, has, corrupt(p, j, rerr.Error())
		}
		if o.num < 4 && want[o.num] != 0 {
			if o.wt != want[o.num]&7 {
				return vals, has, corrupt(p, j, "wrong wire type")
			}
			vals[o.num], has[o.num] = o, true
		}
		j = next
	}
	return vals, has, nil
}

const (
	wVarint = 8 | 0 // non-zero marker for wire type 0
	wBytes  = 2
)

func appendTime(dst, p []byte, micro bool) ([]byte, bool, bool, error) {
	if len(p) == 0 {
		return append(dst, "null"...), false, true, nil
	}
	v, _, err := smallFields(p, [4]uint8{0, wVarint, wVarint, 0})
	if err != nil {
		return dst, false, false, err
	}
	var t time.Time
	if micro {
		nanos := time.Duration(int32(v[2].u)).Truncate(time.Microsecond)
		t = time.Unix(int64(v[1].u), int64(nanos))
	} else {
		t = time.Unix(int64(v[1].u), 0)
	}
	if t.IsZero() {
		return append(dst, "null"...), false, true, nil
	}
	dst = append(dst, '"')
	if micro {
		dst = t.UTC().AppendFormat(dst, metav1.RFC3339Micro)
	} else {
		dst = t.UTC().AppendFormat(dst, time.RFC3339)
	}
	return append(dst, '"'), false, false, nil
}

func appendDurationMsg(dst, p []byte) ([]byte, error) {
	v, _, err := smallFields(p, [4]uint8{0, wVarint, 0, 0})
	if err != nil {
		return dst, err
	}
	dst = append(dst, '"')
	dst = appendDuration(dst, int64(v[1].u))
	return append(dst, '"'), nil
}

func appendIntOrString(dst, p []byte) ([]byte, error) {
	v, _, err := smallFields(p, [4]uint8{0, wVarint, wVarint, wBytes})
	if err != nil {
		return dst, err
	}
	switch int64(v[1].u) {
	case 0:
		return strconv.AppendInt(dst, int64(int32(v[2].u)), 10), nil
	case 1:
		return appendJSONString(dst, v[3].p), nil
	}
	return dst, fmt.Errorf("impossible IntOrString.Type %d", int64(v[1].u))
}

func appendRawExtension(dst, p []byte) ([]byte, error) {
	v, has, err := smallFields(p, [4]uint8{0, wBytes, 0, 0})
	if err != nil {
		return dst, err
	}
	if !has[1] {
		return append(dst, "null"...), nil
	}
	out, ok := appendCompactJSON(dst, v[1].p)
	if !ok {
		return dst, fmt.Errorf("RawExtension is not valid JSON (head %q)", headOf(v[1].p))
	}
	return out, nil
}

func appendFieldsV1(dst, p []byte) ([]byte, error) {
	v, _, err := smallFields(p, [4]uint8{0, wBytes, 0, 0})
	if err != nil {
		return dst, err
	}
	raw := v[1].p
	if len(raw) == 0 {
		return append(dst, "null"...), nil
	}
	if c := raw[0]; c == 0xf6 || (c >= 0xa0 && c <= 0xbf) || (c >= 0xc6 && c <= 0xdb) {
		return dst, fmt.Errorf("FieldsV1 in CBOR is not supported")
	}
	out, ok := appendCompactJSON(dst, raw)
	if !ok {
		return dst, fmt.Errorf("FieldsV1 is not valid JSON (head %q)", headOf(raw))
	}
	return out, nil
}

func headOf(b []byte) []byte {
	if len(b) > 16 {
		return b[:16]
	}
	return b
}

// appendQuantity writes a resource.Quantity message {string = 1} as
// Quantity.MarshalJSON writes the value its Unmarshal produces: the stored
// string when ParseQuantity keeps it (the canonical forms), otherwise the
// canonicalised form (slow path, allocates).
func appendQuantity(dst, p []byte) ([]byte, error) {
	v, has, err := smallFields(p, [4]uint8{0, wBytes, 0, 0})
	if err != nil {
		return dst, err
	}
	if !has[1] {
		return append(dst, `"0"`...), nil
	}
	s := v[1].p
	if quantityKept(s) {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"'), nil
	}
	q, err := resource.ParseQuantity(string(s))
	if err != nil {
		return dst, fmt.Errorf("cannot parse quantity %q: %w", s, err)
	}
	b, err := q.MarshalJSON()
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// quantityKept reports whether s is a quantity that Quantity.MarshalJSON
// writes back unchanged after ParseQuantity: "0", or a positive integer
// without leading zeros and an SI suffix, in the ranges where ParseQuantity
// keeps the string or canonicalises it to itself. Anything else takes the
// slow path, which is always exact.
func quantityKept(s []byte) bool {
	if len(s) == 1 && s[0] == '0' {
		return true
	}
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	if n == 0 || s[0] == '0' {
		return false
	}
	num, suf := s[:n], s[n:]
	switch len(suf) {
	case 0:
	case 1:
		switch suf[0] {
		case 'n', 'u', 'm', 'k', 'M', 'G', 'T', 'P', 'E':
		default:
			return false
		}
	case 2:
		if suf[1] != 'i' {
			return false
		}
		var e int // exponent / 10
		switch suf[0] {
		case 'K':
			e = 1
		case 'M':
			e = 2
		case 'G':
			e = 3
		case 'T':
			e = 4
		default:
			return false
		}
		if 14-len(num)-3*e < 0 {
			return false
		}
		var x uint64
		for _, c := range num {
			x = x*10 + uint64(c-'0')
		}
		return x%1024 != 0
	default:
		return false
	}
	return len(num) <= 18 && !bytes.HasSuffix(num, []byte("000"))
}
