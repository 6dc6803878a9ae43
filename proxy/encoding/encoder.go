package encoding

import (
	"errors"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/resource"
)

// Encoder writes one request's response in its negotiated representation.
// Methods append to dst and return the grown slice; on error dst is
// returned unchanged in length. An encoder is used by one request at a time.
type Encoder interface {
	// Output is the negotiated representation (metrics label, frame key).
	Output() Output

	// Object appends one object (GET).
	Object(dst []byte, obj codec.Object, rv int64) ([]byte, error)

	// Layout is where a list's encoding puts what precedes its items.
	Layout() ListLayout
	// ItemSize is an item's encoded size (LayoutSized: the LIST computes
	// the items' total with it first).
	ItemSize(obj codec.Object, rv int64) (int, error)
	// ItemSizeOf is ItemSize from the object's codec.ItemSizes; ok is
	// false when they do not tell (then ItemSize is asked).
	ItemSizeOf(z codec.ItemSizes, rv int64) (n int, ok bool)
	// ListHead appends a list's start up to its first item; itemsSize is
	// the items' total size (LayoutSized).
	ListHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte
	// ListItem appends one item; first is true for the list's first.
	ListItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error)
	// ListTail appends a list's end; lm is read for LayoutMetaLast.
	ListTail(dst []byte, lm codec.ListMeta) []byte

	// WatchEvent appends one ADDED/MODIFIED/DELETED frame.
	WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error)
	// WatchBookmark appends a BOOKMARK frame at rv.
	WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte
	// Bookmarks reports whether the stream carries bookmarks besides the
	// initial-events-end one (a Table stream does not).
	Bookmarks() bool
	// WatchStatus appends an ERROR frame.
	WatchStatus(dst []byte, s *codec.Status) []byte
	// Shareable reports whether the watch frames depend only on the event
	// (the proxy's frame cache may share them between watchers).
	Shareable() bool

	// Status appends a Status as a whole response and returns its
	// Content-Type.
	Status(dst []byte, s *codec.Status) ([]byte, string)
	// Passthrough reports whether obj is served as stored (its bytes
	// copied with the resourceVersion patched), for the metrics.
	Passthrough(obj codec.Object) bool

	// Cached is how the rendering cache may serve this encoder's
	// objects; nil when it may not. NewEncoder chooses.
	Cached() *CachedJSON
}

// ListLayout is where a list's encoding puts what a LIST must know before
// the first item: what the proxy's LIST plans before the first byte.
type ListLayout uint8

const (
	// LayoutMetaFirst: the list metadata (continue, remainingItemCount)
	// in the head (JSON, Table, partial JSON).
	LayoutMetaFirst ListLayout = iota
	// LayoutSized: the metadata and the items' total size in the head
	// (protobuf, partial protobuf).
	LayoutSized
	// LayoutMetaLast: the metadata in the tail, after the items (YAML, a
	// custom resource's JSON): nothing to plan.
	LayoutMetaLast
)

// CachedJSON is how the rendering cache serves an encoder whose output is
// built from an object's JSON, the same for every request: NewEncoder
// gives one to the JSON encoder of a built-in resource and to a built-in
// Table whose printer reads the object's JSON. Only the JSON encoder's
// objects, items and watch events are the JSON itself (row nil); its list
// items are a built-in list's, without apiVersion and kind.
type CachedJSON struct {
	Schema *codec.Schema
	// row, for a Table, appends the row printed from the object's JSON
	// js (a separator first unless first); nil for JSON.
	Row func(dst, js []byte, obj codec.Object, rv int64, first bool) ([]byte, error)
}

// errJSONAsProtobuf: a custom resource (or a resource stored with
// --storage-media-type=application/json) asked for as protobuf.
var errJSONAsProtobuf = errors.New("object is stored as JSON and cannot be served as protobuf")

// encoding is what every encoder of a request shares.
type encoding struct {
	sc    *codec.Schema
	r     *resource.Resource // nil for a Status-only encoder
	out   Output
	cache *CachedJSON // set by newEncoder
}

func (e *encoding) Output() Output      { return e.out }
func (e *encoding) Cached() *CachedJSON { return e.cache }

