package codec

// Protobuf wire helpers for the framing writers. Every field written here has
// a number below 16, so its tag is one byte. Names start with pb to keep them
// apart from the transcoder's readers in the same package.

const (
	pbWireVarint = 0
	pbWireBytes  = 2
)

// pbTag returns the one-byte key of field (1..15) with wire type wt.
func pbTag(field, wt int) byte { return byte(field<<3 | wt) }

// pbSizeVarint and pbAppendVarint are the transcoder's varint helpers.
func pbSizeVarint(v uint64) int                  { return varintSize(v) }
func pbAppendVarint(dst []byte, v uint64) []byte { return appendVarint(dst, v) }

// pbSizeBytesField is the size of a length-delimited field of n bytes.
func pbSizeBytesField(n int) int { return 1 + pbSizeVarint(uint64(n)) + n }

// pbAppendBytesHeader appends the key and length of a length-delimited field
// whose n bytes the caller appends next.
func pbAppendBytesHeader(dst []byte, field, n int) []byte {
	dst = append(dst, pbTag(field, pbWireBytes))
	return pbAppendVarint(dst, uint64(n))
}

// pbAppendString appends a length-delimited field, also when s is empty
// (gogo-generated Kubernetes types always write their string fields).
func pbAppendString(dst []byte, field int, s string) []byte {
	dst = pbAppendBytesHeader(dst, field, len(s))
	return append(dst, s...)
}

// pbAppendVarintField appends a varint field.
func pbAppendVarintField(dst []byte, field int, v uint64) []byte {
	dst = append(dst, pbTag(field, pbWireVarint))
	return pbAppendVarint(dst, v)
}

// pbSizeVarintField is the size of a varint field.
func pbSizeVarintField(v uint64) int { return 1 + pbSizeVarint(v) }

// pbMagic is the prefix of kube-apiserver's protobuf encoding.
const pbMagic = "k8s\x00"

// pbTypeMetaSize is the size of runtime.TypeMeta{apiVersion, kind} without
// its own key and length.
func pbTypeMetaSize(apiVersion, kind string) int {
	return pbSizeBytesField(len(apiVersion)) + pbSizeBytesField(len(kind))
}

// pbEnvelopeSize is the size of "k8s\x00" + runtime.Unknown whose raw field
// holds rawSize bytes.
func pbEnvelopeSize(apiVersion, kind string, rawSize int) int {
	return len(pbMagic) + pbSizeBytesField(pbTypeMetaSize(apiVersion, kind)) + pbSizeBytesField(rawSize) + len(pbEnvelopeTail)
}

// pbAppendEnvelopeHead appends "k8s\x00" + the runtime.Unknown fields before
// its raw bytes; the caller appends rawSize bytes and then pbEnvelopeTail.
func pbAppendEnvelopeHead(dst []byte, apiVersion, kind string, rawSize int) []byte {
	dst = append(dst, pbMagic...)
	dst = pbAppendBytesHeader(dst, 1, pbTypeMetaSize(apiVersion, kind))
	dst = pbAppendString(dst, 1, apiVersion)
	dst = pbAppendString(dst, 2, kind)
	return pbAppendBytesHeader(dst, 2, rawSize)
}

// pbEnvelopeTail is runtime.Unknown's contentEncoding and contentType, both
// empty, which kube-apiserver writes after raw.
const pbEnvelopeTail = "\x1a\x00\x22\x00"

// pbAppendShifted makes room for a header of hdrLen bytes in front of the
// body dst[start:] that was just appended, and returns the grown slice. The
// caller writes the header into dst[start:start+hdrLen].
func pbAppendShifted(dst []byte, start, hdrLen int) []byte {
	n := len(dst) - start
	for i := 0; i < hdrLen; i++ {
		dst = append(dst, 0)
	}
	copy(dst[start+hdrLen:], dst[start:start+n])
	return dst
}
