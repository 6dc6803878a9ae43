package proxy

import (
	"errors"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/resource"
)

// Encoders.
//
// A request negotiates its representation once (negotiate: an output) and
// gets the encoder of that output (newEncoder); GET, the LIST loop and the
// watch loop then call the encoder and never look at the format again (as
// kube-apiserver's serveWatchHandler picks its Encoder and Framer once).
// An encoder knows a list's head, items and tail, one object, a watch
// stream's frames and a Status.
//
// Adding a format (say CBOR) is a format constant and its media type in
// negotiate.go, one encoder type here with its tests, and its case in
// newEncoder.

// encoder writes one request's response in its negotiated representation.
// Methods append to dst and return the grown slice; on error dst is
// returned unchanged in length. An encoder is used by one request at a time.
type encoder interface {
	// output is the negotiated representation (metrics label, frame key).
	output() output

	// object appends one object (GET).
	object(dst []byte, obj codec.Object, rv int64) ([]byte, error)

	// layout is where a list's encoding puts what precedes its items.
	layout() listLayout
	// itemSize is an item's encoded size (layoutSized: the LIST computes
	// the items' total with it first).
	itemSize(obj codec.Object, rv int64) (int, error)
	// itemSizeOf is itemSize from the object's codec.ItemSizes; ok is
	// false when they do not tell (then itemSize is asked).
	itemSizeOf(z codec.ItemSizes, rv int64) (n int, ok bool)
	// listHead appends a list's start up to its first item; itemsSize is
	// the items' total size (layoutSized).
	listHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte
	// listItem appends one item; first is true for the list's first.
	listItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error)
	// listTail appends a list's end; lm is read for layoutMetaLast.
	listTail(dst []byte, lm codec.ListMeta) []byte

	// watchEvent appends one ADDED/MODIFIED/DELETED frame.
	watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error)
	// watchBookmark appends a BOOKMARK frame at rv.
	watchBookmark(dst []byte, rv int64, initialEnd bool) []byte
	// bookmarks reports whether the stream carries bookmarks besides the
	// initial-events-end one (a Table stream does not).
	bookmarks() bool
	// watchStatus appends an ERROR frame.
	watchStatus(dst []byte, s *codec.Status) []byte
	// shareable reports whether the watch frames depend only on the event
	// (frameCache may share them between watchers).
	shareable() bool

	// status appends a Status as a whole response and returns its
	// Content-Type.
	status(dst []byte, s *codec.Status) ([]byte, string)
	// passthrough reports whether obj is served as stored (its bytes
	// copied with the resourceVersion patched), for the metrics.
	passthrough(obj codec.Object) bool

	// cached is how the rendering cache may serve this encoder's
	// objects (rendercache.go); nil when it may not. newEncoder chooses.
	cached() *cachedJSON
}

// listLayout is where a list's encoding puts what a LIST must know before
// the first item: what lister.plan computes before the first byte.
type listLayout uint8

const (
	// layoutMetaFirst: the list metadata (continue, remainingItemCount)
	// in the head (JSON, Table, partial JSON).
	layoutMetaFirst listLayout = iota
	// layoutSized: the metadata and the items' total size in the head
	// (protobuf, partial protobuf).
	layoutSized
	// layoutMetaLast: the metadata in the tail, after the items (YAML, a
	// custom resource's JSON): nothing to plan.
	layoutMetaLast
)

// cachedJSON is how the rendering cache serves an encoder whose output is
// built from an object's JSON, the same for every request: newEncoder
// gives one to the JSON encoder of a built-in resource and to a built-in
// Table whose printer reads the object's JSON. Only the JSON encoder's
// objects, items and watch events are the JSON itself (row nil); its list
// items are a built-in list's, without apiVersion and kind.
type cachedJSON struct {
	sc *codec.Schema
	// row, for a Table, appends the row printed from the object's JSON
	// js (a separator first unless first); nil for JSON.
	row func(dst, js []byte, obj codec.Object, rv int64, first bool) ([]byte, error)
}

// errJSONAsProtobuf: a custom resource (or a resource stored with
// --storage-media-type=application/json) asked for as protobuf.
var errJSONAsProtobuf = errors.New("object is stored as JSON and cannot be served as protobuf")

// encoding is what every encoder of a request shares.
type encoding struct {
	sc    *codec.Schema
	r     *resource.Resource // nil for a Status-only encoder
	out   output
	cache *cachedJSON // set by newEncoder
}

func (e *encoding) output() output      { return e.out }
func (e *encoding) cached() *cachedJSON { return e.cache }

