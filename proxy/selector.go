package proxy

import (
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
)

// metaLabels is labels.Labels over a codec.Meta's labels, without building
// a map. The strings it returns alias the stored value: they are valid only
// while the selector runs (labels.Selector.Matches does not keep them).
type metaLabels struct{ m *codec.Meta }

var _ labels.Labels = metaLabels{}

func (l metaLabels) Lookup(key string) (string, bool) {
	for _, kv := range l.m.Labels {
		if string(kv.Key) == key {
			return bytesutil.ToUnsafeString(kv.Value), true
		}
	}
	return "", false
}

func (l metaLabels) Has(key string) bool { _, ok := l.Lookup(key); return ok }

func (l metaLabels) Get(key string) string { v, _ := l.Lookup(key); return v }

// fieldReq is one field selector requirement after label conversion.
type fieldReq struct {
	field string // metadata.name, metadata.namespace, or a PeekField path
	value string
	not   bool // !=
}

// filter is a request's label and field selectors. The zero value matches
// everything.
type filter struct {
	labels labels.Selector // nil: none
	fields []fieldReq
	// name is the value of a metadata.name= requirement, to narrow the
	// etcd range to one key.
	name string
}

// empty reports whether the filter selects everything (no selector), so
// that remainingItemCount is exact.
func (f *filter) empty() bool { return f.labels == nil && len(f.fields) == 0 }

// needsMeta reports whether matching needs the object's metadata.
func (f *filter) needsMeta() bool { return !f.empty() }

// parseFilter parses labelSelector and fieldSelector. convert checks a
// field label and maps it to the path evaluated on the object
// (resource.Resource.ConvertFieldLabel); its error text is the 400's
// message. Errors are badRequest.
func parseFilter(labelSel, fieldSel string, convert func(string) (string, error)) (filter, error) {
	var f filter
	if labelSel != "" {
		sel, err := labels.Parse(labelSel)
		if err != nil {
			// labels.Parse's message already starts "unable to parse
			// requirement: ", as kube-apiserver's 400 does.
			return f, badf("%v", err)
		}
		if !sel.Empty() {
			f.labels = sel
		}
	}
	if fieldSel == "" {
		return f, nil
	}
	sel, err := fields.ParseSelector(fieldSel)
	if err != nil {
		return f, badf("%v", err)
	}
	for _, r := range sel.Requirements() {
		field, err := convert(r.Field)
		if err != nil {
			return f, badf("%v", err)
		}
		req := fieldReq{field: field, value: r.Value}
		switch r.Operator {
		case selection.Equals, selection.DoubleEquals:
		case selection.NotEquals:
			req.not = true
		default:
			return f, badf("invalid field selector operator %q", r.Operator)
		}
		if req.field == "metadata.name" && !req.not {
			f.name = req.value
		}
		f.fields = append(f.fields, req)
	}
	return f, nil
}

// matches evaluates the filter on obj whose metadata is m (already peeked
// when the filter needs it).
func (f *filter) matches(sc *codec.Schema, obj codec.Object, m *codec.Meta) (bool, error) {
	if f.labels != nil && !f.labels.Matches(metaLabels{m}) {
		return false, nil
	}
	for i := range f.fields {
		r := &f.fields[i]
		var v []byte
		switch r.field {
		case "metadata.name":
			v = m.Name
		case "metadata.namespace":
			v = m.Namespace
		default:
			val, ok, err := sc.PeekField(obj, r.field)
			if err != nil {
				return false, err
			}
			if ok {
				v = val
			}
		}
		if (string(v) == r.value) == r.not {
			return false, nil
		}
	}
	return true, nil
}
