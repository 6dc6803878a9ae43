package codec

// ItemSizes is what the sizes of an object's protobuf list items depend on
// besides its resourceVersion. A LIST in protobuf must know the size of
// every item before its first byte; with ItemSizes recorded when a value
// was decrypted (the watch cache does, for the values it holds encrypted)
// that size pass needs no second decryption. The zero ItemSizes is not
// valid (Format 0).
type ItemSizes struct {
	Format Format
	// Raw is len(Object.Raw).
	Raw int
	// Meta is the size of the object's ObjectMeta message written with
	// resourceVersion 1 (AppendProtobufMetadata, or the JSON path of a
	// PartialObjectMetadata), or -1 when it cannot be written.
	Meta int
}

// SizesOf returns obj's ItemSizes. For an object stored as JSON it decodes
// the metadata (the slow path of AppendPartialProtobuf).
func SizesOf(obj Object) ItemSizes {
	z := ItemSizes{Format: obj.Format, Raw: len(obj.Raw), Meta: -1}
	if obj.Format == FormatProtobuf {
		if n, err := protobufMetaSize(obj.Raw); err == nil {
			z.Meta = n + rvFieldSize(1)
		}
		return z
	}
	if n, err := partialMetaSize(obj, 1); err == nil {
		z.Meta = n
	}
	return z
}

// protobufMetaSize is the size of the merged field-1 occurrences of a
// protobuf object (AppendProtobufMetadata at rv 0), without copying them.
func protobufMetaSize(raw []byte) (int, error) {
	n := 0
	for i := 0; i < len(raw); {
		o, next, err := readField(raw, i)
		if err != nil {
			return 0, err
		}
		if o.num == 1 {
			if o.wt != 2 {
				return 0, corrupt(raw, i, "metadata has wrong wire type")
			}
			n += len(o.p)
		}
		i = next
	}
	return n, nil
}

// rvFieldSize is the size of ObjectMeta's resourceVersion field (6)
// holding rv in decimal.
func rvFieldSize(rv int64) int {
	d := decimalLen(rv)
	return 1 + varintSize(uint64(d)) + d
}

// ProtobufListItemSize is ProtobufListItemSize(obj, rv) of the object z
// was taken from; ok is false for an object not stored as protobuf (the
// protobuf encoder refuses it).
func (z ItemSizes) ProtobufListItemSize(rv int64) (n int, ok bool) {
	if z.Format != FormatProtobuf {
		return 0, false
	}
	return pbSizeBytesField(z.Raw + rvPatchSize(rv)), true
}

// PartialProtobufListItemSize is PartialProtobufListItemSize(obj, rv) of
// the object z was taken from, for rv > 0; ok is false when it cannot be
// computed (the caller then asks the object).
func (z ItemSizes) PartialProtobufListItemSize(rv int64) (n int, ok bool) {
	if z.Meta < 0 || rv <= 0 || (z.Format != FormatProtobuf && z.Format != FormatJSON) {
		return 0, false
	}
	meta := z.Meta - rvFieldSize(1) + rvFieldSize(rv)
	return pbSizeBytesField(pbSizeBytesField(meta)), true
}
