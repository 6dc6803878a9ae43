package codec

import (
	"fmt"
	"strconv"

	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// JSON passthrough: the stored object is copied byte for byte except for
// metadata.resourceVersion. Only the top-level keys up to "metadata" and
// the keys of the metadata object are scanned; the rest is copied without
// being looked at.

// AppendJSONPassthrough copies a stored JSON object with
// metadata.resourceVersion set to rv (rv == 0: copied as stored). An
// existing resourceVersion is replaced; otherwise it is inserted where
// kube-apiserver would write it: in sorted key position when the metadata
// keys are sorted (unstructured objects, custom resources), else after uid
// (struct order of built-in types). On error dst is returned unchanged.
func AppendJSONPassthrough(dst, raw []byte, rv int64) ([]byte, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return dst, corrupt(raw, i, "JSON value is not an object")
	}
	if rv == 0 {
		return append(dst, raw...), nil
	}
	mv, ins, closing, err := findTopKey(raw, i, "metadata")
	if err != nil {
		return dst, err
	}
	if mv.start < 0 {
		// no metadata: insert one
		at := ins
		if at < 0 {
			at = closing
		}
		dst = append(dst, raw[:at]...)
		if ins < 0 && !emptyObjectBefore(raw, at) {
			dst = append(dst, ',')
		}
		dst = append(dst, `"metadata":{"resourceVersion":"`...)
		dst = strconv.AppendInt(dst, rv, 10)
		dst = append(dst, `"}`...)
		if ins >= 0 {
			dst = append(dst, ',')
		}
		return append(dst, raw[at:]...), nil
	}
	mark := len(dst)
	dst = append(dst, raw[:mv.start]...)
	dst, err = appendMetaPatched(dst, raw[mv.start:mv.end], rv)
	if err != nil {
		return dst[:mark], err
	}
	return append(dst, raw[mv.end:]...), nil
}

// stripTypeMeta removes the top-level "kind" and "apiVersion" members that
// come before "metadata" from the JSON object o, in place, and returns the
// shortened slice. Members after "metadata" are not looked at.
func stripTypeMeta(o []byte) []byte {
	i := skipSpace(o, 0)
	if i >= len(o) || o[i] != '{' {
		return o
	}
	i++
	prevEnd := i // end of the previous member (before its comma)
	for {
		i = skipSpace(o, i)
		if i >= len(o) || o[i] != '"' {
			return o
		}
		ks := i
		ke, err := skipString(o, i)
		if err != nil {
			return o
		}
		i = skipSpace(o, ke)
		if i >= len(o) || o[i] != ':' {
			return o
		}
		ve, err := skipValue(o, skipSpace(o, i+1))
		if err != nil {
			return o
		}
		k := o[ks+1 : ke-1]
		j := skipSpace(o, ve)
		if j >= len(o) {
			return o
		}
		last := o[j] != ','
		if keyEquals(k, "kind") || keyEquals(k, "apiVersion") {
			var from, to int
			if !last {
				from, to = ks, skipSpace(o, j+1)
			} else {
				from, to = prevEnd, ve
			}
			o = append(o[:from], o[to:]...)
			i = from
			if last {
				return o
			}
			continue
		}
		if keyEquals(k, "metadata") || last {
			return o
		}
		prevEnd = ve
		i = j + 1
	}
}

// appendJSONMetadataPassthrough appends the metadata object of a stored
// JSON object with resourceVersion patched.
func appendJSONMetadataPassthrough(dst, raw []byte, rv int64) ([]byte, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return dst, corrupt(raw, i, "JSON value is not an object")
	}
	mv, _, _, err := findTopKey(raw, i, "metadata")
	if err != nil {
		return dst, err
	}
	if mv.start < 0 {
		if rv == 0 {
			return append(dst, "{}"...), nil
		}
		dst = append(dst, `{"resourceVersion":"`...)
		dst = strconv.AppendInt(dst, rv, 10)
		return append(dst, `"}`...), nil
	}
	if rv == 0 {
		if mv.end-mv.start == 0 || raw[mv.start] != '{' {
			return dst, corrupt(raw, mv.start, "metadata is not an object")
		}
		return append(dst, raw[mv.start:mv.end]...), nil
	}
	return appendMetaPatched(dst, raw[mv.start:mv.end], rv)
}

