package codec

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// Meta is the metadata of an object as read by PeekMeta. Its byte slices
// are borrowed from the object's Raw (or from Meta's own scratch buffer
// when a JSON string had escapes or a protobuf timestamp was formatted):
// they are valid until the next PeekMeta or Reset on this Meta and as long
// as Raw is. The zero value is ready to use; a Meta is not safe for
// concurrent use.
type Meta struct {
	Name, Namespace, UID, GenerateName []byte
	// CreationTimestamp is RFC 3339 ("2006-01-02T15:04:05Z"), as in JSON;
	// Created is the same instant (zero when absent).
	CreationTimestamp []byte
	Created           time.Time
	Generation        int64
	// Labels and Annotations in stored order; when a key repeats (protobuf
	// merge), the last entry wins, as Label does.
	Labels, Annotations []KV
	OwnerReferences     []OwnerRef

	buf []byte // scratch for unescaped strings and formatted timestamps
}

// KV is one entry of a string map.
type KV struct{ Key, Value []byte }

// OwnerRef is one metadata.ownerReferences entry.
type OwnerRef struct {
	APIVersion, Kind, Name, UID []byte
	Controller                  bool // controller: true
	BlockOwnerDeletion          bool
}

// Reset clears m and keeps its slices' capacity.
func (m *Meta) Reset() {
	m.Name, m.Namespace, m.UID, m.GenerateName, m.CreationTimestamp = nil, nil, nil, nil, nil
	m.Created = time.Time{}
	m.Generation = 0
	clear(m.Labels)
	clear(m.Annotations)
	clear(m.OwnerReferences)
	m.Labels, m.Annotations, m.OwnerReferences = m.Labels[:0], m.Annotations[:0], m.OwnerReferences[:0]
	m.buf = m.buf[:0]
}

// Label returns the value of label key.
func (m *Meta) Label(key string) ([]byte, bool) {
	return lookupKV(m.Labels, key)
}

// Annotation returns the value of annotation key.
func (m *Meta) Annotation(key string) ([]byte, bool) {
	return lookupKV(m.Annotations, key)
}

func lookupKV(kvs []KV, key string) ([]byte, bool) {
	for i := len(kvs) - 1; i >= 0; i-- {
		if string(kvs[i].Key) == key {
			return kvs[i].Value, true
		}
	}
	return nil, false
}

// PeekMeta reads obj's metadata into m (after resetting it) without
// decoding the rest of the object. It does not allocate once m's slices
// have grown to the object's sizes.
func (s *Schema) PeekMeta(obj Object, m *Meta) error {
	m.Reset()
	switch obj.Format {
	case FormatProtobuf:
		return m.peekProtobuf(obj.Raw)
	case FormatJSON:
		return m.peekJSON(obj.Raw)
	}
	return fmt.Errorf("cannot read metadata: unknown object format %d", obj.Format)
}

func (m *Meta) peekProtobuf(raw []byte) error {
	if cap(m.buf) < 32 {
		m.buf = make([]byte, 0, 64)
	}
	for i := 0; i < len(raw); {
		o, next, err := readField(raw, i)
		if err != nil {
			return corrupt(raw, i, err.Error())
		}
		if o.num == 1 {
			if o.wt != 2 {
				return corrupt(raw, i, "metadata has wrong wire type")
			}
			if err := m.peekObjectMeta(o.p); err != nil {
				return err
			}
		}
		i = next
	}
	return nil
}

