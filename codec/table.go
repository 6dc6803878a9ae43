package codec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Tables (meta.k8s.io/v1 Table), as kube-apiserver returns them for
// Accept: application/json;as=Table;v=v1;g=meta.k8s.io. This file is the
// Table API: a head, rows and a tail for a LIST, a frame for a watch.
// Column definitions and cells follow kube-apiserver's printers
// (pkg/printers/internalversion) with Wide output, as its TableConvertor
// uses them; table_registry.go says which built-in resources have one (one
// file per API group holds their cells). Other built-in resources get
// kube-apiserver's default table convertor (Name, Created At); custom
// resources get the CRD table convertor (Name, then the CRD's
// additionalPrinterColumns via CustomColumns in table_custom.go, or Age when
// it has none).
//
// Cells are computed from the object's JSON (Schema.AppendJSON) decoded into
// small structs: tables are for humans, so clarity wins over speed here.

// IncludeObjectPolicy says what a table row carries in its "object" field
// (the includeObject parameter of TableOptions). The zero value is
// IncludeMetadata, kube-apiserver's default.
type IncludeObjectPolicy uint8

const (
	// IncludeMetadata: the object's metadata as a PartialObjectMetadata.
	IncludeMetadata IncludeObjectPolicy = iota
	// IncludeNone: "object":null.
	IncludeNone
	// IncludeObject: the whole object.
	IncludeObject
)

// ParseIncludeObject parses the includeObject query parameter ("", "None",
// "Metadata", "Object"); ok is false for anything else.
func ParseIncludeObject(s string) (p IncludeObjectPolicy, ok bool) {
	switch s {
	case "", "Metadata":
		return IncludeMetadata, true
	case "None":
		return IncludeNone, true
	case "Object":
		return IncludeObject, true
	}
	return 0, false
}

// tableRowCondition is metav1.TableRowCondition.
type tableRowCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// AppendTableHead appends the start of a Table of resource.group up to the
// '[' of its rows: {"kind":"Table","apiVersion":"meta.k8s.io/v1",
// "metadata":{...},"columnDefinitions":[...],"rows":[
// Then come rows (AppendTableRow) separated by AppendTableSep, then
// AppendTableTail. For a single object pass its resourceVersion in m.
// Custom resources with additionalPrinterColumns use AppendCustomTableHead.
func (s *Schema) AppendTableHead(dst []byte, group, resource string, m ListMeta) []byte {
	return appendTableHead(dst, printerFor(group, resource), m)
}

