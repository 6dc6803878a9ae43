package codec

import "fmt"

// AppendJSONPassthrough copies a stored JSON object with
// metadata.resourceVersion inserted or replaced.
func AppendJSONPassthrough(dst, raw []byte, rv int64) ([]byte, error) {
	return dst, fmt.Errorf("codec: not implemented")
}

// AppendProtobuf appends obj.Raw with resourceVersion set to rv.
func AppendProtobuf(dst []byte, obj Object, rv int64) []byte { return dst }

// ProtobufSize is len(AppendProtobuf(nil, obj, rv)).
func ProtobufSize(obj Object, rv int64) int { return 0 }

// AppendProtobufEnvelope appends "k8s\x00" + runtime.Unknown around AppendProtobuf.
func AppendProtobufEnvelope(dst []byte, obj Object, rv int64) []byte { return dst }

// ProtobufEnvelopeSize is len(AppendProtobufEnvelope(nil, obj, rv)).
func ProtobufEnvelopeSize(obj Object, rv int64) int { return 0 }

// AppendProtobufMetadata appends the ObjectMeta message with resourceVersion set.
func AppendProtobufMetadata(dst []byte, obj Object, rv int64) ([]byte, error) {
	return dst, fmt.Errorf("codec: not implemented")
}
