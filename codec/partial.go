package codec

import (
	"encoding/json"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PartialObjectMetadata(List) of meta.k8s.io/v1, as the metadata informer
// (k8s.io/client-go/metadata) asks for with
// Accept: application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1
// (or application/json;as=...).

const (
	partialAPIVersion = "meta.k8s.io/v1"
	partialKind       = "PartialObjectMetadata"
	partialListKind   = "PartialObjectMetadataList"
)

// AppendPartialJSON appends obj as a meta.k8s.io/v1 PartialObjectMetadata:
// {"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}.
// Items of a PartialObjectMetadataList are written the same way.
// On error dst is returned unchanged.
func (s *Schema) AppendPartialJSON(dst []byte, obj Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"kind":"`+partialKind+`","apiVersion":"`+partialAPIVersion+`","metadata":`...)
	dst, err := s.AppendJSONMetadata(dst, obj, rv)
	if err != nil {
		return dst[:start], err
	}
	return append(dst, '}'), nil
}

// AppendPartialJSONListHead appends the head of a JSON
// PartialObjectMetadataList; then come AppendPartialJSON items separated by
// AppendJSONListSep, then AppendJSONListTail.
func AppendPartialJSONListHead(dst []byte, m ListMeta) []byte {
	return AppendJSONListHead(dst, partialAPIVersion, partialListKind, m)
}

// metaScratch holds the ObjectMeta message while its size is measured.
var metaScratch = sync.Pool{New: func() any { return new([]byte) }}

// partialMetaSize is the size of obj's ObjectMeta message with rv set.
func partialMetaSize(obj Object, rv int64) (int, error) {
	bp := metaScratch.Get().(*[]byte)
	defer metaScratch.Put(bp)
	b, err := appendProtobufMetadataAny((*bp)[:0], obj, rv)
	*bp = b[:0]
	if err != nil {
		return 0, err
	}
	return len(b), nil
}

// appendPartialMessage appends the PartialObjectMetadata message
// {1: ObjectMeta}, preceded by the protobuf envelope when envelope is true
// and else by the key and length of a list item (field 2). The ObjectMeta
// is written first and moved once its size is known.
func appendPartialMessage(dst []byte, obj Object, rv int64, envelope bool) ([]byte, error) {
	start := len(dst)
	dst, err := appendProtobufMetadataAny(dst, obj, rv)
	if err != nil {
		return dst[:start], fmt.Errorf("cannot write metadata of %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	n := len(dst) - start
	var hdr [64]byte
	h := hdr[:0]
	if envelope {
		h = pbAppendEnvelopeHead(h, partialAPIVersion, partialKind, pbSizeBytesField(n))
	} else {
		h = pbAppendBytesHeader(h, 2, pbSizeBytesField(n))
	}
	h = pbAppendBytesHeader(h, 1, n)
	dst = pbAppendShifted(dst, start, len(h))
	copy(dst[start:], h)
	return dst, nil
}

// AppendPartialProtobuf appends obj as a protobuf PartialObjectMetadata:
// "k8s\x00" + runtime.Unknown{typeMeta{meta.k8s.io/v1, PartialObjectMetadata},
// raw={1: ObjectMeta}}. JSON-stored objects (custom resources) work too,
// on a slower path. On error dst is returned unchanged.
func AppendPartialProtobuf(dst []byte, obj Object, rv int64) ([]byte, error) {
	dst, err := appendPartialMessage(dst, obj, rv, true)
	if err != nil {
		return dst, err
	}
	return append(dst, pbEnvelopeTail...), nil
}

// PartialProtobufListItemSize is the number of bytes
// AppendPartialProtobufListItem writes for obj.
func PartialProtobufListItemSize(obj Object, rv int64) (int, error) {
	n, err := partialMetaSize(obj, rv)
	if err != nil {
		return 0, err
	}
	return pbSizeBytesField(pbSizeBytesField(n)), nil
}

// AppendPartialProtobufListHead appends the head of a protobuf
// PartialObjectMetadataList whose items take itemsSize bytes (the sum of
// PartialProtobufListItemSize); then come AppendPartialProtobufListItem
// items, then AppendProtobufListTail.
func AppendPartialProtobufListHead(dst []byte, m ListMeta, itemsSize int) []byte {
	return AppendProtobufListHead(dst, partialAPIVersion, partialListKind, m, itemsSize)
}

// AppendPartialProtobufListItem appends obj as one item (field 2) of a
// protobuf PartialObjectMetadataList. On error dst is returned unchanged.
func AppendPartialProtobufListItem(dst []byte, obj Object, rv int64) ([]byte, error) {
	return appendPartialMessage(dst, obj, rv, false)
}

// appendProtobufMetadataAny appends obj's ObjectMeta message with
// resourceVersion rv: the stored bytes of a protobuf object
// (AppendProtobufMetadata), or, for a JSON-stored object (custom resources,
// --storage-media-type=application/json), its metadata decoded into a
// metav1.ObjectMeta and marshalled. The JSON path allocates; the metadata
// informers of custom resources ask for protobuf, so it must work.
func appendProtobufMetadataAny(dst []byte, obj Object, rv int64) ([]byte, error) {
	if obj.Format != FormatJSON {
		return AppendProtobufMetadata(dst, obj, rv)
	}
	js, err := appendJSONMetadataPassthrough(nil, obj.Raw, rv)
	if err != nil {
		return dst, err
	}
	var om metav1.ObjectMeta
	if err := json.Unmarshal(js, &om); err != nil {
		return dst, fmt.Errorf("cannot decode metadata: %w", err)
	}
	n := om.Size()
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	if _, err := om.MarshalToSizedBuffer(dst[start:]); err != nil {
		return dst[:start], fmt.Errorf("cannot encode metadata: %w", err)
	}
	return dst, nil
}

// AppendPartialJSONWatchEvent appends a JSON watch frame whose object is
// obj's PartialObjectMetadata, for watches with
// Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1
// (metadata informers). Bookmarks of such a watch are
// AppendJSONWatchBookmark(dst, "meta.k8s.io/v1", "PartialObjectMetadata", ...).
// On error dst is returned unchanged.
func (s *Schema) AppendPartialJSONWatchEvent(dst []byte, t EventType, obj Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst = appendJSONWatchEventHead(dst, t)
	dst, err := s.AppendPartialJSON(dst, obj, rv)
	if err != nil {
		return dst[:start], err
	}
	return append(dst, "}\n"...), nil
}

// AppendPartialProtobufWatchEvent appends a protobuf watch frame whose
// object is obj's PartialObjectMetadata ("k8s\x00"-framed), for watches with
// Accept: application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1.
// Bookmarks are AppendProtobufWatchBookmark(dst, "meta.k8s.io/v1",
// "PartialObjectMetadata", ...). On error dst is returned unchanged.
func AppendPartialProtobufWatchEvent(dst []byte, t EventType, obj Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst, err := AppendPartialProtobuf(dst, obj, rv)
	if err != nil {
		return dst, err
	}
	var hdr [32]byte
	h := appendProtobufWatchEventHead(hdr[:0], t, len(dst)-start)
	dst = pbAppendShifted(dst, start, len(h))
	copy(dst[start:], h)
	return dst, nil
}