// newEncoder returns the encoder of out for resource r. cc are a custom
// resource's Table columns (nil otherwise); inc is the includeObject
// parameter of Table rows; now is the time Table Age cells are computed
// against for a GET or LIST (watch events use their own time).
func newEncoder(sc *codec.Schema, r *resource.Resource, out output, cc *codec.CustomColumns, inc codec.IncludeObjectPolicy, now time.Time) encoder {
	e := encoding{sc: sc, r: r, out: out}
	var conv *converter
	if r != nil && r.Conversion != nil {
		conv = &converter{from: r.Conversion.From, to: r.APIVersion(), kind: r.Kind}
	}
	switch out.target {
	case targetTable:
		te := &tableEncoder{encoding: e, cc: cc, inc: inc, now: now, conv: conv}
		te.pgroup, te.presource = printerOf(r)
		if cc == nil && conv == nil && !sc.TableRowFromProtobuf(te.pgroup, te.presource, inc) {
			// The printer reads the object's JSON: from the
			// rendering cache (rows read the clock: not cached).
			te.cache = &cachedJSON{sc: sc, row: te.rowFromJSON}
		}
		return te
	case targetPartial:
		// PartialObjectMetadata is the stored object's metadata, as
		// kube-apiserver takes it from the internal object (no
		// autoscaling/v1 annotations): no conversion.
		if out.format == formatProtobuf {
			return &partialProtobufEncoder{protobufEncoder{encoding: e}}
		}
		return &partialJSONEncoder{jsonEncoder{encoding: e}}
	}
	var enc encoder
	switch out.format {
	case formatProtobuf:
		enc = &protobufEncoder{encoding: e}
	case formatYAML:
		enc = &yamlEncoder{jsonEncoder{encoding: e}}
	default:
		if r != nil && r.Custom {
			enc = &unstructuredJSONEncoder{jsonEncoder{encoding: e}}
		} else {
			je := &jsonEncoder{encoding: e}
			if conv == nil {
				je.cache = &cachedJSON{sc: sc}
			}
			enc = je
		}
	}
	if conv != nil {
		return &convertEncoder{encoder: enc, conv: conv}
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
	encoder
	conv *converter
}

func (e *convertEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.encoder.object(dst, c, 0)
}

func (e *convertEncoder) itemSize(obj codec.Object, rv int64) (int, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return 0, err
	}
	return e.encoder.itemSize(c, 0)
}

func (e *convertEncoder) listItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.encoder.listItem(dst, c, 0, first)
}

func (e *convertEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	c, err := e.conv.convert(obj, rv)
	if err != nil {
		return dst, err
	}
	return e.encoder.watchEvent(dst, t, c, 0)
}

func (e *convertEncoder) passthrough(codec.Object) bool { return false }

// tableColumns returns the Table columns of a custom resource (its
// additionalPrinterColumns) when out is a Table, else nil.
func tableColumns(r *resource.Resource, out output) (*codec.CustomColumns, error) {
	if out.target != targetTable || !r.Custom {
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

func (e *unstructuredJSONEncoder) layout() listLayout { return layoutMetaLast }

func (e *unstructuredJSONEncoder) listHead(dst []byte, _ codec.ListMeta, _ int) []byte {
	return codec.AppendJSONUnstructuredListHead(dst, e.r.APIVersion())
}

func (e *unstructuredJSONEncoder) listTail(dst []byte, lm codec.ListMeta) []byte {
	return append(codec.AppendJSONUnstructuredListTail(dst, e.r.ListKind, lm), '\n')
}

// jsonEncoder: application/json, the objects themselves.
type jsonEncoder struct{ encoding }

var _ encoder = (*jsonEncoder)(nil)

// object: kube-apiserver's JSON serializer (json.Encoder) ends a whole
// response with a newline; so do list tails and Statuses.
func (e *jsonEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	dst, err := e.sc.AppendJSON(dst, obj, rv, codec.JSONOptions{})
	if err != nil {
		return dst, err
	}
	return append(dst, '\n'), nil
}

func (e *jsonEncoder) layout() listLayout                            { return layoutMetaFirst }
func (e *jsonEncoder) itemSize(codec.Object, int64) (int, error)     { return 0, nil }
func (e *jsonEncoder) itemSizeOf(codec.ItemSizes, int64) (int, bool) { return 0, false }

func (e *jsonEncoder) listHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	return codec.AppendJSONListHead(dst, e.r.APIVersion(), e.r.ListKind, lm)
}

func (e *jsonEncoder) listItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	// Items of a built-in list carry no apiVersion and kind, as
	// kube-apiserver's; custom resources' items keep theirs.
	return e.sc.AppendJSON(dst, obj, rv, codec.JSONOptions{OmitTypeMeta: !e.r.Custom})
}

func (e *jsonEncoder) listTail(dst []byte, _ codec.ListMeta) []byte {
	return append(codec.AppendJSONListTail(dst), '\n')
}