// metaAfterRV are the ObjectMeta JSON keys that follow resourceVersion in
// struct order.
var metaAfterRV = []string{"generation", "creationTimestamp", "deletionTimestamp",
	"deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences",
	"finalizers", "managedFields"}

// appendMetaPatched appends the metadata object m with resourceVersion set.
func appendMetaPatched(dst, m []byte, rv int64) ([]byte, error) {
	if len(m) == 0 || m[0] != '{' {
		return dst, corrupt(m, 0, "metadata is not an object")
	}
	sortedIns, structIns := -1, -1
	sorted := true
	var prev []byte
	i := 1
	closing := -1
	for closing < 0 {
		i = skipSpace(m, i)
		if i >= len(m) {
			return dst, corrupt(m, i, "truncated metadata object")
		}
		if m[i] == '}' {
			closing = i
			break
		}
		if m[i] == ',' {
			i = skipSpace(m, i+1)
		}
		ks, ke, vs, ve, err := metaMember(m, i)
		if err != nil {
			return dst, err
		}
		k := m[ks+1 : ke-1]
		if keyEquals(k, "resourceVersion") {
			dst = append(dst, m[:vs]...)
			dst = append(dst, '"')
			dst = strconv.AppendInt(dst, rv, 10)
			dst = append(dst, '"')
			return append(dst, m[ve:]...), nil
		}
		if prev != nil && compareKeys(prev, k) > 0 {
			sorted = false
		}
		prev = k
		if sortedIns < 0 && compareKeys(k, bytesutil.ToUnsafeBytes("resourceVersion")) > 0 {
			sortedIns = ks
		}
		if structIns < 0 {
			for _, a := range metaAfterRV {
				if string(k) == a {
					structIns = ks
					break
				}
			}
		}
		i = skipSpace(m, ve)
		if i < len(m) && m[i] != ',' && m[i] != '}' {
			return dst, corrupt(m, i, "expected ',' or '}' in metadata")
		}
	}
	at := structIns
	if sorted {
		at = sortedIns
	}
	return insertRV(dst, m, at, closing, rv), nil
}

// metaMember reads the member of the metadata object m at i: its key,
// quotes included, at m[ks:ke] and its value at m[vs:ve].
func metaMember(m []byte, i int) (ks, ke, vs, ve int, err error) {
	if i >= len(m) || m[i] != '"' {
		return 0, 0, 0, 0, corrupt(m, i, "expected a JSON object key in metadata")
	}
	ks = i
	if ke, err = skipString(m, i); err != nil {
		return 0, 0, 0, 0, err
	}
	i = skipSpace(m, ke)
	if i >= len(m) || m[i] != ':' {
		return 0, 0, 0, 0, corrupt(m, i, "expected ':' in metadata")
	}
	vs = skipSpace(m, i+1)
	if ve, err = skipValue(m, vs); err != nil {
		return 0, 0, 0, 0, err
	}
	return ks, ke, vs, ve, nil
}

// insertRV appends the metadata object m with a resourceVersion of rv
// inserted before the member at offset at, or last when at < 0 (closing
// is the offset of m's closing brace).
func insertRV(dst, m []byte, at, closing int, rv int64) []byte {
	if at < 0 {
		dst = append(dst, m[:closing]...)
		if !emptyObjectBefore(m, closing) {
			dst = append(dst, ',')
		}
		dst = append(dst, `"resourceVersion":"`...)
		dst = strconv.AppendInt(dst, rv, 10)
		dst = append(dst, '"')
		return append(dst, m[closing:]...)
	}
	dst = append(dst, m[:at]...)
	dst = append(dst, `"resourceVersion":"`...)
	dst = strconv.AppendInt(dst, rv, 10)
	dst = append(dst, `",`...)
	return append(dst, m[at:]...)
}

