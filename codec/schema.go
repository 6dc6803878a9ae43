package codec

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// Schema describes, for every kind of a runtime.Scheme, how its protobuf
// encoding maps to the JSON that encoding/json writes for the Go type. It is
// built once by reflection over the `protobuf:"..."` and `json:"..."` struct
// tags of the registered Go types and is immutable afterwards: safe for
// concurrent use.
type Schema struct {
	kinds      map[gvk]*message
	objectMeta *message
	pool       sync.Pool // *state
}

type gvk struct{ apiVersion, kind string }

// kind is how a value is encoded on both sides.
type kind uint8

const (
	kString kind = iota + 1
	kBool
	kInt32
	kInt64
	kUint32
	kUint64
	kFloat64
	kFloat32
	kBytes
	kMessage   // a struct: JSON object of its fields
	kTime      // metav1.Time
	kMicroTime // metav1.MicroTime
	kDuration  // metav1.Duration
	kQuantity  // resource.Quantity
	kIntOrStr  // intstr.IntOrString
	kRawExt    // runtime.RawExtension
	kFieldsV1  // metav1.FieldsV1
	kWrapped   // named slice type with its own proto message {repeated items = 1}
	kTypeMeta  // metav1.TypeMeta: not in protobuf, kind/apiVersion from the envelope
)

// card is the cardinality of a field.
type card uint8

const (
	cSingle card = iota
	cSlice
	cMap
)

// vdesc describes one value (a field's value, a slice element, a map value).
type vdesc struct {
	kind kind
	wire uint8    // protobuf wire type of one value: 0 varint, 1 fixed64, 2 bytes, 5 fixed32
	msg  *message // kMessage
	elem *vdesc   // kWrapped: the element
}

// field is one JSON-visible field of a struct, in encoding/json order.
type field struct {
	name      string
	key       []byte // `"name":`
	num       int32  // protobuf field number; 0 when the field is not in protobuf
	v         vdesc
	card      card
	mapVal    *vdesc // cMap
	ptr       bool   // Go pointer: absent means nil
	omitEmpty bool
	omitZero  bool
	inline    bool // embedded struct flattened into its parent's JSON object
	isRV      bool // ObjectMeta.resourceVersion
	// skipAbsent: nothing is written when the field is absent from the
	// protobuf (nil pointer/slice/map or zero scalar with omitempty).
	skipAbsent bool
}

// message describes a Go struct that is a protobuf message.
type message struct {
	goType reflect.Type
	fields []field // JSON order
	byNum  []int16 // protobuf field number -> index in fields, -1 when unknown
}

func (m *message) index(num uint64) int {
	if num < uint64(len(m.byNum)) {
		return int(m.byNum[num])
	}
	return -1
}

var defaultSchema = sync.OnceValues(func() (*Schema, error) { return NewSchema(scheme.Scheme) })

// DefaultSchema returns the Schema of client-go's kubernetes scheme
// (k8s.io/client-go/kubernetes/scheme), built on first use. It panics if
// the scheme's types cannot be described, which is a bug in codec.
func DefaultSchema() *Schema {
	s, err := defaultSchema()
	if err != nil {
		panic("BUG: codec: cannot build default schema: " + err.Error())
	}
	return s
}

// Known reports whether the schema has the kind.
func (s *Schema) Known(apiVersion, kind string) bool {
	_, ok := s.kinds[gvk{apiVersion, kind}]
	return ok
}

// JSONOptions tunes AppendJSON.
type JSONOptions struct {
	OmitTypeMeta bool // items of a built-in list carry no kind/apiVersion
}

var (
	typeTime       = reflect.TypeFor[metav1.Time]()
	typeMicroTime  = reflect.TypeFor[metav1.MicroTime]()
	typeDuration   = reflect.TypeFor[metav1.Duration]()
	typeQuantity   = reflect.TypeFor[resource.Quantity]()
	typeIntOrStr   = reflect.TypeFor[intstr.IntOrString]()
	typeRawExt     = reflect.TypeFor[runtime.RawExtension]()
	typeFieldsV1   = reflect.TypeFor[metav1.FieldsV1]()
	typeTypeMeta   = reflect.TypeFor[metav1.TypeMeta]()
	typeObjectMeta = reflect.TypeFor[metav1.ObjectMeta]()
	typeUnknown    = reflect.TypeFor[runtime.Unknown]()
	typeBytes      = reflect.TypeFor[[]byte]()
)

