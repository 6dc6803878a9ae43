package cache

import (
	"bytes"
	"encoding/binary"
	"math"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// entry is one stored object: a header followed, in the same allocation, by
// key | value as stored in etcd | derived attrs (see newEntryBlock in
// unsafe.go). An entry is immutable once built and shared by the tree, its
// snapshots, the history and watchers.
type entry struct {
	rev     int64 // mod_revision
	keyLen  uint32
	valLen  uint32
	attrLen uint32
	// nameOff is where the name starts in the key (after prefix[ns/]).
	nameOff uint16
	nsOff   uint16 // where the namespace starts; == nameOff when cluster-scoped
	valid   bool   // attrs were derived (the value could be peeked)
	// sized says the last plainSizesLen bytes of the attrs are the
	// codec.ItemSizes of the value's plaintext (a value held encrypted).
	sized bool
}

// entryOverhead approximates the bytes an entry costs besides its block:
// its slot in a leaf plus a share of the tree's nodes.
const entryOverhead = 8 + 16

func (e *entry) key() string { return bytesutil.ToUnsafeString(e.data()[:e.keyLen]) }
func (e *entry) value() []byte {
	return e.data()[e.keyLen : e.keyLen+e.valLen : e.keyLen+e.valLen]
}
func (e *entry) attrs() []byte { return e.data()[e.keyLen+e.valLen:] }
func (e *entry) cost() int64 {
	return int64(mallocSize(entryHeader+int(e.keyLen+e.valLen+e.attrLen))) + entryOverhead
}

// deriver computes entries for one resource. It is owned by the resource's
// goroutine (it reuses m).
type deriver struct {
	schema *codec.Schema
	prefix string
	ns     bool
	fields []string
	m      codec.Meta
	scr    []byte
	// decrypt, when set, returns a value's plaintext (Config.Decrypt);
	// hold keeps the plaintext in the entry (Config.HoldDecrypted).
	decrypt func(key, value []byte) ([]byte, error)
	hold    bool
}

// newEntry copies key and value into a new entry and derives its attributes
// (labels, then the resource's fields) with the codec's peek, from the
// value's plaintext when it is encrypted (see Config.Decrypt).
func (d *deriver) newEntry(key, value []byte, rev int64) *entry {
	d.scr = d.scr[:0]
	plain := value
	if d.decrypt != nil {
		p, err := d.decrypt(key, value)
		if err != nil {
			p = nil // attributes invalid: readers decrypt (and fail) themselves
		}
		plain = p
		if d.hold && p != nil {
			value = p
		}
	}
	valid := plain != nil && d.derive(plain)
	sized := valid && d.decrypt != nil && !d.hold && bytes.HasPrefix(value, encPrefix) && d.appendSizes(plain)
	e, data := newEntryBlock(len(key), len(value), len(d.scr))
	copy(data, key)
	copy(data[len(key):], value)
	copy(data[len(key)+len(value):], d.scr)
	e.rev, e.valid, e.sized = rev, valid, sized
	setNameOffsets(e, key, d.prefix, d.ns)
	return e
}

// encPrefix starts a value kube-apiserver encrypted at rest.
var encPrefix = []byte("k8s:enc:")

// plainSizesLen is the size of the codec.ItemSizes record at the end of
// a sized entry's attrs: format (1 byte), raw and meta (4 bytes each,
// little endian; meta 0xffffffff for -1).
const plainSizesLen = 9

// appendSizes appends the plainSizesLen record of plain's codec.ItemSizes
// to d.scr, so that the protobuf LIST's size pass over a value held
// encrypted needs no decryption (proxy, lister.item). It reports whether
// it did.
func (d *deriver) appendSizes(plain []byte) bool {
	obj, err := codec.Unwrap(plain)
	if err != nil {
		return false
	}
	z := codec.SizesOf(obj)
	if z.Raw > math.MaxUint32-1 || z.Meta > math.MaxInt32 || z.Format > math.MaxUint8 {
		return false
	}
	d.scr = append(d.scr, byte(z.Format))
	d.scr = binary.LittleEndian.AppendUint32(d.scr, uint32(z.Raw))
	d.scr = binary.LittleEndian.AppendUint32(d.scr, uint32(int32(z.Meta)))
	return true
}

// setNameOffsets records where namespace and name start in key.
func setNameOffsets(e *entry, key []byte, prefix string, namespaced bool) {
	rest := key
	if len(key) >= len(prefix) && string(key[:len(prefix)]) == prefix {
		e.nsOff = uint16(min(len(prefix), 0xffff))
		rest = key[len(prefix):]
	}
	e.nameOff = e.nsOff
	if namespaced {
		if i := bytes.IndexByte(rest, '/'); i >= 0 {
			e.nameOff = uint16(min(int(e.nsOff)+i+1, 0xffff))
		}
	}
}

// derive appends the encoded attributes of value to d.scr:
// uvarint(#labels) {uvarint(len k) k uvarint(len v) v}... then per field
// uvarint(len v + 1) v, or 0 when absent.
func (d *deriver) derive(value []byte) bool {
	if d.schema == nil {
		return false
	}
	obj, err := codec.Unwrap(value)
	if err != nil {
		return false
	}
	d.m.Reset()
	if err := d.schema.PeekMeta(obj, &d.m); err != nil {
		return false
	}
	d.scr = binary.AppendUvarint(d.scr, uint64(len(d.m.Labels)))
	for _, kv := range d.m.Labels {
		d.scr = binary.AppendUvarint(d.scr, uint64(len(kv.Key)))
		d.scr = append(d.scr, kv.Key...)
		d.scr = binary.AppendUvarint(d.scr, uint64(len(kv.Value)))
		d.scr = append(d.scr, kv.Value...)
	}
	for _, f := range d.fields {
		v, ok, err := d.schema.PeekField(obj, f)
		// A field the peek cannot read as a scalar (status.podIPs, a
		// list) reads as absent: it used to invalidate every attribute
		// of every Pod, and a cached watch of Pods by spec.nodeName or
		// by labels then matched nothing.
		if err != nil || !ok {
			d.scr = append(d.scr, 0)
			continue
		}
		d.scr = binary.AppendUvarint(d.scr, uint64(len(v))+1)
		d.scr = append(d.scr, v...)
	}
	return true
}

// Attrs is the derived data of one object that selectors read: namespace
// and name (from the key), labels and the resource's indexed fields (from
// the value, peeked once when the object was stored). It borrows the cache's
// immutable bytes and may be kept as long as needed. The zero Attrs has no
// attributes.
type Attrs struct {
	e      *entry
	fields []string
}

// Valid reports whether the labels and fields could be derived (false for
// values the codec cannot peek, e.g. encrypted ones): the caller must then
// peek the value itself.
func (a Attrs) Valid() bool { return a.e != nil && a.e.valid }

// Key and Value return the object's etcd key and its value as the cache
// holds it (as stored, or decrypted with Config.HoldDecrypted), for a
// caller that must evaluate a selector itself (Valid false). They borrow
// the cache's immutable bytes; nil for the zero Attrs.
func (a Attrs) Key() []byte {
	if a.e == nil {
		return nil
	}
	return a.e.data()[:a.e.keyLen:a.e.keyLen]
}

// Value: see Key.
func (a Attrs) Value() []byte {
	if a.e == nil {
		return nil
	}
	return a.e.value()
}

// PlainSizes returns the codec.ItemSizes of the plaintext of a value the
// cache holds encrypted (recorded when the value was decrypted to derive
// its attributes); ok is false for other values.
func (a Attrs) PlainSizes() (z codec.ItemSizes, ok bool) {
	if a.e == nil || !a.e.sized {
		return codec.ItemSizes{}, false
	}
	b := a.e.attrs()
	b = b[len(b)-plainSizesLen:]
	z.Format = codec.Format(b[0])
	z.Raw = int(binary.LittleEndian.Uint32(b[1:]))
	z.Meta = int(int32(binary.LittleEndian.Uint32(b[5:])))
	return z, true
}

// Namespace returns the object's namespace ("" when cluster-scoped).
func (a Attrs) Namespace() string {
	if a.e == nil || a.e.nameOff == a.e.nsOff {
		return ""
	}
	return a.e.key()[a.e.nsOff : a.e.nameOff-1]
}

// Name returns the object's name.
func (a Attrs) Name() string {
	if a.e == nil {
		return ""
	}
	return a.e.key()[a.e.nameOff:]
}

// Label returns the value of label key.
func (a Attrs) Label(key string) (string, bool) {
	if !a.Valid() {
		return "", false
	}
	b := a.e.attrs()
	n, b := uvarint(b)
	for range n {
		var k, v []byte
		k, b = lenPrefixed(b)
		v, b = lenPrefixed(b)
		if bytesutil.ToUnsafeString(k) == key {
			return bytesutil.ToUnsafeString(v), true
		}
	}
	return "", false
}

// Labels calls fn for every label in stored order.
func (a Attrs) Labels(fn func(k, v string)) {
	if !a.Valid() {
		return
	}
	b := a.e.attrs()
	n, b := uvarint(b)
	for range n {
		var k, v []byte
		k, b = lenPrefixed(b)
		v, b = lenPrefixed(b)
		fn(bytesutil.ToUnsafeString(k), bytesutil.ToUnsafeString(v))
	}
}

// Field returns the value of a field selector field: metadata.name,
// metadata.namespace, or one of the resource's Spec.Fields.
func (a Attrs) Field(path string) (string, bool) {
	switch path {
	case "metadata.name":
		return a.Name(), a.e != nil
	case "metadata.namespace":
		return a.Namespace(), a.e != nil
	}
	if !a.Valid() {
		return "", false
	}
	b := a.e.attrs()
	n, b := uvarint(b)
	for range n {
		_, b = lenPrefixed(b)
		_, b = lenPrefixed(b)
	}
	for _, f := range a.fields {
		l, rest := uvarint(b)
		if l == 0 {
			if f == path {
				return "", false
			}
			b = rest
			continue
		}
		v := rest[:l-1]
		if f == path {
			return bytesutil.ToUnsafeString(v), true
		}
		b = rest[l-1:]
	}
	return "", false
}

// LabelSet adapts Attrs to k8s.io/apimachinery/pkg/labels.Labels
// (Has/Get), so that labels.Selector.Matches(a.LabelSet()) works.
type LabelSet struct{ a Attrs }

// LabelSet returns the labels as a labels.Labels.
func (a Attrs) LabelSet() LabelSet { return LabelSet{a} }

// Has reports whether the label exists.
func (l LabelSet) Has(key string) bool { _, ok := l.a.Label(key); return ok }

// Get returns the label's value or "".
func (l LabelSet) Get(key string) string { v, _ := l.a.Label(key); return v }

// Lookup returns the label's value and whether it exists.
func (l LabelSet) Lookup(key string) (string, bool) { return l.a.Label(key) }

// FieldSet adapts Attrs to k8s.io/apimachinery/pkg/fields.Fields (Has/Get),
// so that fields.Selector.Matches(a.FieldSet()) works. An absent field reads
// as "", as kube-apiserver's field sets do.
type FieldSet struct{ a Attrs }

// FieldSet returns the fields as a fields.Fields.
func (a Attrs) FieldSet() FieldSet { return FieldSet{a} }

// Has reports whether the field is known for the resource.
func (f FieldSet) Has(path string) bool {
	if path == "metadata.name" || path == "metadata.namespace" {
		return true
	}
	for _, p := range f.a.fields {
		if p == path {
			return true
		}
	}
	return false
}

// Get returns the field's value or "".
func (f FieldSet) Get(path string) string { v, _ := f.a.Field(path); return v }

func uvarint(b []byte) (uint64, []byte) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil
	}
	return v, b[n:]
}

func lenPrefixed(b []byte) ([]byte, []byte) {
	l, b := uvarint(b)
	if uint64(len(b)) < l {
		return nil, nil
	}
	return b[:l], b[l:]
}