// NewEncoder returns the encoder of out for resource r. cc are a custom
// resource's Table columns (nil otherwise); inc is the includeObject
// parameter of Table rows; now is the time Table Age cells are computed
// against for a GET or LIST (watch events use their own time).
func NewEncoder(sc *codec.Schema, r *resource.Resource, out Output, cc *codec.CustomColumns, inc codec.IncludeObjectPolicy, now time.Time) Encoder {
	e := encoding{sc: sc, r: r, out: out}
	var conv *converter
	if r != nil && r.Conversion != nil {
		conv = &converter{from: r.Conversion.From, to: r.APIVersion(), kind: r.Kind}
	}
	switch out.Target {
	case TargetTable:
		te := &tableEncoder{encoding: e, cc: cc, inc: inc, now: now, conv: conv}
		te.pgroup, te.presource = printerOf(r)
		if cc == nil && conv == nil && !sc.TableRowFromProtobuf(te.pgroup, te.presource, inc) {
			// The printer reads the object's JSON: from the
			// rendering cache (rows read the clock: not cached).
			te.cache = &CachedJSON{Schema: sc, Row: te.rowFromJSON}
		}
		return te
	case TargetPartial:
		// PartialObjectMetadata is the stored object's metadata, as
		// kube-apiserver takes it from the internal object (no
		// autoscaling/v1 annotations): no conversion.
		if out.Format == FormatProtobuf {
			return &partialProtobufEncoder{protobufEncoder{encoding: e}}
		}
		return &partialJSONEncoder{jsonEncoder{encoding: e}}
	}
	var enc Encoder
	switch out.Format {
	case FormatProtobuf:
		enc = &protobufEncoder{encoding: e}
	case FormatYAML:
		enc = &yamlEncoder{jsonEncoder{encoding: e}}
	default:
		if r != nil && r.Custom {
			enc = &unstructuredJSONEncoder{jsonEncoder{encoding: e}}
		} else {
			je := &jsonEncoder{encoding: e}
			if conv == nil {
				je.cache = &CachedJSON{Schema: sc}
			}
			enc = je
		}
	}
	if conv != nil {
		return &convertEncoder{Encoder: enc, conv: conv}
	}
	return enc
}

// printerOf returns the group and resource of r's Table printer: of the
// registry that serves it in kube-apiserver, which prints the internal
// object whatever the version asked for (events.k8s.io/v1 Events get the
// core Event table, autoscaling/v1 HPAs the one HPA table).
func printerOf(r *resource.Resource) (group, res string) {
	if r == nil {
		return "", ""
	}
	return r.StorageGroup(), r.Resource
}

// converter converts the stored objects of a resource served at a version
// whose schema differs from the stored one (resource.Conversion): the slow
// path, one object at a time (codec.Convert).
type converter struct{ from, to, kind string }

// convert returns obj converted, with resourceVersion rv set in it.
func (c *converter) convert(obj codec.Object, rv int64) (codec.Object, error) {
	return codec.Convert(obj, c.from, c.to, c.kind, rv)
}

// convertEncoder is the encoder of a JSON, YAML or protobuf response of a
// converted resource: each object is converted with its resourceVersion
// set, then written by the format's encoder with nothing to patch (rv 0),
// so that it is the message apimachinery's serializer writes for it.
type convertEncoder struct {
	Encoder
	conv *converter
}

func (e *convertEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.Encoder.Object(dst, c, 0)
}

func (e *convertEncoder) ItemSize(obj codec.Object, rv int64) (int, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return 0, err
	}
	return e.Encoder.ItemSize(c, 0)
}

func (e *convertEncoder) ListItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.Encoder.ListItem(dst, c, 0, first)
}

func (e *convertEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.Encoder.WatchEvent(dst, t, c, 0)
}

func (e *convertEncoder) Passthrough(codec.Object) bool { return false }

// TableColumns returns the Table columns of a custom resource (its
// additionalPrinterColumns) when out is a Table, else nil.
func TableColumns(r *resource.Resource, out Output) (*codec.CustomColumns, error) {
	if out.Target != TargetTable || !r.Custom {
		return nil, nil
	}
	cols := make([]codec.PrinterColumn, len(r.Columns))
	for i, c := range r.Columns {
		cols[i] = codec.PrinterColumn{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description,
			Priority: c.Priority, JSONPath: c.JSONPath}
	}
	return codec.NewCustomColumns(cols)
}

// unstructuredJSONEncoder: application/json of a custom resource, whose
// lists kube-apiserver writes as an UnstructuredList (sorted keys: kind
// and metadata after the items).
type unstructuredJSONEncoder struct{ jsonEncoder }

func (e *unstructuredJSONEncoder) Layout() ListLayout { return LayoutMetaLast }