// NewSchema builds a Schema from the Go types registered in s (internal
// versions are skipped). Kinds whose Go type has no protobuf tags (e.g.
// kinds that are JSON-only) are left out.
func NewSchema(s *runtime.Scheme) (*Schema, error) {
	b := &builder{msgs: map[reflect.Type]*message{}}
	sc := &Schema{kinds: map[gvk]*message{}}
	for k, rt := range s.AllKnownTypes() {
		if k.Version == runtime.APIVersionInternal || rt.Kind() != reflect.Struct {
			continue
		}
		if !hasProtobufTags(rt) {
			continue
		}
		m, err := b.message(rt)
		if err != nil {
			return nil, fmt.Errorf("cannot describe %v (%v): %w", k, rt, err)
		}
		sc.kinds[gvk{k.GroupVersion().String(), k.Kind}] = m
	}
	om, err := b.message(typeObjectMeta)
	if err != nil {
		return nil, fmt.Errorf("cannot describe ObjectMeta: %w", err)
	}
	sc.objectMeta = om
	sc.pool.New = func() any { return &state{s: sc} }
	return sc, nil
}

func hasProtobufTags(rt reflect.Type) bool {
	for i := 0; i < rt.NumField(); i++ {
		if rt.Field(i).Tag.Get("protobuf") != "" {
			return true
		}
	}
	return false
}

type builder struct {
	msgs map[reflect.Type]*message
}

// message returns the description of struct type rt. Recursive types are
// handled by registering the message before its fields are described.
func (b *builder) message(rt reflect.Type) (*message, error) {
	if m, ok := b.msgs[rt]; ok {
		return m, nil
	}
	m := &message{goType: rt}
	b.msgs[rt] = m
	maxNum := int32(0)
	for i := 0; i < rt.NumField(); i++ {
		sf := rt.Field(i)
		f, ft, ok, err := jsonField(sf)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if f.num, err = protobufNum(sf); err != nil {
			return nil, err
		}
		maxNum = max(maxNum, f.num)
		if err := b.fieldValue(&f, sf.Name, ft); err != nil {
			return nil, err
		}
		if rt == typeObjectMeta && f.name == "resourceVersion" {
			f.isRV = true
		}
		if f.omitZero && !(f.ptr || f.card != cSingle || f.v.kind == kTime || f.v.kind == kMicroTime || f.v.kind <= kBytes) {
			return nil, fmt.Errorf("field %s: omitzero on %v is not supported", sf.Name, ft)
		}
		m.fields = append(m.fields, f)
	}
	setSkipAbsent(m)
	if err := checkNames(m); err != nil {
		return nil, err
	}
	if err := indexByNum(m, maxNum); err != nil {
		return nil, err
	}
	return m, nil
}

// jsonField returns the field of struct field sf as its json tag has it
// (name, key, options, inline) and the Go type it holds (a pointer's
// element: f.ptr); ok is false for a field JSON leaves out.
func jsonField(sf reflect.StructField) (f field, ft reflect.Type, ok bool, err error) {
	if !sf.IsExported() && !sf.Anonymous {
		return f, nil, false, nil
	}
	jtag := sf.Tag.Get("json")
	if jtag == "-" {
		return f, nil, false, nil
	}
	jname, jopts, _ := strings.Cut(jtag, ",")
	f = field{name: jname}
	for _, o := range strings.Split(jopts, ",") {
		switch o {
		case "omitempty":
			f.omitEmpty = true
		case "omitzero":
			f.omitZero = true
		case "string":
			return f, nil, false, fmt.Errorf("field %s: json ,string option is not supported", sf.Name)
		}
	}
	ft = sf.Type
	if sf.Anonymous && jname == "" {
		et := ft
		if et.Kind() == reflect.Pointer {
			return f, nil, false, fmt.Errorf("field %s: embedded pointer is not supported", sf.Name)
		}
		if et.Kind() == reflect.Struct {
			f.inline = true
		} else if !sf.IsExported() {
			return f, nil, false, nil
		}
	}
	if f.name == "" {
		f.name = sf.Name
	}
	f.key = strconv.AppendQuote(nil, f.name) // JSON names in k8s are plain ASCII
	f.key = append(f.key, ':')
	if ft.Kind() == reflect.Pointer {
		f.ptr = true
		ft = ft.Elem()
	}
	return f, ft, true, nil
}

