package codec

import (
	"strconv"

	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// Status is a metav1.Status error as kube-apiserver writes it. The zero value
// is not useful; Code is the HTTP status code.
type Status struct {
	Code    int32
	Reason  string // metav1.StatusReason, e.g. "NotFound", "Expired"
	Message string
	Details *StatusDetails
	// Continue is metadata.continue: the token kube-apiserver offers with
	// the 410 of a compacted continue token (resume at the latest
	// revision); "" omits it.
	Continue string
}

// StatusDetails is metav1.StatusDetails.
type StatusDetails struct {
	Name, Group, Kind string
	Causes            []StatusCause
	RetryAfterSeconds int32
}

// StatusCause is metav1.StatusCause; Type is written as "reason".
type StatusCause struct{ Type, Message, Field string }

// statusValue is metav1.Status.status: "Success" for 2xx codes, else "Failure".
func (st *Status) statusValue() string {
	if st.Code >= 200 && st.Code < 300 {
		return "Success"
	}
	return "Failure"
}

// AppendJSONStatus appends st as kube-apiserver's JSON:
// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
// "message":...,"reason":...,"details":{...},"code":N}, empty fields omitted
// as encoding/json omits them.
func AppendJSONStatus(dst []byte, st *Status) []byte {
	dst = append(dst, `{"kind":"Status","apiVersion":"v1","metadata":`...)
	dst = appendListMetaJSON(dst, ListMeta{Continue: st.Continue})
	dst = append(dst, `,"status":`...)
	dst = appendJSONQuote(dst, st.statusValue())
	if st.Message != "" {
		dst = append(dst, `,"message":`...)
		dst = appendJSONQuote(dst, st.Message)
	}
	if st.Reason != "" {
		dst = append(dst, `,"reason":`...)
		dst = appendJSONQuote(dst, st.Reason)
	}
	if d := st.Details; d != nil {
		dst = append(dst, `,"details":{`...)
		first := true
		field := func(name string) {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, '"')
			dst = append(dst, name...)
			dst = append(dst, `":`...)
		}
		if d.Name != "" {
			field("name")
			dst = appendJSONQuote(dst, d.Name)
		}
		if d.Group != "" {
			field("group")
			dst = appendJSONQuote(dst, d.Group)
		}
		if d.Kind != "" {
			field("kind")
			dst = appendJSONQuote(dst, d.Kind)
		}
		if len(d.Causes) > 0 {
			field("causes")
			dst = append(dst, '[')
			for i, c := range d.Causes {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = appendStatusCauseJSON(dst, c)
			}
			dst = append(dst, ']')
		}
		if d.RetryAfterSeconds != 0 {
			field("retryAfterSeconds")
			dst = strconv.AppendInt(dst, int64(d.RetryAfterSeconds), 10)
		}
		dst = append(dst, '}')
	}
	if st.Code != 0 {
		dst = append(dst, `,"code":`...)
		dst = strconv.AppendInt(dst, int64(st.Code), 10)
	}
	return append(dst, '}')
}

func appendStatusCauseJSON(dst []byte, c StatusCause) []byte {
	dst = append(dst, '{')
	sep := false
	kv := func(k, v string) {
		if v == "" {
			return
		}
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, '"')
		dst = append(dst, k...)
		dst = append(dst, `":`...)
		dst = appendJSONQuote(dst, v)
	}
	kv("reason", c.Type)
	kv("message", c.Message)
	kv("field", c.Field)
	return append(dst, '}')
}

// AppendProtobufStatus appends st as kube-apiserver's protobuf: "k8s\x00" +
// runtime.Unknown{typeMeta{v1, Status}, raw=metav1.Status}.
func AppendProtobufStatus(dst []byte, st *Status) []byte {
	n := statusProtoSize(st)
	dst = pbAppendEnvelopeHead(dst, "v1", "Status", n)
	dst = appendStatusProto(dst, st)
	return append(dst, pbEnvelopeTail...)
}

// statusProtoSize is len(appendStatusProto(nil, st)).
func statusProtoSize(st *Status) int {
	n := pbSizeBytesField(listMetaProtoSize(ListMeta{Continue: st.Continue})) +
		pbSizeBytesField(len(st.statusValue())) +
		pbSizeBytesField(len(st.Message)) +
		pbSizeBytesField(len(st.Reason))
	if st.Details != nil {
		n += pbSizeBytesField(statusDetailsProtoSize(st.Details))
	}
	return n + pbSizeVarintField(uint64(int64(st.Code)))
}

func statusDetailsProtoSize(d *StatusDetails) int {
	n := pbSizeBytesField(len(d.Name)) + pbSizeBytesField(len(d.Group)) + pbSizeBytesField(len(d.Kind))
	for _, c := range d.Causes {
		n += pbSizeBytesField(statusCauseProtoSize(c))
	}
	// retryAfterSeconds (5) and uid (6, empty) are always written.
	return n + pbSizeVarintField(uint64(int64(d.RetryAfterSeconds))) + pbSizeBytesField(0)
}

func statusCauseProtoSize(c StatusCause) int {
	return pbSizeBytesField(len(c.Type)) + pbSizeBytesField(len(c.Message)) + pbSizeBytesField(len(c.Field))
}

// appendStatusProto appends the metav1.Status message in the field order and
// with the always-written fields of its gogo-generated Marshal.
func appendStatusProto(dst []byte, st *Status) []byte {
	dst = pbAppendBytesHeader(dst, 1, listMetaProtoSize(ListMeta{Continue: st.Continue}))
	dst = appendListMetaProto(dst, ListMeta{Continue: st.Continue})
	dst = pbAppendString(dst, 2, st.statusValue())
	dst = pbAppendString(dst, 3, st.Message)
	dst = pbAppendString(dst, 4, st.Reason)
	if d := st.Details; d != nil {
		dst = pbAppendBytesHeader(dst, 5, statusDetailsProtoSize(d))
		dst = pbAppendString(dst, 1, d.Name)
		dst = pbAppendString(dst, 2, d.Group)
		dst = pbAppendString(dst, 3, d.Kind)
		for _, c := range d.Causes {
			dst = pbAppendBytesHeader(dst, 4, statusCauseProtoSize(c))
			dst = pbAppendString(dst, 1, c.Type)
			dst = pbAppendString(dst, 2, c.Message)
			dst = pbAppendString(dst, 3, c.Field)
		}
		dst = pbAppendVarintField(dst, 5, uint64(int64(d.RetryAfterSeconds)))
		dst = pbAppendString(dst, 6, "")
	}
	return pbAppendVarintField(dst, 6, uint64(int64(st.Code)))
}

// appendJSONQuote appends s as a JSON string exactly as encoding/json
// writes it (appendJSONString of the transcoder).
func appendJSONQuote(dst []byte, s string) []byte {
	return appendJSONString(dst, bytesutil.ToUnsafeBytes(s))
}