func (e *unstructuredJSONEncoder) ListHead(dst []byte, _ codec.ListMeta, _ int) []byte {
	return codec.AppendJSONUnstructuredListHead(dst, e.r.APIVersion())
}

func (e *unstructuredJSONEncoder) ListTail(dst []byte, lm codec.ListMeta) []byte {
	return append(codec.AppendJSONUnstructuredListTail(dst, e.r.ListKind, lm), '\n')
}

// jsonEncoder: application/json, the objects themselves.
type jsonEncoder struct{ encoding }

var _ Encoder = (*jsonEncoder)(nil)

// object: kube-apiserver's JSON serializer (json.Encoder) ends a whole
// response with a newline; so do list tails and Statuses.
func (e *jsonEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	dst, err := e.sc.AppendJSON(dst, obj, rv, codec.JSONOptions{})
	if err != nil {
		return dst, err
	}
	return append(dst, '\n'), nil
}

func (e *jsonEncoder) Layout() ListLayout                            { return LayoutMetaFirst }
func (e *jsonEncoder) ItemSize(codec.Object, int64) (int, error)     { return 0, nil }
func (e *jsonEncoder) ItemSizeOf(codec.ItemSizes, int64) (int, bool) { return 0, false }

func (e *jsonEncoder) ListHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	return codec.AppendJSONListHead(dst, e.r.APIVersion(), e.r.ListKind, lm)
}

func (e *jsonEncoder) ListItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	// Items of a built-in list carry no apiVersion and kind, as
	// kube-apiserver's; custom resources' items keep theirs.
	return e.sc.AppendJSON(dst, obj, rv, codec.JSONOptions{OmitTypeMeta: !e.r.Custom})
}

func (e *jsonEncoder) ListTail(dst []byte, _ codec.ListMeta) []byte {
	return append(codec.AppendJSONListTail(dst), '\n')
}

func (e *jsonEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendJSONWatchEvent(dst, t, obj, rv)
}

func (e *jsonEncoder) WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, e.r.APIVersion(), e.r.Kind, rv, initialEnd)
}

func (e *jsonEncoder) WatchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendJSONWatchStatus(dst, s)
}

func (e *jsonEncoder) Bookmarks() bool { return true }
func (e *jsonEncoder) Shareable() bool { return true }

func (e *jsonEncoder) Status(dst []byte, s *codec.Status) ([]byte, string) {
	return append(codec.AppendJSONStatus(dst, s), '\n'), MediaJSON
}

func (e *jsonEncoder) Passthrough(obj codec.Object) bool { return obj.Format == codec.FormatJSON }

// protobufEncoder: application/vnd.kubernetes.protobuf, the objects
// themselves (stored protobuf only).
type protobufEncoder struct{ encoding }

var _ Encoder = (*protobufEncoder)(nil)

func (e *protobufEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufEnvelope(dst, obj, rv), nil
}

func (e *protobufEncoder) Layout() ListLayout { return LayoutSized }

func (e *protobufEncoder) ItemSize(obj codec.Object, rv int64) (int, error) {
	if obj.Format != codec.FormatProtobuf {
		return 0, errJSONAsProtobuf
	}
	return codec.ProtobufListItemSize(obj, rv), nil
}

func (e *protobufEncoder) ItemSizeOf(z codec.ItemSizes, rv int64) (int, bool) {
	return z.ProtobufListItemSize(rv)
}

func (e *protobufEncoder) ListHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte {
	return codec.AppendProtobufListHead(dst, e.r.APIVersion(), e.r.ListKind, lm, itemsSize)
}

func (e *protobufEncoder) ListItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufListItem(dst, obj, rv), nil
}

func (e *protobufEncoder) ListTail(dst []byte, _ codec.ListMeta) []byte {
	return codec.AppendProtobufListTail(dst)
}

func (e *protobufEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufWatchEvent(dst, t, obj, rv), nil
}

func (e *protobufEncoder) WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendProtobufWatchBookmark(dst, e.r.APIVersion(), e.r.Kind, rv, initialEnd)
}

func (e *protobufEncoder) Bookmarks() bool { return true }

func (e *protobufEncoder) WatchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendProtobufWatchStatus(dst, s)
}

// shareable: a passthrough frame is a copy of the stored bytes, as cheap
// as copying a shared frame.
func (e *protobufEncoder) Shareable() bool { return false }

func (e *protobufEncoder) Status(dst []byte, s *codec.Status) ([]byte, string) {
	return codec.AppendProtobufStatus(dst, s), MediaProtobuf
}