// Protobuf passthrough.

// rvPatchSize is the size of `field 1 { field 6: "<rv>" }`.
func rvPatchSize(rv int64) int {
	if rv == 0 {
		return 0
	}
	d := decimalLen(rv)
	inner := 1 + varintSize(uint64(d)) + d
	return 1 + varintSize(uint64(inner)) + inner
}

func decimalLen(v int64) int {
	var buf [20]byte
	return len(strconv.AppendInt(buf[:0], v, 10))
}

func appendRVPatch(dst []byte, rv int64) []byte {
	if rv == 0 {
		return dst
	}
	d := decimalLen(rv)
	inner := 1 + varintSize(uint64(d)) + d
	dst = append(dst, 0x0a)
	dst = appendVarint(dst, uint64(inner))
	dst = append(dst, 0x32)
	dst = appendVarint(dst, uint64(d))
	return strconv.AppendInt(dst, rv, 10)
}

// AppendProtobuf appends obj's protobuf message with resourceVersion set
// to rv by protobuf merge: obj.Raw followed by `field 1 { field 6: "<rv>" }`
// (rv == 0: obj.Raw as is). obj must be FormatProtobuf; for any other
// format dst is returned unchanged (kube-apiserver serves JSON-stored
// objects only as JSON).
func AppendProtobuf(dst []byte, obj Object, rv int64) []byte {
	if obj.Format != FormatProtobuf {
		return dst
	}
	dst = append(dst, obj.Raw...)
	return appendRVPatch(dst, rv)
}

// ProtobufSize is len(AppendProtobuf(nil, obj, rv)).
func ProtobufSize(obj Object, rv int64) int {
	if obj.Format != FormatProtobuf {
		return 0
	}
	return len(obj.Raw) + rvPatchSize(rv)
}

func typeMetaSize(obj Object) int {
	return 1 + varintSize(uint64(len(obj.APIVersion))) + len(obj.APIVersion) +
		1 + varintSize(uint64(len(obj.Kind))) + len(obj.Kind)
}

// AppendProtobufEnvelope appends "k8s\x00" + runtime.Unknown{typeMeta:
// {apiVersion, kind}, raw: AppendProtobuf(obj, rv), contentEncoding: "",
// contentType: ""}, byte for byte as apimachinery's protobuf serializer
// writes it. obj must be FormatProtobuf (else dst is returned unchanged).
func AppendProtobufEnvelope(dst []byte, obj Object, rv int64) []byte {
	if obj.Format != FormatProtobuf {
		return dst
	}
	dst = append(dst, protobufMagic...)
	dst = append(dst, 0x0a)
	dst = appendVarint(dst, uint64(typeMetaSize(obj)))
	dst = append(dst, 0x0a)
	dst = appendVarint(dst, uint64(len(obj.APIVersion)))
	dst = append(dst, obj.APIVersion...)
	dst = append(dst, 0x12)
	dst = appendVarint(dst, uint64(len(obj.Kind)))
	dst = append(dst, obj.Kind...)
	dst = append(dst, 0x12)
	dst = appendVarint(dst, uint64(ProtobufSize(obj, rv)))
	dst = AppendProtobuf(dst, obj, rv)
	return append(dst, 0x1a, 0x00, 0x22, 0x00)
}

// ProtobufEnvelopeSize is len(AppendProtobufEnvelope(nil, obj, rv)).
func ProtobufEnvelopeSize(obj Object, rv int64) int {
	if obj.Format != FormatProtobuf {
		return 0
	}
	tm := typeMetaSize(obj)
	n := ProtobufSize(obj, rv)
	return len(protobufMagic) + 1 + varintSize(uint64(tm)) + tm + 1 + varintSize(uint64(n)) + n + 4
}