func (e *jsonEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendJSONWatchEvent(dst, t, obj, rv)
}

func (e *jsonEncoder) watchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, e.r.APIVersion(), e.r.Kind, rv, initialEnd)
}

func (e *jsonEncoder) watchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendJSONWatchStatus(dst, s)
}

func (e *jsonEncoder) bookmarks() bool { return true }
func (e *jsonEncoder) shareable() bool { return true }

func (e *jsonEncoder) status(dst []byte, s *codec.Status) ([]byte, string) {
	return append(codec.AppendJSONStatus(dst, s), '\n'), mediaJSON
}

func (e *jsonEncoder) passthrough(obj codec.Object) bool { return obj.Format == codec.FormatJSON }

// protobufEncoder: application/vnd.kubernetes.protobuf, the objects
// themselves (stored protobuf only).
type protobufEncoder struct{ encoding }

var _ encoder = (*protobufEncoder)(nil)

func (e *protobufEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufEnvelope(dst, obj, rv), nil
}

func (e *protobufEncoder) layout() listLayout { return layoutSized }

func (e *protobufEncoder) itemSize(obj codec.Object, rv int64) (int, error) {
	if obj.Format != codec.FormatProtobuf {
		return 0, errJSONAsProtobuf
	}
	return codec.ProtobufListItemSize(obj, rv), nil
}

func (e *protobufEncoder) itemSizeOf(z codec.ItemSizes, rv int64) (int, bool) {
	return z.ProtobufListItemSize(rv)
}

func (e *protobufEncoder) listHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte {
	return codec.AppendProtobufListHead(dst, e.r.APIVersion(), e.r.ListKind, lm, itemsSize)
}

func (e *protobufEncoder) listItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufListItem(dst, obj, rv), nil
}

func (e *protobufEncoder) listTail(dst []byte, _ codec.ListMeta) []byte {
	return codec.AppendProtobufListTail(dst)
}

func (e *protobufEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	if obj.Format != codec.FormatProtobuf {
		return dst, errJSONAsProtobuf
	}
	return codec.AppendProtobufWatchEvent(dst, t, obj, rv), nil
}

func (e *protobufEncoder) watchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendProtobufWatchBookmark(dst, e.r.APIVersion(), e.r.Kind, rv, initialEnd)
}

func (e *protobufEncoder) bookmarks() bool { return true }

func (e *protobufEncoder) watchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendProtobufWatchStatus(dst, s)
}

// shareable: a passthrough frame is a copy of the stored bytes, as cheap
// as copying a shared frame.
func (e *protobufEncoder) shareable() bool { return false }

func (e *protobufEncoder) status(dst []byte, s *codec.Status) ([]byte, string) {
	return codec.AppendProtobufStatus(dst, s), mediaProtobuf
}

func (e *protobufEncoder) passthrough(obj codec.Object) bool {
	return obj.Format == codec.FormatProtobuf
}

// yamlEncoder: application/yaml. Lists are written item by item with
// their metadata last; watches are not framed as YAML (kube-apiserver has
// no YAML stream framing either: the watch negotiates JSON instead), so
// the watch frames are JSON's.
type yamlEncoder struct{ jsonEncoder }

var _ encoder = (*yamlEncoder)(nil)

func (e *yamlEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendYAML(dst, obj, rv)
}

func (e *yamlEncoder) layout() listLayout { return layoutMetaLast }

func (e *yamlEncoder) listHead(dst []byte, _ codec.ListMeta, _ int) []byte {
	return codec.AppendYAMLListHead(dst, e.r.APIVersion())
}

func (e *yamlEncoder) listItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	return e.sc.AppendYAMLListItem(dst, obj, rv, !e.r.Custom)
}

func (e *yamlEncoder) listTail(dst []byte, lm codec.ListMeta) []byte {
	return codec.AppendYAMLListTail(dst, e.r.ListKind, lm)
}

func (e *yamlEncoder) passthrough(codec.Object) bool { return false }

// status: kube-apiserver negotiates a Status like any object, so a YAML
// client gets the JSON encoding converted by sigs.k8s.io/yaml (JSON if
// that fails).
func (e *yamlEncoder) status(dst []byte, s *codec.Status) ([]byte, string) {
	start := len(dst)
	dst = codec.AppendJSONStatus(dst, s)
	y, err := yaml.JSONToYAML(dst[start:])
	if err != nil {
		return append(dst, '\n'), mediaJSON
	}
	return append(dst[:start], y...), mediaYAML
}

// partialJSONEncoder: PartialObjectMetadata(List) as JSON.
type partialJSONEncoder struct{ jsonEncoder }

