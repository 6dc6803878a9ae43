package request

import (
	"errors"
	"slices"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/resource"
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

// FieldReq is one field selector requirement after label conversion.
type FieldReq struct {
	Field string // metadata.name, metadata.namespace, or a PeekField path
	Value string
	Not   bool // !=
}

// Filter is a request's label and field selectors. The zero value matches
// everything.
type Filter struct {
	Labels labels.Selector // nil: none
	Fields []FieldReq
	// Name is the value of a metadata.Name= requirement, to narrow the
	// etcd range to one key.
	Name string
}

// Empty reports whether the filter selects everything (no selector), so
// that remainingItemCount is exact.
func (f *Filter) Empty() bool { return f.Labels == nil && len(f.Fields) == 0 }

// NeedsMeta reports whether matching needs the object's metadata.
func (f *Filter) NeedsMeta() bool { return !f.Empty() }

// ParseFilter parses labelSelector and fieldSelector. convert checks a
// field label and maps it to the path evaluated on the object
// (resource.Resource.ConvertFieldLabel); its error text is the 400's
// message. Errors are badRequest.
func ParseFilter(labelSel, fieldSel string, convert func(string) (string, error)) (Filter, error) {
	var f Filter
	if labelSel != "" {
		sel, err := labels.Parse(labelSel)
		if err != nil {
			// labels.Parse's message already starts "unable to parse
			// requirement: ", as kube-apiserver's 400 does.
			return f, Errorf("%v", err)
		}
		if !sel.Empty() {
			f.Labels = sel
		}
	}
	if fieldSel == "" {
		return f, nil
	}
	sel, err := fields.ParseSelector(fieldSel)
	if err != nil {
		return f, Errorf("%v", err)
	}
	for _, r := range sel.Requirements() {
		field, err := convert(r.Field)
		if err != nil {
			return f, Errorf("%v", err)
		}
		req := FieldReq{Field: field, Value: r.Value}
		switch r.Operator {
		case selection.Equals, selection.DoubleEquals:
		case selection.NotEquals:
			req.Not = true
		default:
			return f, Errorf("invalid field selector operator %q", r.Operator)
		}
		if req.Field == "metadata.name" && !req.Not {
			f.Name = req.Value
		}
		f.Fields = append(f.Fields, req)
	}
	return f, nil
}

// Matches evaluates the filter on obj whose metadata is m (already peeked
// when the filter needs it).
func (f *Filter) Matches(sc *codec.Schema, obj codec.Object, m *codec.Meta) (bool, error) {
	if f.Labels != nil && !f.Labels.Matches(metaLabels{m}) {
		return false, nil
	}
	for i := range f.Fields {
		r := &f.Fields[i]
		var v []byte
		switch r.Field {
		case "metadata.name":
			v = m.Name
		case "metadata.namespace":
			v = m.Namespace
		default:
			val, ok, err := sc.PeekField(obj, r.Field)
			switch {
			case errors.Is(err, codec.ErrNotScalar):
				// a label kube-apiserver accepts but does not select on
				// (status.podIPs: not in pod.ToSelectableFields) reads
				// as empty there; the watch cache's attributes agree
			case err != nil:
				return false, err
			case ok:
				v = val
			}
		}
		if (string(v) == r.Value) == r.Not {
			return false, nil
		}
	}
	return true, nil
}

// MatchesAttrs evaluates the filter on a cached object's attributes.
func (f *Filter) MatchesAttrs(a cache.Attrs) bool {
	if f.Labels != nil && !f.Labels.Matches(a.LabelSet()) {
		return false
	}
	for i := range f.Fields {
		r := &f.Fields[i]
		v, _ := a.Field(r.Field)
		if (v == r.Value) == r.Not {
			return false
		}
	}
	return true
}

// IndexTerms returns the exact-match field terms of f (metadata.name=X,
// spec.nodeName=N, ...), which every object MatchesAttrs passes
// satisfies: the watch cache indexes the watch by one of them and wakes
// it only for the changes of that value (cache.WatchOptions.Index).
func (f *Filter) IndexTerms() []cache.FieldTerm {
	var ts []cache.FieldTerm
	for _, r := range f.Fields {
		if !r.Not {
			ts = append(ts, cache.FieldTerm{Path: r.Field, Value: r.Value})
		}
	}
	return ts
}

// AttrsCover reports whether cached Attrs hold every field f selects on,
// so that f can be evaluated without peeking the value.
func (f *Filter) AttrsCover(r *resource.Resource) bool {
	for i := range f.Fields {
		switch fd := f.Fields[i].Field; fd {
		case "metadata.name", "metadata.namespace":
		default:
			if !slices.Contains(r.FieldSelectors, fd) {
				return false
			}
		}
	}
	return true
}