func (m *Meta) peekObjectMeta(b []byte) error {
	for i := 0; i < len(b); {
		o, next, err := readField(b, i)
		if err != nil {
			return corrupt(b, i, err.Error())
		}
		switch o.num {
		case 1, 2, 3, 5, 8, 11, 12, 13:
			if o.wt != 2 {
				return corrupt(b, i, "wrong wire type in metadata")
			}
		case 7:
			if o.wt != 0 {
				return corrupt(b, i, "wrong wire type in metadata")
			}
		}
		switch o.num {
		case 1:
			m.Name = o.p
		case 2:
			m.GenerateName = o.p
		case 3:
			m.Namespace = o.p
		case 5:
			m.UID = o.p
		case 7:
			m.Generation = int64(o.u)
		case 8:
			if err := m.peekTimestamp(o.p); err != nil {
				return err
			}
		case 11, 12:
			kv, err := protoMapEntry(o.p)
			if err != nil {
				return err
			}
			if o.num == 11 {
				m.Labels = append(m.Labels, kv)
			} else {
				m.Annotations = append(m.Annotations, kv)
			}
		case 13:
			r, err := protoOwnerRef(o.p)
			if err != nil {
				return err
			}
			m.OwnerReferences = append(m.OwnerReferences, r)
		}
		i = next
	}
	return nil
}

// protoMapEntry reads a map<string, string> entry (labels, annotations).
func protoMapEntry(p []byte) (KV, error) {
	kv := KV{Key: []byte{}, Value: []byte{}}
	for j := 0; j < len(p); {
		e, jn, err := readField(p, j)
		if err != nil {
			return kv, corrupt(p, j, err.Error())
		}
		if (e.num == 1 || e.num == 2) && e.wt != 2 {
			return kv, corrupt(p, j, "wrong wire type in map entry")
		}
		switch e.num {
		case 1:
			kv.Key = e.p
		case 2:
			kv.Value = e.p
		}
		j = jn
	}
	return kv, nil
}

// protoOwnerRef reads an OwnerReference message.
func protoOwnerRef(p []byte) (OwnerRef, error) {
	var r OwnerRef
	for j := 0; j < len(p); {
		e, jn, err := readField(p, j)
		if err != nil {
			return r, corrupt(p, j, err.Error())
		}
		switch e.num {
		case 1, 3, 4, 5:
			if e.wt != 2 {
				return r, corrupt(p, j, "wrong wire type in ownerReference")
			}
		case 6, 7:
			if e.wt != 0 {
				return r, corrupt(p, j, "wrong wire type in ownerReference")
			}
		}
		switch e.num {
		case 1:
			r.Kind = e.p
		case 3:
			r.Name = e.p
		case 4:
			r.UID = e.p
		case 5:
			r.APIVersion = e.p
		case 6:
			r.Controller = e.u != 0
		case 7:
			r.BlockOwnerDeletion = e.u != 0
		}
		j = jn
	}
	return r, nil
}

func (m *Meta) peekTimestamp(p []byte) error {
	m.CreationTimestamp, m.Created = nil, time.Time{}
	if len(p) == 0 {
		return nil
	}
	v, _, err := smallFields(p, [4]uint8{0, wVarint, wVarint, 0})
	if err != nil {
		return err
	}
	t := time.Unix(int64(v[1].u), 0).UTC()
	if t.IsZero() {
		return nil
	}
	m.Created = t
	start := len(m.buf)
	if cap(m.buf)-start < 32 {
		// keep earlier borrowed slices valid: start a new buffer
		m.buf = make([]byte, 0, 64)
		start = 0
	}
	m.buf = t.AppendFormat(m.buf, time.RFC3339)
	m.CreationTimestamp = m.buf[start:len(m.buf):len(m.buf)]
	return nil
}