// protobufNum returns the field number of sf's protobuf tag (0 without
// one).
//
// Only the field number is taken from the protobuf tag. The wire type and
// cardinality follow the Go type, as in the generated code: some tags
// disagree with it (DeleteOptions.propagationPolicy says varint and is
// written as a string, flowcontrol resourceRules says opt and is
// repeated). Packed and unpacked repeated scalars are both accepted when
// reading.
func protobufNum(sf reflect.StructField) (int32, error) {
	ptag := sf.Tag.Get("protobuf")
	if ptag == "" {
		return 0, nil
	}
	parts := strings.Split(ptag, ",")
	if len(parts) < 2 {
		return 0, fmt.Errorf("field %s: bad protobuf tag %q", sf.Name, ptag)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 || n > 1<<15 {
		return 0, fmt.Errorf("field %s: bad protobuf tag %q", sf.Name, ptag)
	}
	return int32(n), nil
}

// fieldValue sets f's cardinality and value description from the Go type
// ft it holds (name is the Go field's, for errors).
func (b *builder) fieldValue(f *field, name string, ft reflect.Type) error {
	switch {
	case ft == typeTypeMeta && f.inline:
		f.v = vdesc{kind: kTypeMeta}
		f.num = 0
		f.inline = false
	case ft.Kind() == reflect.Map:
		if ft.Key().Kind() != reflect.String {
			return fmt.Errorf("field %s: map key %v is not supported", name, ft.Key())
		}
		f.card = cMap
		vt := ft.Elem()
		vd, err := b.value(vt)
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		if vd.wire != 2 || f.ptr {
			return fmt.Errorf("field %s: map value %v is not supported", name, vt)
		}
		f.mapVal = &vd
		f.v = vdesc{kind: kMessage, wire: 2}
	case ft.Kind() == reflect.Slice && ft != typeBytes && !isWrapped(ft):
		f.card = cSlice
		et := ft.Elem()
		if et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		vd, err := b.value(et)
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		f.v = vd
	default:
		vd, err := b.value(ft)
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		f.v = vd
		if f.inline && vd.kind != kMessage {
			return fmt.Errorf("field %s: inline %v is not a plain struct", name, ft)
		}
	}
	return nil
}

// setSkipAbsent marks the fields of m that are left out when absent from
// the protobuf message (as encoding/json leaves out their zero values).
func setSkipAbsent(m *message) {
	for i := range m.fields {
		f := &m.fields[i]
		if f.v.kind == kTypeMeta || f.inline || f.isRV || f.name == "metadata" {
			continue
		}
		switch {
		case f.card != cSingle:
			f.skipAbsent = f.omitEmpty || f.omitZero
		case f.ptr:
			f.skipAbsent = f.omitEmpty || f.omitZero
		default:
			f.skipAbsent = f.omitZero || (f.omitEmpty && zeroIsEmpty(f.v.kind))
		}
	}
}

// indexByNum builds m.byNum, the index of m's fields by protobuf field
// number (up to maxNum).
func indexByNum(m *message, maxNum int32) error {
	m.byNum = make([]int16, maxNum+1)
	for i := range m.byNum {
		m.byNum[i] = -1
	}
	for i, f := range m.fields {
		if f.num != 0 {
			if m.byNum[f.num] != -1 {
				return fmt.Errorf("duplicate protobuf field number %d in %v", f.num, m.goType)
			}
			m.byNum[f.num] = int16(i)
		}
	}
	return nil
}

// checkNames rejects structs whose flattened JSON names collide: encoding/json
// would drop or shadow fields there, which the transcoder does not model.
func checkNames(m *message) error {
	seen := map[string]bool{}
	var walk func(m *message) error
	walk = func(m *message) error {
		for _, f := range m.fields {
			if f.inline {
				if err := walk(f.v.msg); err != nil {
					return err
				}
				continue
			}
			if f.v.kind == kTypeMeta {
				for _, n := range []string{"kind", "apiVersion"} {
					if seen[n] {
						return fmt.Errorf("json name %q of %v is ambiguous", n, m.goType)
					}
					seen[n] = true
				}
				continue
			}
			if seen[f.name] {
				return fmt.Errorf("json name %q of %v is ambiguous", f.name, m.goType)
			}
			seen[f.name] = true
		}
		return nil
	}
	return walk(m)
}

// isWrapped reports whether a named slice type has its own protobuf
// message {repeated T items = 1} (e.g. authorization/v1 ExtraValue).
func isWrapped(t reflect.Type) bool {
	if t.Kind() != reflect.Slice || t.Name() == "" || t == typeBytes {
		return false
	}
	_, ok := reflect.PointerTo(t).MethodByName("Unmarshal")
	return ok
}

// value describes a non-slice, non-map Go type (slices only as []byte and
// wrapped named slices).
func (b *builder) value(t reflect.Type) (vdesc, error) {
	switch t {
	case typeTime:
		return vdesc{kind: kTime, wire: 2}, nil
	case typeMicroTime:
		return vdesc{kind: kMicroTime, wire: 2}, nil
	case typeDuration:
		return vdesc{kind: kDuration, wire: 2}, nil
	case typeQuantity:
		return vdesc{kind: kQuantity, wire: 2}, nil
	case typeIntOrStr:
		return vdesc{kind: kIntOrStr, wire: 2}, nil
	case typeRawExt:
		return vdesc{kind: kRawExt, wire: 2}, nil
	case typeFieldsV1:
		return vdesc{kind: kFieldsV1, wire: 2}, nil
	case typeUnknown:
		return vdesc{}, fmt.Errorf("runtime.Unknown field is not supported")
	case typeBytes:
		return vdesc{kind: kBytes, wire: 2}, nil
	}
	if isWrapped(t) {
		et := t.Elem()
		ed, err := b.value(et)
		if err != nil {
			return vdesc{}, err
		}
		return vdesc{kind: kWrapped, wire: 2, elem: &ed}, nil
	}
	switch t.Kind() {
	case reflect.String:
		return vdesc{kind: kString, wire: 2}, nil
	case reflect.Bool:
		return vdesc{kind: kBool}, nil
	case reflect.Int32:
		return vdesc{kind: kInt32}, nil
	case reflect.Int64, reflect.Int:
		return vdesc{kind: kInt64}, nil
	case reflect.Uint32:
		return vdesc{kind: kUint32}, nil
	case reflect.Uint64:
		return vdesc{kind: kUint64}, nil
	case reflect.Float64:
		return vdesc{kind: kFloat64, wire: 1}, nil
	case reflect.Float32:
		return vdesc{kind: kFloat32, wire: 5}, nil
	case reflect.Struct:
		if _, ok := t.MethodByName("MarshalJSON"); ok {
			return vdesc{}, fmt.Errorf("type %v has a custom MarshalJSON the transcoder does not know", t)
		}
		if _, ok := reflect.PointerTo(t).MethodByName("MarshalJSON"); ok {
			return vdesc{}, fmt.Errorf("type %v has a custom MarshalJSON the transcoder does not know", t)
		}
		m, err := b.message(t)
		if err != nil {
			return vdesc{}, err
		}
		return vdesc{kind: kMessage, wire: 2, msg: m}, nil
	}
	return vdesc{}, fmt.Errorf("type %v is not supported", t)
}
