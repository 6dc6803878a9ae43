package codec

import "encoding/binary"

// EventType is the type of a watch event.
type EventType string

// Watch event types, as metav1.WatchEvent.Type.
const (
	EventAdded    EventType = "ADDED"
	EventModified EventType = "MODIFIED"
	EventDeleted  EventType = "DELETED"
	EventBookmark EventType = "BOOKMARK"
	EventError    EventType = "ERROR"
)

// InitialEventsEndAnnotation marks the bookmark that ends the initial events
// of a watch with sendInitialEvents=true.
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

// AppendJSONWatchEvent appends one JSON watch frame:
// {"type":"<t>","object":<obj as Schema.AppendJSON writes it>}\n
// On error dst is returned unchanged.
func (s *Schema) AppendJSONWatchEvent(dst []byte, t EventType, obj Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst = appendJSONWatchEventHead(dst, t)
	dst, err := s.AppendJSON(dst, obj, rv, JSONOptions{})
	if err != nil {
		return dst[:start], err
	}
	return append(dst, "}\n"...), nil
}

func appendJSONWatchEventHead(dst []byte, t EventType) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendJSONQuote(dst, string(t))
	return append(dst, `,"object":`...)
}

// AppendProtobufWatchEvent appends one protobuf watch frame: a 4-byte
// big-endian length, then metav1.WatchEvent{type, object: RawExtension{raw:
// AppendProtobufEnvelope(obj, rv)}}. obj must be FormatProtobuf: a
// JSON-stored object would give an empty object (the caller serves those
// watches as JSON, as kube-apiserver serves custom resources).
func AppendProtobufWatchEvent(dst []byte, t EventType, obj Object, rv int64) []byte {
	objSize := ProtobufEnvelopeSize(obj, rv)
	dst = appendProtobufWatchEventHead(dst, t, objSize)
	return AppendProtobufEnvelope(dst, obj, rv)
}

// appendProtobufWatchEventHead appends the frame length and the WatchEvent
// fields up to the objSize bytes of the "k8s\x00"-framed object.
func appendProtobufWatchEventHead(dst []byte, t EventType, objSize int) []byte {
	ext := pbSizeBytesField(objSize) // RawExtension{raw=1}
	n := pbSizeBytesField(len(t)) + pbSizeBytesField(ext)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = pbAppendString(dst, 1, string(t))
	dst = pbAppendBytesHeader(dst, 2, ext)
	return pbAppendBytesHeader(dst, 1, objSize)
}

// AppendJSONWatchBookmark appends a JSON BOOKMARK frame whose object is a
// <kind> carrying only metadata.resourceVersion (and the
// k8s.io/initial-events-end: "true" annotation when initialEventsEnd).
func AppendJSONWatchBookmark(dst []byte, apiVersion, kind string, rv int64, initialEventsEnd bool) []byte {
	dst = appendJSONWatchEventHead(dst, EventBookmark)
	dst = append(dst, `{"kind":`...)
	dst = appendJSONQuote(dst, kind)
	dst = append(dst, `,"apiVersion":`...)
	dst = appendJSONQuote(dst, apiVersion)
	dst = append(dst, `,"metadata":{"resourceVersion":"`...)
	dst = appendRV(dst, rv)
	dst = append(dst, '"')
	if initialEventsEnd {
		dst = append(dst, `,"annotations":{"`+InitialEventsEndAnnotation+`":"true"}`...)
	}
	return append(dst, "}}}\n"...)
}

// bookmarkMetaSize is the size of the ObjectMeta of a bookmark object.
func bookmarkMetaSize(rv int64, initialEventsEnd bool) int {
	n := pbSizeBytesField(rvLen(rv))
	if initialEventsEnd {
		n += pbSizeBytesField(bookmarkAnnotationSize)
	}
	return n
}

// bookmarkAnnotationSize is the size of the annotations map entry
// {1: "k8s.io/initial-events-end", 2: "true"}.
var bookmarkAnnotationSize = pbSizeBytesField(len(InitialEventsEndAnnotation)) + pbSizeBytesField(len("true"))

// AppendProtobufWatchBookmark appends a protobuf BOOKMARK frame, see
// AppendJSONWatchBookmark.
func AppendProtobufWatchBookmark(dst []byte, apiVersion, kind string, rv int64, initialEventsEnd bool) []byte {
	meta := bookmarkMetaSize(rv, initialEventsEnd)
	raw := pbSizeBytesField(meta) // the object's message: {1: ObjectMeta}
	dst = appendProtobufWatchEventHead(dst, EventBookmark, pbEnvelopeSize(apiVersion, kind, raw))
	dst = pbAppendEnvelopeHead(dst, apiVersion, kind, raw)
	dst = pbAppendBytesHeader(dst, 1, meta)
	dst = pbAppendBytesHeader(dst, 6, rvLen(rv))
	dst = appendRV(dst, rv)
	if initialEventsEnd {
		dst = pbAppendBytesHeader(dst, 12, bookmarkAnnotationSize)
		dst = pbAppendString(dst, 1, InitialEventsEndAnnotation)
		dst = pbAppendString(dst, 2, "true")
	}
	return append(dst, pbEnvelopeTail...)
}

// AppendJSONWatchStatus appends a JSON ERROR frame whose object is st.
func AppendJSONWatchStatus(dst []byte, st *Status) []byte {
	dst = appendJSONWatchEventHead(dst, EventError)
	dst = AppendJSONStatus(dst, st)
	return append(dst, "}\n"...)
}

// AppendProtobufWatchStatus appends a protobuf ERROR frame whose object is st.
func AppendProtobufWatchStatus(dst []byte, st *Status) []byte {
	raw := statusProtoSize(st)
	dst = appendProtobufWatchEventHead(dst, EventError, pbEnvelopeSize("v1", "Status", raw))
	return AppendProtobufStatus(dst, st)
}
