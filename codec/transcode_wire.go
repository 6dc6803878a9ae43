package codec

// Protobuf wire-format reading shared by the transcoder, passthroughs and
// peek. Every reader checks bounds and returns an error instead of panicking.

import "errors"

var (
	errTruncated   = errors.New("truncated protobuf")
	errVarint      = errors.New("malformed varint")
	errWireType    = errors.New("invalid wire type")
	errFieldNumber = errors.New("invalid field number 0")
	errGroup       = errors.New("unbalanced group")
)

// readVarint decodes a varint at b[i:]; it returns the value and the offset
// after it.
func readVarint(b []byte, i int) (uint64, int, error) {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if i >= len(b) {
			return 0, i, errTruncated
		}
		c := b[i]
		i++
		v |= uint64(c&0x7F) << shift
		if c < 0x80 {
			return v, i, nil
		}
	}
	return 0, i, errVarint
}

// field occurrence as read by readField.
type occ struct {
	num   uint64
	wt    uint8
	u     uint64 // varint or fixed value
	p     []byte // length-delimited payload
	start int    // offset of the tag
}

// readField reads one field at b[i:] and returns it and the offset after it.
// Groups (wire types 3/4) are skipped as a whole and reported with wt 3.
func readField(b []byte, i int) (occ, int, error) {
	var o occ
	o.start = i
	tag, i, err := readVarint(b, i)
	if err != nil {
		return o, i, err
	}
	o.num = tag >> 3
	o.wt = uint8(tag & 7)
	if o.num == 0 {
		return o, i, errFieldNumber
	}
	switch o.wt {
	case 0:
		o.u, i, err = readVarint(b, i)
		return o, i, err
	case 1:
		if len(b)-i < 8 {
			return o, i, errTruncated
		}
		o.u = uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24 |
			uint64(b[i+4])<<32 | uint64(b[i+5])<<40 | uint64(b[i+6])<<48 | uint64(b[i+7])<<56
		return o, i + 8, nil
	case 2:
		var n uint64
		n, i, err = readVarint(b, i)
		if err != nil {
			return o, i, err
		}
		if n > uint64(len(b)-i) {
			return o, i, errTruncated
		}
		o.p = b[i : i+int(n)]
		return o, i + int(n), nil
	case 5:
		if len(b)-i < 4 {
			return o, i, errTruncated
		}
		o.u = uint64(b[i]) | uint64(b[i+1])<<8 | uint64(b[i+2])<<16 | uint64(b[i+3])<<24
		return o, i + 4, nil
	case 3:
		i, err = skipGroup(b, i, o.num)
		return o, i, err
	}
	return o, i, errWireType
}

// skipGroup skips the body of a group started with field number num.
func skipGroup(b []byte, i int, num uint64) (int, error) {
	depth := 1
	for i < len(b) {
		tag, j, err := readVarint(b, i)
		if err != nil {
			return j, err
		}
		i = j
		wt := tag & 7
		switch wt {
		case 0:
			if _, i, err = readVarint(b, i); err != nil {
				return i, err
			}
		case 1:
			if len(b)-i < 8 {
				return i, errTruncated
			}
			i += 8
		case 2:
			var n uint64
			if n, i, err = readVarint(b, i); err != nil {
				return i, err
			}
			if n > uint64(len(b)-i) {
				return i, errTruncated
			}
			i += int(n)
		case 5:
			if len(b)-i < 4 {
				return i, errTruncated
			}
			i += 4
		case 3:
			depth++
		case 4:
			depth--
			if depth == 0 {
				return i, nil
			}
		default:
			return i, errWireType
		}
	}
	return i, errGroup
}

func appendVarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func varintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}