func (e *protobufEncoder) Passthrough(obj codec.Object) bool {
	return obj.Format == codec.FormatProtobuf
}

// yamlEncoder: application/yaml. Lists are written item by item with
// their metadata last; watches are not framed as YAML (kube-apiserver has
// no YAML stream framing either: the watch negotiates JSON instead), so
// the watch frames are JSON's.
type yamlEncoder struct{ jsonEncoder }

var _ Encoder = (*yamlEncoder)(nil)

func (e *yamlEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendYAML(dst, obj, rv)
}

func (e *yamlEncoder) Layout() ListLayout { return LayoutMetaLast }

func (e *yamlEncoder) ListHead(dst []byte, _ codec.ListMeta, _ int) []byte {
	return codec.AppendYAMLListHead(dst, e.r.APIVersion())
}

func (e *yamlEncoder) ListItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	return e.sc.AppendYAMLListItem(dst, obj, rv, !e.r.Custom)
}

func (e *yamlEncoder) ListTail(dst []byte, lm codec.ListMeta) []byte {
	return codec.AppendYAMLListTail(dst, e.r.ListKind, lm)
}

func (e *yamlEncoder) Passthrough(codec.Object) bool { return false }

// status: kube-apiserver negotiates a Status like any object, so a YAML
// client gets the JSON encoding converted by sigs.k8s.io/yaml (JSON if
// that fails).
func (e *yamlEncoder) Status(dst []byte, s *codec.Status) ([]byte, string) {
	start := len(dst)
	dst = codec.AppendJSONStatus(dst, s)
	y, err := yaml.JSONToYAML(dst[start:])
	if err != nil {
		return append(dst, '\n'), MediaJSON
	}
	return append(dst[:start], y...), MediaYAML
}

// partialJSONEncoder: PartialObjectMetadata(List) as JSON.
type partialJSONEncoder struct{ jsonEncoder }

var _ Encoder = (*partialJSONEncoder)(nil)

func (e *partialJSONEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	dst, err := e.sc.AppendPartialJSON(dst, obj, rv)
	if err != nil {
		return dst, err
	}
	return append(dst, '\n'), nil
}

func (e *partialJSONEncoder) ListHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	return codec.AppendPartialJSONListHead(dst, lm)
}

func (e *partialJSONEncoder) ListItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	return e.sc.AppendPartialJSON(dst, obj, rv)
}

func (e *partialJSONEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendPartialJSONWatchEvent(dst, t, obj, rv)
}

func (e *partialJSONEncoder) WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, "meta.k8s.io/v1", "PartialObjectMetadata", rv, initialEnd)
}

func (e *partialJSONEncoder) Passthrough(codec.Object) bool { return false }

// partialProtobufEncoder: PartialObjectMetadata(List) as protobuf (from
// objects stored as protobuf or JSON).
type partialProtobufEncoder struct{ protobufEncoder }

var _ Encoder = (*partialProtobufEncoder)(nil)

func (e *partialProtobufEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	return codec.AppendPartialProtobuf(dst, obj, rv)
}

func (e *partialProtobufEncoder) ItemSize(obj codec.Object, rv int64) (int, error) {
	return codec.PartialProtobufListItemSize(obj, rv)
}

func (e *partialProtobufEncoder) ItemSizeOf(z codec.ItemSizes, rv int64) (int, bool) {
	return z.PartialProtobufListItemSize(rv)
}

func (e *partialProtobufEncoder) ListHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte {
	return codec.AppendPartialProtobufListHead(dst, lm, itemsSize)
}

func (e *partialProtobufEncoder) ListItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	return codec.AppendPartialProtobufListItem(dst, obj, rv)
}

func (e *partialProtobufEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return codec.AppendPartialProtobufWatchEvent(dst, t, obj, rv)
}

func (e *partialProtobufEncoder) WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendProtobufWatchBookmark(dst, "meta.k8s.io/v1", "PartialObjectMetadata", rv, initialEnd)
}

// shareable: a partial frame is a transcode, worth sharing.
func (e *partialProtobufEncoder) Shareable() bool { return true }

func (e *partialProtobufEncoder) Passthrough(codec.Object) bool { return false }