// AppendProtobufMetadata appends the ObjectMeta message of obj (field 1 of
// its protobuf, all occurrences merged) followed by `field 6: "<rv>"`, so
// that it decodes with resourceVersion rv. It appends the message body
// only, without a field tag or length.
func AppendProtobufMetadata(dst []byte, obj Object, rv int64) ([]byte, error) {
	if obj.Format != FormatProtobuf {
		return dst, fmt.Errorf("cannot write protobuf metadata of a %v object", obj.Format)
	}
	mark := len(dst)
	for i := 0; i < len(obj.Raw); {
		o, next, err := readField(obj.Raw, i)
		if err != nil {
			return dst[:mark], corrupt(obj.Raw, i, err.Error())
		}
		if o.num == 1 {
			if o.wt != 2 {
				return dst[:mark], corrupt(obj.Raw, i, "metadata has wrong wire type")
			}
			dst = append(dst, o.p...)
		}
		i = next
	}
	if rv != 0 {
		dst = append(dst, 0x32)
		dst = appendVarint(dst, uint64(decimalLen(rv)))
		dst = strconv.AppendInt(dst, rv, 10)
	}
	return dst, nil
}

// AppendJSONTypeMeta appends the JSON object raw with its top-level kind
// and apiVersion (those before "metadata", as every encoder kube-apiserver
// uses writes them) replaced by kind and apiVersion, written first. It
// serves a built-in kind stored as JSON at another version than it is
// served at, with the same schema. raw is not modified.
func AppendJSONTypeMeta(dst, raw []byte, apiVersion, kind string) []byte {
	rest := stripTypeMeta(append([]byte(nil), raw...))
	i := skipSpace(rest, 0)
	if i >= len(rest) || rest[i] != '{' {
		return append(dst, raw...)
	}
	dst = append(dst, `{"kind":`...)
	dst = appendJSONQuote(dst, kind)
	dst = append(dst, `,"apiVersion":`...)
	dst = appendJSONQuote(dst, apiVersion)
	if j := skipSpace(rest, i+1); j < len(rest) && rest[j] != '}' {
		dst = append(dst, ',')
	}
	return append(dst, rest[i+1:]...)
}

// AppendJSONAPIVersion appends the JSON object raw with the value of its
// top-level apiVersion replaced by apiVersion, in place (added in key
// order when absent): a custom resource stored at one version of a CRD
// whose conversion strategy is None, served at another, as
// apiextensions-apiserver's nopConverter serves it (its JSON keys are
// sorted, as the unstructured encoder writes them). raw is not modified.
func AppendJSONAPIVersion(dst, raw []byte, apiVersion string) ([]byte, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return dst, corrupt(raw, i, "expected a JSON object")
	}
	val, ins, closing, err := findTopKey(raw, i, "apiVersion")
	if err != nil {
		return dst, err
	}
	switch {
	case val.start >= 0:
		dst = append(dst, raw[:val.start]...)
		dst = appendJSONQuote(dst, apiVersion)
		return append(dst, raw[val.end:]...), nil
	case ins >= 0:
		dst = append(dst, raw[:ins]...)
		dst = append(dst, `"apiVersion":`...)
		dst = appendJSONQuote(dst, apiVersion)
		dst = append(dst, ',')
		return append(dst, raw[ins:]...), nil
	case closing >= 0:
		dst = append(dst, raw[:closing]...)
		if !emptyObjectBefore(raw, closing) {
			dst = append(dst, ',')
		}
		dst = append(dst, `"apiVersion":`...)
		dst = appendJSONQuote(dst, apiVersion)
		return append(dst, raw[closing:]...), nil
	}
	return dst, corrupt(raw, len(raw), "truncated JSON object")
}

// HasJSONAPIVersion reports whether the JSON object raw starts with
// {"apiVersion":"<apiVersion>" (as the unstructured encoder writes a
// custom resource): then AppendJSONAPIVersion would change nothing. false
// means it may differ.
func HasJSONAPIVersion(raw []byte, apiVersion string) bool {
	const head = `{"apiVersion":"`
	return len(raw) > len(head)+len(apiVersion) && string(raw[:len(head)]) == head &&
		string(raw[len(head):len(head)+len(apiVersion)]) == apiVersion && raw[len(head)+len(apiVersion)] == '"'
}