func (m *Meta) peekJSON(raw []byte) error {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return corrupt(raw, i, "JSON value is not an object")
	}
	mv, _, _, err := findTopKey(raw, i, "metadata")
	if err != nil {
		return err
	}
	if mv.start < 0 || raw[mv.start] == 'n' {
		return nil
	}
	md := raw[mv.start:mv.end]
	if md[0] != '{' {
		return corrupt(raw, mv.start, "metadata is not an object")
	}
	// unescaped strings are never longer than their escaped form, so this
	// capacity keeps every borrowed slice of buf valid
	if cap(m.buf) < len(md) {
		m.buf = make([]byte, 0, len(md))
	}
	return eachKey(md, func(k, v []byte) error {
		switch {
		case keyEquals(k, "name"):
			m.Name = m.jsonString(v)
		case keyEquals(k, "generateName"):
			m.GenerateName = m.jsonString(v)
		case keyEquals(k, "namespace"):
			m.Namespace = m.jsonString(v)
		case keyEquals(k, "uid"):
			m.UID = m.jsonString(v)
		case keyEquals(k, "creationTimestamp"):
			m.CreationTimestamp = m.jsonString(v)
			m.Created = time.Time{}
			if m.CreationTimestamp != nil {
				t, err := time.Parse(time.RFC3339, bytesutil.ToUnsafeString(m.CreationTimestamp))
				if err != nil {
					return fmt.Errorf("cannot parse creationTimestamp %q: %w", m.CreationTimestamp, err)
				}
				m.Created = t.UTC()
			}
		case keyEquals(k, "generation"):
			if v[0] != 'n' {
				g, err := strconv.ParseInt(bytesutil.ToUnsafeString(v), 10, 64)
				if err != nil {
					return corrupt(v, 0, "generation is not an integer")
				}
				m.Generation = g
			}
		case keyEquals(k, "labels"), keyEquals(k, "annotations"):
			if v[0] != '{' {
				return nil
			}
			return m.jsonStringMap(v, keyEquals(k, "labels"))
		case keyEquals(k, "ownerReferences"):
			if v[0] != '[' {
				return nil
			}
			return m.jsonOwnerRefs(v)
		}
		return nil
	})
}

// jsonStringMap appends the members of the JSON object v (labels or
// annotations) to m.Labels (labels) or m.Annotations.
func (m *Meta) jsonStringMap(v []byte, labels bool) error {
	return eachKey(v, func(mk, mv []byte) error {
		kv := KV{Key: m.jsonKey(mk), Value: m.jsonString(mv)}
		if kv.Value == nil {
			kv.Value = []byte{}
		}
		if labels {
			m.Labels = append(m.Labels, kv)
		} else {
			m.Annotations = append(m.Annotations, kv)
		}
		return nil
	})
}

// jsonOwnerRefs appends the elements of the JSON array v to
// m.OwnerReferences.
func (m *Meta) jsonOwnerRefs(v []byte) error {
	return eachElem(v, func(e []byte) error {
		if e[0] != '{' {
			return corrupt(e, 0, "ownerReference is not an object")
		}
		var r OwnerRef
		err := eachKey(e, func(rk, rv []byte) error {
			switch {
			case keyEquals(rk, "apiVersion"):
				r.APIVersion = m.jsonString(rv)
			case keyEquals(rk, "kind"):
				r.Kind = m.jsonString(rv)
			case keyEquals(rk, "name"):
				r.Name = m.jsonString(rv)
			case keyEquals(rk, "uid"):
				r.UID = m.jsonString(rv)
			case keyEquals(rk, "controller"):
				r.Controller = string(rv) == "true"
			case keyEquals(rk, "blockOwnerDeletion"):
				r.BlockOwnerDeletion = string(rv) == "true"
			}
			return nil
		})
		m.OwnerReferences = append(m.OwnerReferences, r)
		return err
	})
}

// jsonString returns the contents of JSON string v (nil for null or a
// non-string), unescaped into m.buf when it has escapes.
func (m *Meta) jsonString(v []byte) []byte {
	if len(v) < 2 || v[0] != '"' {
		return nil
	}
	return m.jsonKey(v[1 : len(v)-1])
}

// jsonKey unescapes a string body (between quotes) when needed.
func (m *Meta) jsonKey(body []byte) []byte {
	if bytes.IndexByte(body, '\\') < 0 {
		return body
	}
	start := len(m.buf)
	out, ok := unescapeInto(m.buf, body)
	if !ok {
		return body
	}
	m.buf = out
	return m.buf[start:len(m.buf):len(m.buf)]
}