// tableEncoder: meta.k8s.io/v1 Table (JSON), as kubectl asks for it. A
// Table watch's first event carries the column definitions; its frames are
// never shared (Age cells read the clock).
type tableEncoder struct {
	encoding
	cc   *codec.CustomColumns // a custom resource's columns, or nil
	inc  codec.IncludeObjectPolicy
	conv *converter // a converted resource's (the row object of IncludeObject), or nil
	// pgroup and presource name the printer (printerOf).
	pgroup, presource string
	now               time.Time
	sentHeader        bool // watch: the column definitions went out
}

var _ Encoder = (*tableEncoder)(nil)

func (e *tableEncoder) Object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst = e.ListHead(dst, codec.ListMeta{ResourceVersion: rv}, 0)
	dst, err := e.ListItem(dst, obj, rv, true)
	if err != nil {
		return dst[:start], err
	}
	return e.ListTail(dst, codec.ListMeta{}), nil
}

func (e *tableEncoder) Layout() ListLayout                            { return LayoutMetaFirst }
func (e *tableEncoder) ItemSize(codec.Object, int64) (int, error)     { return 0, nil }
func (e *tableEncoder) ItemSizeOf(codec.ItemSizes, int64) (int, bool) { return 0, false }

func (e *tableEncoder) ListHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	if e.cc != nil {
		return codec.AppendCustomTableHead(dst, e.cc, lm)
	}
	return e.sc.AppendTableHead(dst, e.pgroup, e.presource, lm)
}

func (e *tableEncoder) ListItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	if !first {
		dst = codec.AppendTableSep(dst)
	}
	if e.cc != nil {
		return e.sc.AppendCustomTableRow(dst, e.cc, obj, rv, e.inc, e.now)
	}
	if e.conv != nil && e.inc == codec.IncludeObject {
		as, err := e.conv.convert(obj, rv)
		if err != nil {
			return dst, err
		}
		return e.sc.AppendTableRowAs(dst, e.pgroup, e.presource, obj, as, rv, e.inc, e.now)
	}
	return e.sc.AppendTableRow(dst, e.pgroup, e.presource, obj, rv, e.inc, e.now)
}

// rowFromJSON is ListItem with the printer reading the object's JSON js
// (CachedJSON.Row).
func (e *tableEncoder) rowFromJSON(dst, js []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	start := len(dst)
	if !first {
		dst = codec.AppendTableSep(dst)
	}
	dst, err := e.sc.AppendTableRowFromJSON(dst, e.pgroup, e.presource, js, obj, rv, e.inc, e.now)
	if err != nil {
		return dst[:start], err
	}
	return dst, nil
}

func (e *tableEncoder) ListTail(dst []byte, _ codec.ListMeta) []byte {
	return append(codec.AppendTableTail(dst), '\n')
}

func (e *tableEncoder) WatchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	var as *codec.Object
	if e.conv != nil && e.inc == codec.IncludeObject {
		c, err := e.conv.convert(obj, rv)
		if err != nil {
			return dst, err
		}
		as = &c
	}
	dst, err := e.sc.AppendTableWatchEventAs(dst, t, e.pgroup, e.presource, e.cc, obj, as, rv, e.inc, time.Now(), !e.sentHeader)
	if err == nil {
		e.sentHeader = true
	}
	return dst, err
}

func (e *tableEncoder) WatchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, "meta.k8s.io/v1", "Table", rv, initialEnd)
}

func (e *tableEncoder) WatchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendJSONWatchStatus(dst, s)
}

// bookmarks: a Table stream carries only the initial-events-end bookmark.
func (e *tableEncoder) Bookmarks() bool { return false }
func (e *tableEncoder) Shareable() bool { return false }

func (e *tableEncoder) Status(dst []byte, s *codec.Status) ([]byte, string) {
	return append(codec.AppendJSONStatus(dst, s), '\n'), MediaJSON
}

func (e *tableEncoder) Passthrough(codec.Object) bool { return false }

// statusEncoders encode error Statuses, by format (AppendStatus).
var statusEncoders = [...]Encoder{
	FormatJSON:     NewEncoder(nil, nil, Output{Format: FormatJSON}, nil, 0, time.Time{}),
	FormatProtobuf: NewEncoder(nil, nil, Output{Format: FormatProtobuf}, nil, 0, time.Time{}),
	FormatYAML:     NewEncoder(nil, nil, Output{Format: FormatYAML}, nil, 0, time.Time{}),
}

// AppendStatus appends s as a whole response in format f (an error
// Status: ErrorFormat) and returns its Content-Type.
func AppendStatus(dst []byte, f Format, s *codec.Status) ([]byte, string) {
	return statusEncoders[f].Status(dst, s)
}
