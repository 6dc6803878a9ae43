package codec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// maxDepth bounds message nesting; built-in types nest far less.
const maxDepth = 100

var errDepth = errors.New("message nesting too deep")

// state is the per-call scratch of the transcoder, pooled on the Schema.
// Its slices are stacks: a nested message pushes its slots or map entries
// and pops them when done, so steady-state calls do not allocate.
type state struct {
	s      *Schema
	slots  []slot
	ents   []mapEnt
	rv     int64
	rvMeta bool // writing the top-level object's metadata: patch resourceVersion
	omitTM bool
	apiVer string
	kind   string
	depth  int
}

// slot records where a field of the message being written occurred.
type slot struct {
	first int // offset of the first occurrence's tag
	count int
	last  occ
}

type mapEnt struct {
	key []byte
	val occ
	has bool
}

func (s *Schema) getState() *state {
	st := s.pool.Get().(*state)
	st.depth = 0
	st.rvMeta = false
	return st
}

func (s *Schema) putState(st *state) {
	st.slots = st.slots[:0]
	st.ents = st.ents[:0]
	s.pool.Put(st)
}

// AppendJSON writes obj as kube-apiserver's JSON: kind and apiVersion first
// unless o.OmitTypeMeta, then the fields as encoding/json writes the Go
// struct (struct field order, map keys sorted, HTML-safe escaping), with
// metadata.resourceVersion set to rv when rv != 0. A FormatJSON object goes
// through AppendJSONPassthrough (typemeta kept as stored, or dropped with
// OmitTypeMeta when it comes before "metadata", as in both struct and
// sorted key order). On error dst is returned unchanged (same length).
//
// The output is bounded by the input: an occurrence of a message (at least
// 2 bytes of protobuf) writes at most its zero-value JSON (under 300 bytes
// for every built-in type) plus its fields, so len(output) stays below
// 512*len(obj.Raw) + 64 KiB (tested in TestExpansionBound and the fuzz
// targets). AppendJSON keeps no reference to obj after it returns.
func (s *Schema) AppendJSON(dst []byte, obj Object, rv int64, o JSONOptions) ([]byte, error) {
	switch obj.Format {
	case FormatJSON:
		mark := len(dst)
		dst, err := AppendJSONPassthrough(dst, obj.Raw, rv)
		if err != nil || !o.OmitTypeMeta {
			return dst, err
		}
		// a built-in kind stored as JSON, written as a list item
		return append(dst[:mark], stripTypeMeta(dst[mark:])...), nil
	case FormatProtobuf:
	default:
		return dst, fmt.Errorf("cannot write JSON: unknown object format %d", obj.Format)
	}
	m := s.kinds[gvk{obj.APIVersion, obj.Kind}]
	if m == nil {
		return dst, fmt.Errorf("cannot write JSON for %s %s: kind is not in the schema", obj.APIVersion, obj.Kind)
	}
	st := s.getState()
	st.rv = rv
	st.omitTM = o.OmitTypeMeta
	st.apiVer, st.kind = obj.APIVersion, obj.Kind
	mark := len(dst)
	dst = append(dst, '{')
	dst, err := st.fields(dst, m, obj.Raw, true)
	dst = append(dst, '}')
	st.apiVer, st.kind = "", ""
	s.putState(st)
	if err != nil {
		return dst[:mark], fmt.Errorf("cannot transcode %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	return dst, nil
}

// AppendJSONMetadata writes only the object's metadata as a JSON object
// ({"name":...,"resourceVersion":"<rv>",...}), as encoding/json writes a
// metav1.ObjectMeta. For FormatJSON objects the stored metadata object is
// copied with resourceVersion patched.
func (s *Schema) AppendJSONMetadata(dst []byte, obj Object, rv int64) ([]byte, error) {
	switch obj.Format {
	case FormatJSON:
		return appendJSONMetadataPassthrough(dst, obj.Raw, rv)
	case FormatProtobuf:
	default:
		return dst, fmt.Errorf("cannot write metadata JSON: unknown object format %d", obj.Format)
	}
	meta, err := metadataPayload(obj.Raw)
	if err != nil {
		return dst, err
	}
	st := s.getState()
	st.rv = rv
	st.rvMeta = rv != 0
	mark := len(dst)
	dst = append(dst, '{')
	dst, err = st.fields(dst, s.objectMeta, meta, false)
	dst = append(dst, '}')
	s.putState(st)
	if err != nil {
		return dst[:mark], fmt.Errorf("cannot transcode metadata: %w", err)
	}
	return dst, nil
}

// metadataPayload returns field 1 (ObjectMeta) of a stored object's
// protobuf, merging repeated occurrences (allocating only then).
func metadataPayload(raw []byte) ([]byte, error) {
	var p []byte
	n := 0
	for i := 0; i < len(raw); {
		o, next, err := readField(raw, i)
		if err != nil {
			return nil, corrupt(raw, i, err.Error())
		}
		if o.num == 1 {
			if o.wt != 2 {
				return nil, corrupt(raw, i, "metadata has wrong wire type")
			}
			if n == 0 {
				p = o.p
			} else {
				p = append(append([]byte(nil), p...), o.p...)
			}
			n++
		}
		i = next
	}
	return p, nil
}

func appendComma(dst []byte) []byte {
	if len(dst) > 0 && dst[len(dst)-1] != '{' && dst[len(dst)-1] != '[' {
		dst = append(dst, ',')
	}
	return dst
}

func appendKey(dst []byte, f *field) []byte {
	return append(appendComma(dst), f.key...)
}

// fields writes the JSON fields (without braces) of message m encoded in b.
// top is true for the fields of the stored object itself (and its inline
// structs): kind/apiVersion and the resourceVersion patch apply there.
func (st *state) fields(dst []byte, m *message, b []byte, top bool) ([]byte, error) {
	if st.depth >= maxDepth {
		return dst, errDepth
	}
	st.depth++
	base := len(st.slots)
	n := len(m.fields)
	st.slots = slices.Grow(st.slots, n)[:base+n]
	clear(st.slots[base:])
	// slots of this message are not written again while nested messages
	// run; a pointer stays valid even if st.slots is reallocated (the old
	// array is only read).
	slots := st.slots[base : base+n]
	if err := occurrences(m, b, slots); err != nil {
		return dst, err
	}
	var err error
	for i := range m.fields {
		f := &m.fields[i]
		s := &slots[i]
		if s.count == 0 && f.skipAbsent {
			continue
		}
		switch {
		case f.v.kind == kTypeMeta:
			if top && !st.omitTM {
				dst = st.typeMeta(dst)
			}
		case f.inline:
			var p []byte
			if p, err = mergedPayload(b, f, s); err == nil {
				dst, err = st.fields(dst, f.v.msg, p, top)
			}
		case f.card == cSlice:
			dst, err = st.slice(dst, f, b, s)
		case f.card == cMap:
			dst, err = st.mapField(dst, f, b, s)
		default:
			if top && f.name == "metadata" && f.v.msg == st.s.objectMeta {
				st.rvMeta = st.rv != 0
				dst, err = st.single(dst, f, b, s)
				st.rvMeta = false
			} else if f.isRV && st.rvMeta {
				dst = appendKey(dst, f)
				dst = append(dst, '"')
				dst = strconv.AppendInt(dst, st.rv, 10)
				dst = append(dst, '"')
			} else {
				dst, err = st.single(dst, f, b, s)
			}
		}
		if err != nil {
			return dst, err
		}
	}
	st.slots = st.slots[:base]
	st.depth--
	return dst, nil
}

// occurrences records in slots (one per field of m, zeroed) where each
// field of m occurs in b: the first occurrence's offset, their count and
// the last one. Unknown fields are skipped.
func occurrences(m *message, b []byte, slots []slot) error {
	for i := 0; i < len(b); {
		var o occ
		var next int
		// fast path: one-byte tag of a length-delimited field with a
		// one-byte length
		if t := b[i]; t&0x87 == 2 && t>>3 != 0 && i+1 < len(b) && b[i+1] < 0x80 && int(b[i+1]) <= len(b)-i-2 {
			l := int(b[i+1])
			o = occ{num: uint64(t >> 3), wt: 2, p: b[i+2 : i+2+l], start: i}
			next = i + 2 + l
		} else if t&0x87 == 0 && t>>3 != 0 && i+1 < len(b) && b[i+1] < 0x80 {
			// one-byte tag of a varint field with a one-byte value
			o = occ{num: uint64(t >> 3), u: uint64(b[i+1]), start: i}
			next = i + 2
		} else {
			var err error
			if o, next, err = readField(b, i); err != nil {
				return corrupt(b, i, err.Error())
			}
		}
		if idx := m.index(o.num); idx >= 0 {
			f := &m.fields[idx]
			if o.wt != f.v.wire && !(f.card == cSlice && o.wt == 2 && f.v.wire != 2) {
				return corrupt(b, i, fmt.Sprintf("wrong wire type %d for field %s of %v", o.wt, f.name, m.goType))
			}
			s := &slots[idx]
			if s.count == 0 {
				s.first = i
			}
			s.count++
			s.last = o
		}
		i = next
	}
	return nil
}

// typeMeta writes the stored object's kind and apiVersion fields (those
// set), which protobuf leaves out.
func (st *state) typeMeta(dst []byte) []byte {
	if st.kind != "" {
		dst = append(appendComma(dst), `"kind":`...)
		dst = appendJSONString(dst, bytesutil.ToUnsafeBytes(st.kind))
	}
	if st.apiVer != "" {
		dst = append(appendComma(dst), `"apiVersion":`...)
		dst = appendJSONString(dst, bytesutil.ToUnsafeBytes(st.apiVer))
	}
	return dst
}

// mergedPayload returns the payload of a non-repeated message field: the
// last occurrence, or all occurrences concatenated (protobuf merge) when it
// occurs more than once.
func mergedPayload(b []byte, f *field, s *slot) ([]byte, error) {
	if s.count <= 1 {
		return s.last.p, nil
	}
	var p []byte
	for i, seen := s.first, 0; seen < s.count && i < len(b); {
		o, next, err := readField(b, i)
		if err != nil {
			return nil, corrupt(b, i, err.Error())
		}
		if o.num == uint64(f.num) {
			p = append(p, o.p...)
			seen++
		}
		i = next
	}
	return p, nil
}

// mergeable reports whether repeated occurrences of a single value merge
// (messages) rather than replace each other (scalars, strings, bytes, and
// Time/MicroTime, whose custom Unmarshal replaces the whole value).
func mergeable(k kind) bool {
	return k >= kMessage && k != kTime && k != kMicroTime
}

func zeroIsEmpty(k kind) bool {
	return k < kMessage || k == kWrapped
}

func (st *state) single(dst []byte, f *field, b []byte, s *slot) ([]byte, error) {
	mark := len(dst)
	if s.count == 0 {
		if f.ptr {
			if f.omitEmpty || f.omitZero {
				return dst, nil
			}
			return append(appendKey(dst, f), "null"...), nil
		}
		if f.omitZero || (f.omitEmpty && zeroIsEmpty(f.v.kind)) {
			return dst, nil
		}
		return st.zero(appendKey(dst, f), &f.v)
	}
	o := s.last
	if s.count > 1 && mergeable(f.v.kind) {
		p, err := mergedPayload(b, f, s)
		if err != nil {
			return dst, err
		}
		o.p = p
	}
	dst = appendKey(dst, f)
	dst, empty, zero, err := st.value(dst, &f.v, o)
	if err != nil {
		return dst, err
	}
	if !f.ptr && ((f.omitEmpty && empty) || (f.omitZero && zero)) {
		return dst[:mark], nil
	}
	return dst, nil
}

func (st *state) slice(dst []byte, f *field, b []byte, s *slot) ([]byte, error) {
	mark := len(dst)
	if s.count == 0 {
		if f.omitEmpty || f.omitZero {
			return dst, nil
		}
		return append(appendKey(dst, f), "null"...), nil
	}
	dst = append(appendKey(dst, f), '[')
	items := 0
	var err error
	for i, seen := s.first, 0; seen < s.count && i < len(b); {
		o, next, rerr := readField(b, i)
		if rerr != nil {
			return dst, corrupt(b, i, rerr.Error())
		}
		i = next
		if o.num != uint64(f.num) {
			continue
		}
		seen++
		if o.wt == 2 && f.v.wire != 2 {
			if dst, items, err = st.packed(dst, &f.v, o.p, items); err != nil {
				return dst, err
			}
			continue
		}
		if items > 0 {
			dst = append(dst, ',')
		}
		items++
		if dst, _, _, err = st.value(dst, &f.v, o); err != nil {
			return dst, err
		}
	}
	if items == 0 {
		// only empty packed runs: the Go slice stays nil
		dst = dst[:mark]
		if f.omitEmpty || f.omitZero {
			return dst, nil
		}
		return append(appendKey(dst, f), "null"...), nil
	}
	return append(dst, ']'), nil
}

// packed writes the elements of a packed repeated scalar.
func (st *state) packed(dst []byte, v *vdesc, p []byte, items int) ([]byte, int, error) {
	var err error
	for j := 0; j < len(p); {
		o := occ{wt: v.wire}
		switch v.wire {
		case 0:
			if o.u, j, err = readVarint(p, j); err != nil {
				return dst, items, corrupt(p, j, err.Error())
			}
		case 1:
			if len(p)-j < 8 {
				return dst, items, corrupt(p, j, errTruncated.Error())
			}
			for k := 7; k >= 0; k-- {
				o.u = o.u<<8 | uint64(p[j+k])
			}
			j += 8
		case 5:
			if len(p)-j < 4 {
				return dst, items, corrupt(p, j, errTruncated.Error())
			}
			for k := 3; k >= 0; k-- {
				o.u = o.u<<8 | uint64(p[j+k])
			}
			j += 4
		}
		if items > 0 {
			dst = append(dst, ',')
		}
		items++
		if dst, _, _, err = st.value(dst, v, o); err != nil {
			return dst, items, err
		}
	}
	return dst, items, nil
}

func (st *state) mapField(dst []byte, f *field, b []byte, s *slot) ([]byte, error) {
	if s.count == 0 {
		if f.omitEmpty || f.omitZero {
			return dst, nil
		}
		return append(appendKey(dst, f), "null"...), nil
	}
	base := len(st.ents)
	for i, seen := s.first, 0; seen < s.count && i < len(b); {
		o, next, err := readField(b, i)
		if err != nil {
			return dst, corrupt(b, i, err.Error())
		}
		i = next
		if o.num != uint64(f.num) {
			continue
		}
		seen++
		e := mapEnt{key: []byte{}}
		for j := 0; j < len(o.p); {
			eo, jn, err := readField(o.p, j)
			if err != nil {
				return dst, corrupt(o.p, j, err.Error())
			}
			switch eo.num {
			case 1:
				if eo.wt != 2 {
					return dst, corrupt(o.p, j, "map key has wrong wire type")
				}
				e.key = eo.p
			case 2:
				if eo.wt != f.mapVal.wire {
					return dst, corrupt(o.p, j, "map value has wrong wire type")
				}
				e.val, e.has = eo, true
			}
			j = jn
		}
		st.ents = append(st.ents, e)
	}
	slices.SortStableFunc(st.ents[base:], func(a, b mapEnt) int { return bytes.Compare(a.key, b.key) })
	dst = append(appendKey(dst, f), '{')
	var err error
	for i := base; i < len(st.ents); i++ {
		e := st.ents[i]
		if i+1 < len(st.ents) && bytes.Equal(e.key, st.ents[i+1].key) {
			continue // a later entry with the same key wins
		}
		dst = appendComma(dst)
		dst = appendJSONString(dst, e.key)
		dst = append(dst, ':')
		if e.has {
			dst, _, _, err = st.value(dst, f.mapVal, e.val)
		} else {
			dst, err = st.mapZero(dst, f.mapVal)
		}
		if err != nil {
			return dst, err
		}
	}
	st.ents = st.ents[:base]
	return append(dst, '}'), nil
}

// mapZero writes the value gogo's generated code stores for a map entry
// without a value: a zero value, but non-nil for []byte and named slices.
func (st *state) mapZero(dst []byte, v *vdesc) ([]byte, error) {
	switch v.kind {
	case kBytes:
		return append(dst, `""`...), nil
	case kWrapped:
		return append(dst, `[]`...), nil
	}
	return st.zero(dst, v)
}

// zero writes the JSON of the Go zero value of v.
func (st *state) zero(dst []byte, v *vdesc) ([]byte, error) {
	switch v.kind {
	case kString:
		return append(dst, `""`...), nil
	case kBool:
		return append(dst, "false"...), nil
	case kInt32, kInt64, kUint32, kUint64, kFloat64, kFloat32, kIntOrStr:
		return append(dst, '0'), nil
	case kBytes, kWrapped, kTime, kMicroTime, kRawExt, kFieldsV1:
		return append(dst, "null"...), nil
	case kDuration:
		return append(dst, `"0s"`...), nil
	case kQuantity:
		return append(dst, `"0"`...), nil
	case kMessage:
		dst = append(dst, '{')
		dst, err := st.fields(dst, v.msg, nil, false)
		return append(dst, '}'), err
	}
	return dst, fmt.Errorf("BUG: no zero value for kind %d", v.kind)
}

// value writes one present value. empty reports what encoding/json's
// omitempty tests (zero scalar, empty string or slice), zero what omitzero
// tests.
func (st *state) value(dst []byte, v *vdesc, o occ) (out []byte, empty, zero bool, err error) {
	switch v.kind {
	case kString:
		return appendJSONString(dst, o.p), len(o.p) == 0, len(o.p) == 0, nil
	case kBool:
		if o.u != 0 {
			return append(dst, "true"...), false, false, nil
		}
		return append(dst, "false"...), true, true, nil
	case kInt32:
		x := int32(o.u)
		return strconv.AppendInt(dst, int64(x), 10), x == 0, x == 0, nil
	case kInt64:
		x := int64(o.u)
		return strconv.AppendInt(dst, x, 10), x == 0, x == 0, nil
	case kUint32:
		x := uint32(o.u)
		return strconv.AppendUint(dst, uint64(x), 10), x == 0, x == 0, nil
	case kUint64:
		return strconv.AppendUint(dst, o.u, 10), o.u == 0, o.u == 0, nil
	case kFloat64:
		f := math.Float64frombits(o.u)
		out, ok := appendJSONFloat(dst, f, 64)
		if !ok {
			return dst, false, false, fmt.Errorf("unsupported float value %v", f)
		}
		return out, f == 0, f == 0, nil
	case kFloat32:
		f := math.Float32frombits(uint32(o.u))
		out, ok := appendJSONFloat(dst, float64(f), 32)
		if !ok {
			return dst, false, false, fmt.Errorf("unsupported float value %v", f)
		}
		return out, f == 0, f == 0, nil
	case kBytes:
		return appendJSONBase64(dst, o.p), len(o.p) == 0, false, nil
	case kMessage:
		dst = append(dst, '{')
		dst, err = st.fields(dst, v.msg, o.p, false)
		return append(dst, '}'), false, false, err
	case kTime, kMicroTime:
		return appendTime(dst, o.p, v.kind == kMicroTime)
	case kDuration:
		out, err = appendDurationMsg(dst, o.p)
		return out, false, false, err
	case kQuantity:
		out, err = appendQuantity(dst, o.p)
		return out, false, false, err
	case kIntOrStr:
		out, err = appendIntOrString(dst, o.p)
		return out, false, false, err
	case kRawExt:
		out, err = appendRawExtension(dst, o.p)
		return out, false, false, err
	case kFieldsV1:
		out, err = appendFieldsV1(dst, o.p)
		return out, false, false, err
	case kWrapped:
		out, n, err := st.wrapped(dst, v, o.p)
		return out, n == 0, false, err
	}
	return dst, false, false, fmt.Errorf("BUG: cannot write kind %d", v.kind)
}

// wrapped writes a named slice type's message {repeated items = 1}.
func (st *state) wrapped(dst []byte, v *vdesc, p []byte) ([]byte, int, error) {
	dst = append(dst, '[')
	items := 0
	var err error
	for j := 0; j < len(p); {
		o, next, rerr := readField(p, j)
		if rerr != nil {
			return dst, items, corrupt(p, j, rerr.Error())
		}
		j = next
		if o.num != 1 {
			continue
		}
		if o.wt == 2 && v.elem.wire != 2 {
			if dst, items, err = st.packed(dst, v.elem, o.p, items); err != nil {
				return dst, items, err
			}
			continue
		}
		if o.wt != v.elem.wire {
			return dst, items, corrupt(p, o.start, "wrong wire type for items")
		}
		if items > 0 {
			dst = append(dst, ',')
		}
		items++
		if dst, _, _, err = st.value(dst, v.elem, o); err != nil {
			return dst, items, err
		}
	}
	return append(dst, ']'), items, nil
}