var (
	bTrue  = []byte("true")
	bFalse = []byte("false")
	bZero  = []byte("0")
)

// PeekField reads one dotted JSON path ("spec.nodeName", "status.phase",
// "type", "involvedObject.name", "metadata.name") as its string form: a
// string's contents, bool as "true"/"false", numbers in decimal, enums as
// their strings. For a protobuf object a scalar field that is absent reads
// as its Go zero value ("", "false", "0"), which is what kube-apiserver's
// field selectors see; ok is false when the path resolves to nothing (a
// nil pointer, a JSON null or missing key). A JSON object whose APIVersion
// and Kind name a built-in kind gets the same zero values for absent
// non-pointer scalars. Strings are borrowed from obj.Raw unless they had
// JSON escapes. Non-scalar targets are an error. The returned bytes must
// not be modified.
func (s *Schema) PeekField(obj Object, path string) (value []byte, ok bool, err error) {
	switch obj.Format {
	case FormatProtobuf:
		m := s.kinds[gvk{obj.APIVersion, obj.Kind}]
		if m == nil {
			return nil, false, fmt.Errorf("cannot read field %q of %s %s: kind is not in the schema", path, obj.APIVersion, obj.Kind)
		}
		return peekFieldProtobuf(m, obj.Raw, path)
	case FormatJSON:
		v, ok, present, err := peekFieldJSON(obj.Raw, path)
		if err == nil && !ok && present >= 0 {
			// a built-in kind stored as JSON: an absent non-pointer
			// scalar is the Go zero value, as for protobuf
			if m := s.kinds[gvk{obj.APIVersion, obj.Kind}]; m != nil {
				v, ok = zeroForPath(m, path, present)
			}
		}
		return v, ok, err
	}
	return nil, false, fmt.Errorf("cannot read field %q: unknown object format %d", path, obj.Format)
}

func peekFieldProtobuf(m *message, b []byte, path string) ([]byte, bool, error) {
	for {
		seg, rest, more := strings.Cut(path, ".")
		f, p := m.fieldPath(seg)
		if f == nil {
			return nil, false, fmt.Errorf("cannot read field %q: %v has no field %q", path, m.goType, seg)
		}
		// descend through inline structs on the way to f
		for _, inl := range p {
			payload, found, err := lastPayload(b, inl.num)
			if err != nil {
				return nil, false, err
			}
			if !found {
				payload = nil
			}
			b = payload
		}
		if f.card != cSingle {
			return nil, false, fmt.Errorf("cannot read field %q: %s is %w", path, seg, ErrNotScalar)
		}
		o, found, err := lastOcc(b, f.num, f.v.kind)
		if err != nil {
			return nil, false, err
		}
		if more {
			if f.v.kind != kMessage {
				return nil, false, fmt.Errorf("cannot read field %q: %s is not an object", path, seg)
			}
			if !found && f.ptr {
				return nil, false, nil
			}
			m, b, path = f.v.msg, o.p, rest
			continue
		}
		if found && o.wt != f.v.wire {
			return nil, false, corrupt(b, o.start, "wrong wire type")
		}
		if !found {
			if f.ptr {
				return nil, false, nil
			}
			o = occ{wt: f.v.wire}
		}
		switch f.v.kind {
		case kString:
			if o.p == nil {
				o.p = []byte{}
			}
			return o.p, true, nil
		case kBool:
			if o.u != 0 {
				return bTrue, true, nil
			}
			return bFalse, true, nil
		case kInt32:
			return strconv.AppendInt(nil, int64(int32(o.u)), 10), true, nil
		case kInt64:
			return strconv.AppendInt(nil, int64(o.u), 10), true, nil
		case kUint32:
			return strconv.AppendUint(nil, uint64(uint32(o.u)), 10), true, nil
		case kUint64:
			return strconv.AppendUint(nil, o.u, 10), true, nil
		}
		return nil, false, fmt.Errorf("cannot read field %q: %s is %w", path, seg, ErrNotScalar)
	}
}