var _ encoder = (*partialJSONEncoder)(nil)

func (e *partialJSONEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	dst, err := e.sc.AppendPartialJSON(dst, obj, rv)
	if err != nil {
		return dst, err
	}
	return append(dst, '\n'), nil
}

func (e *partialJSONEncoder) listHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	return codec.AppendPartialJSONListHead(dst, lm)
}

func (e *partialJSONEncoder) listItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	return e.sc.AppendPartialJSON(dst, obj, rv)
}

func (e *partialJSONEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return e.sc.AppendPartialJSONWatchEvent(dst, t, obj, rv)
}

func (e *partialJSONEncoder) watchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, "meta.k8s.io/v1", "PartialObjectMetadata", rv, initialEnd)
}

func (e *partialJSONEncoder) passthrough(codec.Object) bool { return false }

// partialProtobufEncoder: PartialObjectMetadata(List) as protobuf (from
// objects stored as protobuf or JSON).
type partialProtobufEncoder struct{ protobufEncoder }

var _ encoder = (*partialProtobufEncoder)(nil)

func (e *partialProtobufEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	return codec.AppendPartialProtobuf(dst, obj, rv)
}

func (e *partialProtobufEncoder) itemSize(obj codec.Object, rv int64) (int, error) {
	return codec.PartialProtobufListItemSize(obj, rv)
}

func (e *partialProtobufEncoder) itemSizeOf(z codec.ItemSizes, rv int64) (int, bool) {
	return z.PartialProtobufListItemSize(rv)
}

func (e *partialProtobufEncoder) listHead(dst []byte, lm codec.ListMeta, itemsSize int) []byte {
	return codec.AppendPartialProtobufListHead(dst, lm, itemsSize)
}

func (e *partialProtobufEncoder) listItem(dst []byte, obj codec.Object, rv int64, _ bool) ([]byte, error) {
	return codec.AppendPartialProtobufListItem(dst, obj, rv)
}

func (e *partialProtobufEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	return codec.AppendPartialProtobufWatchEvent(dst, t, obj, rv)
}

func (e *partialProtobufEncoder) watchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendProtobufWatchBookmark(dst, "meta.k8s.io/v1", "PartialObjectMetadata", rv, initialEnd)
}

// shareable: a partial frame is a transcode, worth sharing.
func (e *partialProtobufEncoder) shareable() bool { return true }

func (e *partialProtobufEncoder) passthrough(codec.Object) bool { return false }

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

var _ encoder = (*tableEncoder)(nil)

func (e *tableEncoder) object(dst []byte, obj codec.Object, rv int64) ([]byte, error) {
	start := len(dst)
	dst = e.listHead(dst, codec.ListMeta{ResourceVersion: rv}, 0)
	dst, err := e.listItem(dst, obj, rv, true)
	if err != nil {
		return dst[:start], err
	}
	return e.listTail(dst, codec.ListMeta{}), nil
}

func (e *tableEncoder) layout() listLayout                            { return layoutMetaFirst }
func (e *tableEncoder) itemSize(codec.Object, int64) (int, error)     { return 0, nil }
func (e *tableEncoder) itemSizeOf(codec.ItemSizes, int64) (int, bool) { return 0, false }

func (e *tableEncoder) listHead(dst []byte, lm codec.ListMeta, _ int) []byte {
	if e.cc != nil {
		return codec.AppendCustomTableHead(dst, e.cc, lm)
	}
	return e.sc.AppendTableHead(dst, e.pgroup, e.presource, lm)
}

func (e *tableEncoder) listItem(dst []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
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

// rowFromJSON is listItem with the printer reading the object's JSON js
// (cachedJSON.row).
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

func (e *tableEncoder) listTail(dst []byte, _ codec.ListMeta) []byte {
	return append(codec.AppendTableTail(dst), '\n')
}

func (e *tableEncoder) watchEvent(dst []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
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

func (e *tableEncoder) watchBookmark(dst []byte, rv int64, initialEnd bool) []byte {
	return codec.AppendJSONWatchBookmark(dst, "meta.k8s.io/v1", "Table", rv, initialEnd)
}

func (e *tableEncoder) watchStatus(dst []byte, s *codec.Status) []byte {
	return codec.AppendJSONWatchStatus(dst, s)
}

// bookmarks: a Table stream carries only the initial-events-end bookmark.
func (e *tableEncoder) bookmarks() bool { return false }
func (e *tableEncoder) shareable() bool { return false }

func (e *tableEncoder) status(dst []byte, s *codec.Status) ([]byte, string) {
	return append(codec.AppendJSONStatus(dst, s), '\n'), mediaJSON
}

func (e *tableEncoder) passthrough(codec.Object) bool { return false }