func appendTableHead(dst []byte, p *tablePrinter, m ListMeta) []byte {
	dst = append(dst, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":`...)
	dst = appendListMetaJSON(dst, m)
	dst = append(dst, `,"columnDefinitions":`...)
	dst = append(dst, p.columns...)
	return append(dst, `,"rows":[`...)
}

// AppendTableWatchEvent appends a JSON watch frame whose object is a Table
// with obj's row, as kube-apiserver writes the events of a watch with
// Accept: application/json;as=Table;v=v1;g=meta.k8s.io (kubectl get -w):
// the first event of a watch carries the column definitions (headers true),
// later ones have "columnDefinitions":null. cc, when not nil, gives a custom
// resource's columns instead of group and resource. ERROR events are written
// with AppendJSONWatchStatus as for any watch. On error dst is returned
// unchanged.
func (s *Schema) AppendTableWatchEvent(dst []byte, t EventType, group, resource string, cc *CustomColumns, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time, headers bool) ([]byte, error) {
	return s.AppendTableWatchEventAs(dst, t, group, resource, cc, obj, nil, rv, inc, now, headers)
}

// AppendTableWatchEventAs is AppendTableWatchEvent whose row object
// (IncludeObject) is as when not nil (see AppendTableRowAs).
func (s *Schema) AppendTableWatchEventAs(dst []byte, t EventType, group, resource string, cc *CustomColumns, obj Object, as *Object, rv int64, inc IncludeObjectPolicy, now time.Time, headers bool) ([]byte, error) {
	p := printerFor(group, resource)
	if cc != nil {
		p = &cc.p
	}
	start := len(dst)
	dst = appendJSONWatchEventHead(dst, t)
	if headers {
		dst = appendTableHead(dst, p, ListMeta{ResourceVersion: rv})
	} else {
		dst = append(dst, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":`...)
		dst = appendListMetaJSON(dst, ListMeta{ResourceVersion: rv})
		dst = append(dst, `,"columnDefinitions":null,"rows":[`...)
	}
	var err error
	if as != nil && inc == IncludeObject {
		dst, err = s.appendTableRowAs(dst, p, obj, *as, rv, now)
	} else {
		dst, err = s.appendTableRow(dst, p, obj, rv, inc, now)
	}
	if err != nil {
		return dst[:start], err
	}
	return append(dst, "]}}\n"...), nil
}

// AppendTableSep appends the separator written between two rows.
func AppendTableSep(dst []byte) []byte { return append(dst, ',') }

// AppendTableTail appends the end of a Table.
func AppendTableTail(dst []byte) []byte { return append(dst, "]}"...) }

var tableScratch = sync.Pool{New: func() any { return new([]byte) }}

// AppendTableRow appends one row {"cells":[...],"object":...} for obj with
// resourceVersion rv; now is the time Age cells are computed against. On
// error dst is returned unchanged.
func (s *Schema) AppendTableRow(dst []byte, group, resource string, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	return s.appendTableRow(dst, printerFor(group, resource), obj, rv, inc, now)
}

// AppendTableRowAs is AppendTableRow for a resource served at another
// version than it is stored at, with another schema: the cells and the
// metadata (IncludeMetadata) come from obj as stored, as kube-apiserver
// prints and takes the metadata of the internal object, and the row
// object of IncludeObject is as, obj converted to the served version
// (Convert: its resourceVersion set in it).
func (s *Schema) AppendTableRowAs(dst []byte, group, resource string, obj, as Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	p := printerFor(group, resource)
	if inc != IncludeObject {
		return s.appendTableRow(dst, p, obj, rv, inc, now)
	}
	return s.appendTableRowAs(dst, p, obj, as, rv, now)
}

func (s *Schema) appendTableRowAs(dst []byte, p *tablePrinter, obj, as Object, rv int64, now time.Time) ([]byte, error) {
	bp := tableScratch.Get().(*[]byte)
	defer tableScratch.Put(bp)
	js, err := s.AppendJSON((*bp)[:0], obj, rv, JSONOptions{})
	*bp = js[:0]
	if err != nil {
		return dst, err
	}
	cells, conds, err := p.cells(js, now)
	if err != nil {
		return dst, fmt.Errorf("cannot compute table cells of %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	asJS, err := s.AppendJSON(nil, as, 0, JSONOptions{})
	if err != nil {
		return dst, err
	}
	return s.appendRow(dst, cells, conds, asJS, obj, rv, IncludeObject)
}

// AppendTableRowFromJSON is AppendTableRow for a caller that has obj's
// JSON already (AppendJSON with rv and the type meta): js, read only
// during the call.
func (s *Schema) AppendTableRowFromJSON(dst []byte, group, resource string, js []byte, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	return s.appendTableRowJSON(dst, printerFor(group, resource), js, obj, rv, inc, now)
}

// TableRowFromProtobuf reports whether AppendTableRow computes the cells
// of a protobuf-stored object of group/resource from the protobuf itself
// (no JSON of the object is made): a caller holding the object's JSON
// gains nothing from AppendTableRowFromJSON then.
func (s *Schema) TableRowFromProtobuf(group, resource string, inc IncludeObjectPolicy) bool {
	return inc != IncludeObject && printerFor(group, resource).protoCells != nil
}

func (s *Schema) appendTableRow(dst []byte, p *tablePrinter, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	if p.protoCells != nil && inc != IncludeObject && obj.Format == FormatProtobuf {
		return s.appendTableRowProtobuf(dst, p, obj, rv, inc, now)
	}
	bp := tableScratch.Get().(*[]byte)
	defer tableScratch.Put(bp)
	js, err := s.AppendJSON((*bp)[:0], obj, rv, JSONOptions{})
	*bp = js[:0]
	if err != nil {
		return dst, err
	}
	return s.appendTableRowJSON(dst, p, js, obj, rv, inc, now)
}

func (s *Schema) appendTableRowJSON(dst []byte, p *tablePrinter, js []byte, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	cells, conds, err := p.cells(js, now)
	if err != nil {
		return dst, fmt.Errorf("cannot compute table cells of %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	return s.appendRow(dst, cells, conds, js, obj, rv, inc)
}

var tableMeta = sync.Pool{New: func() any { return new(Meta) }}

// appendTableRowProtobuf is appendTableRow for printers whose cells come
// from the protobuf (p.protoCells): the metadata peeked, the rest a walk
// of the object's top-level fields; without the object's JSON (a row of
// a 4 KiB ConfigMap cost a transcode and a JSON decode of it before).
func (s *Schema) appendTableRowProtobuf(dst []byte, p *tablePrinter, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	m := tableMeta.Get().(*Meta)
	defer tableMeta.Put(m)
	m.Reset()
	if err := s.PeekMeta(obj, m); err != nil {
		return dst, err
	}
	cells, err := p.protoCells(obj.Raw, m, now)
	if err != nil {
		return dst, fmt.Errorf("cannot compute table cells of %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	return s.appendRow(dst, cells, nil, nil, obj, rv, inc)
}

// appendRow writes one row {"cells":[...],"conditions":...,"object":...};
// js is the object's JSON, read for IncludeObject only.
func (s *Schema) appendRow(dst []byte, cells []any, conds []tableRowCondition, js []byte, obj Object, rv int64, inc IncludeObjectPolicy) ([]byte, error) {
	var err error
	start := len(dst)
	dst = append(dst, `{"cells":[`...)
	for i, c := range cells {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch v := c.(type) {
		case nil:
			dst = append(dst, "null"...)
		case string:
			dst = appendJSONQuote(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case float64:
			var ok bool
			if dst, ok = appendJSONFloat(dst, v, 64); !ok {
				dst = append(dst, "null"...)
			}
		case bool:
			dst = strconv.AppendBool(dst, v)
		default:
			panic(fmt.Sprintf("BUG: table cell of type %T", c))
		}
	}
	dst = append(dst, ']')
	if len(conds) > 0 {
		b, err := json.Marshal(conds)
		if err != nil {
			return dst[:start], fmt.Errorf("cannot write row conditions: %w", err)
		}
		dst = append(dst, `,"conditions":`...)
		dst = append(dst, b...)
	}
	dst = append(dst, `,"object":`...)
	switch inc {
	case IncludeNone:
		dst = append(dst, "null"...)
	case IncludeObject:
		dst = append(dst, js...)
	default:
		if dst, err = s.AppendPartialJSON(dst, obj, rv); err != nil {
			return dst[:start], err
		}
	}
	return append(dst, '}'), nil
}
