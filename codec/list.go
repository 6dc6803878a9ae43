package codec

import "strconv"

// ListMeta is the metadata of a list (metav1.ListMeta).
type ListMeta struct {
	// ResourceVersion is the revision the list was read at; 0 omits it.
	ResourceVersion int64
	// Continue is the continue token of the next page; "" omits it.
	Continue string
	// RemainingItemCount is the number of items after this page; nil omits it.
	RemainingItemCount *int64
}

// appendListMetaJSON appends m as encoding/json writes metav1.ListMeta:
// {"resourceVersion":"N","continue":"...","remainingItemCount":N}, empty
// fields omitted.
func appendListMetaJSON(dst []byte, m ListMeta) []byte {
	dst = append(dst, '{')
	sep := false
	if m.ResourceVersion != 0 {
		dst = append(dst, `"resourceVersion":"`...)
		dst = strconv.AppendInt(dst, m.ResourceVersion, 10)
		dst = append(dst, '"')
		sep = true
	}
	if m.Continue != "" {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"continue":`...)
		dst = appendJSONQuote(dst, m.Continue)
		sep = true
	}
	if m.RemainingItemCount != nil {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"remainingItemCount":`...)
		dst = strconv.AppendInt(dst, *m.RemainingItemCount, 10)
	}
	return append(dst, '}')
}

// AppendJSONListHead appends the start of a JSON list up to and including
// the '[' of its items: {"kind":"<listKind>","apiVersion":"<apiVersion>",
// "metadata":{...},"items":[
//
// A list is head, then items separated by AppendJSONListSep (each written
// with Schema.AppendJSON, OmitTypeMeta for built-in kinds, kept for custom
// resources), then AppendJSONListTail. The output does not depend on how the
// caller splits the items into pages or buffers.
func AppendJSONListHead(dst []byte, apiVersion, listKind string, m ListMeta) []byte {
	dst = append(dst, `{"kind":`...)
	dst = appendJSONQuote(dst, listKind)
	dst = append(dst, `,"apiVersion":`...)
	dst = appendJSONQuote(dst, apiVersion)
	dst = append(dst, `,"metadata":`...)
	dst = appendListMetaJSON(dst, m)
	return append(dst, `,"items":[`...)
}

// AppendJSONUnstructuredListHead appends the start of a custom resource
// list as kube-apiserver writes it (apiextensions-apiserver encodes an
// UnstructuredList: json.Marshal of a map, sorted keys) up to its first
// item: {"apiVersion":"...","items":[
// The list's kind and metadata come after the items
// (AppendJSONUnstructuredListTail).
func AppendJSONUnstructuredListHead(dst []byte, apiVersion string) []byte {
	dst = append(dst, `{"apiVersion":`...)
	dst = appendJSONQuote(dst, apiVersion)
	return append(dst, `,"items":[`...)
}

// AppendJSONUnstructuredListTail appends the end of a custom resource
// list: ],"kind":"...","metadata":{"continue":"...",
// "remainingItemCount":N,"resourceVersion":"N"}} with continue always
// written (the handler sets it, "" on the last page) and the keys sorted.
func AppendJSONUnstructuredListTail(dst []byte, listKind string, m ListMeta) []byte {
	dst = append(dst, `],"kind":`...)
	dst = appendJSONQuote(dst, listKind)
	dst = append(dst, `,"metadata":{"continue":`...)
	dst = appendJSONQuote(dst, m.Continue)
	if m.RemainingItemCount != nil {
		dst = append(dst, `,"remainingItemCount":`...)
		dst = strconv.AppendInt(dst, *m.RemainingItemCount, 10)
	}
	if m.ResourceVersion != 0 {
		dst = append(dst, `,"resourceVersion":"`...)
		dst = strconv.AppendInt(dst, m.ResourceVersion, 10)
		dst = append(dst, '"')
	}
	return append(dst, "}}"...)
}

// AppendJSONListSep appends the separator written between two items.
func AppendJSONListSep(dst []byte) []byte { return append(dst, ',') }

// AppendJSONListTail appends the end of a JSON list.
func AppendJSONListTail(dst []byte) []byte { return append(dst, "]}"...) }

// listMetaProtoSize is len(appendListMetaProto(nil, m)).
func listMetaProtoSize(m ListMeta) int {
	n := pbSizeBytesField(0) + // selfLink
		pbSizeBytesField(rvLen(m.ResourceVersion)) +
		pbSizeBytesField(len(m.Continue))
	if m.RemainingItemCount != nil {
		n += pbSizeVarintField(uint64(*m.RemainingItemCount))
	}
	return n
}

// rvLen is the length of rv in decimal, 0 for rv == 0 (omitted).
func rvLen(rv int64) int {
	if rv == 0 {
		return 0
	}
	return decimalLen(rv)
}

// appendRV appends rv in decimal, nothing for rv == 0.
func appendRV(dst []byte, rv int64) []byte {
	if rv == 0 {
		return dst
	}
	return strconv.AppendInt(dst, rv, 10)
}

// appendListMetaProto appends the metav1.ListMeta message as its
// gogo-generated Marshal does: selfLink, resourceVersion and continue always,
// remainingItemCount when set.
func appendListMetaProto(dst []byte, m ListMeta) []byte {
	dst = pbAppendString(dst, 1, "")
	dst = pbAppendBytesHeader(dst, 2, rvLen(m.ResourceVersion))
	dst = appendRV(dst, m.ResourceVersion)
	dst = pbAppendString(dst, 3, m.Continue)
	if m.RemainingItemCount != nil {
		dst = pbAppendVarintField(dst, 4, uint64(*m.RemainingItemCount))
	}
	return dst
}

// ProtobufListItemSize is the number of bytes AppendProtobufListItem writes
// for obj; sum it over the items to get AppendProtobufListHead's itemsSize.
func ProtobufListItemSize(obj Object, rv int64) int {
	return pbSizeBytesField(ProtobufSize(obj, rv))
}

// AppendProtobufListHead appends "k8s\x00" + runtime.Unknown{typeMeta{
// apiVersion, listKind}, raw=<list message>} up to the list's items: the
// raw field's length is computed from itemsSize, so the caller must know the
// sizes of all items of the response before writing the first byte. Then
// come the items (AppendProtobufListItem), then AppendProtobufListTail.
func AppendProtobufListHead(dst []byte, apiVersion, listKind string, m ListMeta, itemsSize int) []byte {
	lm := listMetaProtoSize(m)
	dst = pbAppendEnvelopeHead(dst, apiVersion, listKind, pbSizeBytesField(lm)+itemsSize)
	dst = pbAppendBytesHeader(dst, 1, lm)
	return appendListMetaProto(dst, m)
}

// AppendProtobufListItem appends obj with resourceVersion rv as one item
// (field 2) of a protobuf list. obj must be FormatProtobuf (a JSON-stored
// object would be written as an empty item).
func AppendProtobufListItem(dst []byte, obj Object, rv int64) []byte {
	dst = pbAppendBytesHeader(dst, 2, ProtobufSize(obj, rv))
	return AppendProtobuf(dst, obj, rv)
}

// AppendProtobufListTail appends the runtime.Unknown fields kube-apiserver
// writes after the list (empty contentEncoding and contentType). Decoders
// accept the list without them; with them the bytes equal kube-apiserver's.
func AppendProtobufListTail(dst []byte) []byte { return append(dst, pbEnvelopeTail...) }