// zeroForPath returns the zero value's string form of the scalar at path
// when the first present segments exist in the object and every later
// struct on the way is a non-pointer (ok=false otherwise).
func zeroForPath(m *message, path string, present int) ([]byte, bool) {
	for ; ; present-- {
		seg, rest, more := strings.Cut(path, ".")
		f, _ := m.fieldPath(seg)
		if f == nil || (f.ptr && present <= 0) || f.card != cSingle {
			return nil, false
		}
		if more {
			if f.v.kind != kMessage {
				return nil, false
			}
			m, path = f.v.msg, rest
			continue
		}
		switch f.v.kind {
		case kString:
			return []byte{}, true
		case kBool:
			return bFalse, true
		case kInt32, kInt64, kUint32, kUint64:
			return bZero, true
		}
		return nil, false
	}
}

// fieldPath finds the field with JSON name seg, looking into inline
// structs; path lists the inline fields to go through.
func (m *message) fieldPath(seg string) (*field, []*field) {
	for i := range m.fields {
		f := &m.fields[i]
		if !f.inline && f.v.kind != kTypeMeta && f.name == seg {
			return f, nil
		}
	}
	for i := range m.fields {
		f := &m.fields[i]
		if f.inline {
			if g, p := f.v.msg.fieldPath(seg); g != nil {
				return g, append([]*field{f}, p...)
			}
		}
	}
	return nil, nil
}

// lastOcc returns the last occurrence of field num in b; for message kinds
// the payloads of all occurrences are merged.
func lastOcc(b []byte, num int32, k kind) (occ, bool, error) {
	var last occ
	found := 0
	var merged []byte
	for i := 0; i < len(b); {
		o, next, err := readField(b, i)
		if err != nil {
			return occ{}, false, corrupt(b, i, err.Error())
		}
		if o.num == uint64(num) {
			if found > 0 && mergeable(k) && o.wt == 2 {
				if found == 1 {
					merged = append([]byte(nil), last.p...)
				}
				merged = append(merged, o.p...)
			}
			last = o
			found++
		}
		i = next
	}
	if found > 1 && merged != nil {
		last.p = merged
	}
	return last, found > 0, nil
}

func lastPayload(b []byte, num int32) ([]byte, bool, error) {
	o, found, err := lastOcc(b, num, kMessage)
	return o.p, found, err
}

// peekFieldJSON reads path from a JSON object. present is the number of
// leading segments found as objects when the value is missing (-1 when
// the path ended at a JSON null: a nil pointer).
func peekFieldJSON(raw []byte, path string) (value []byte, ok bool, present int, err error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false, 0, corrupt(raw, i, "JSON value is not an object")
	}
	for {
		seg, rest, more := strings.Cut(path, ".")
		v, _, _, err := findTopKey(raw, i, seg)
		if err != nil {
			return nil, false, 0, err
		}
		if v.start < 0 {
			return nil, false, present, nil
		}
		if raw[v.start] == 'n' {
			return nil, false, -1, nil
		}
		val := raw[v.start:v.end]
		if more {
			if val[0] != '{' {
				return nil, false, 0, fmt.Errorf("cannot read field %q: %s is not an object", path, seg)
			}
			raw, i, path = raw[:v.end], v.start, rest
			present++
			continue
		}
		switch val[0] {
		case '"':
			body := val[1 : len(val)-1]
			if bytes.IndexByte(body, '\\') < 0 {
				return body, true, present, nil
			}
			u, ok := unescapeInto(nil, body)
			if !ok {
				return nil, false, 0, corrupt(val, 0, "bad JSON string escape")
			}
			return u, true, present, nil
		case '{', '[':
			return nil, false, 0, fmt.Errorf("cannot read field %q: %s is %w", path, seg, ErrNotScalar)
		}
		return val, true, present, nil
	}
}
