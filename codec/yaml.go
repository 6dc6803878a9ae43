package codec

import (
	"bytes"
	"fmt"
	"sync"

	"sigs.k8s.io/yaml"
)

// YAML (application/yaml) is written as kube-apiserver writes it: the JSON
// encoding converted by sigs.k8s.io/yaml. A list is streamed item by item
// and its bytes equal sigs.k8s.io/yaml.JSONToYAML of the whole list's JSON:
// the keys of a list sort as apiVersion, items, kind, metadata, so the head
// is "apiVersion: ...\nitems:\n", each item is a "- " sequence entry, and
// the tail is "kind: ...\nmetadata: ...".

var yamlScratch = sync.Pool{New: func() any { return new([]byte) }}

// AppendYAML appends obj as a YAML document (Schema.AppendJSON, then
// JSONToYAML). On error dst is returned unchanged.
func (s *Schema) AppendYAML(dst []byte, obj Object, rv int64) ([]byte, error) {
	bp := yamlScratch.Get().(*[]byte)
	defer yamlScratch.Put(bp)
	js, err := s.AppendJSON((*bp)[:0], obj, rv, JSONOptions{})
	*bp = js[:0]
	if err != nil {
		return dst, err
	}
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return dst, fmt.Errorf("cannot convert %s %s to YAML: %w", obj.APIVersion, obj.Kind, err)
	}
	return append(dst, y...), nil
}

// AppendYAMLListHead appends "apiVersion: <apiVersion>\nitems:\n". A list
// with no items must be written with AppendYAMLEmptyList instead, since
// sigs.k8s.io/yaml writes "items: []" for it; AppendYAMLListTail also
// rewrites a head that is still at the end of dst.
func AppendYAMLListHead(dst []byte, apiVersion string) []byte {
	dst = appendYAMLScalarKey(dst, "apiVersion", apiVersion)
	return append(dst, "items:\n"...)
}

// AppendYAMLListItem appends obj as one entry of the items sequence,
// indented as it is inside the whole list. omitTypeMeta is true for items of
// built-in lists. On error dst is returned unchanged.
func (s *Schema) AppendYAMLListItem(dst []byte, obj Object, rv int64, omitTypeMeta bool) ([]byte, error) {
	bp := yamlScratch.Get().(*[]byte)
	defer yamlScratch.Put(bp)
	// {"items":[<item>]} converts to "items:\n- ...": the entry with the
	// same indentation and line folding as in the whole list.
	js := append((*bp)[:0], `{"items":[`...)
	js, err := s.AppendJSON(js, obj, rv, JSONOptions{OmitTypeMeta: omitTypeMeta})
	if err != nil {
		*bp = js[:0]
		return dst, err
	}
	js = append(js, "]}"...)
	*bp = js[:0]
	y, err := yaml.JSONToYAML(js)
	if err != nil {
		return dst, fmt.Errorf("cannot convert %s %s to YAML: %w", obj.APIVersion, obj.Kind, err)
	}
	y, ok := bytes.CutPrefix(y, []byte("items:\n"))
	if !ok {
		return dst, fmt.Errorf("cannot convert %s %s to YAML: unexpected list item %.40q", obj.APIVersion, obj.Kind, y)
	}
	return append(dst, y...), nil
}

// AppendYAMLListTail appends "kind: <listKind>\nmetadata:\n  ...". If dst
// ends with the head (no items were written and the head was not flushed),
// the head's "items:" becomes "items: []".
func AppendYAMLListTail(dst []byte, listKind string, m ListMeta) []byte {
	if bytes.HasSuffix(dst, []byte("\nitems:\n")) {
		dst = append(dst[:len(dst)-1], " []\n"...)
	}
	dst = appendYAMLScalarKey(dst, "kind", listKind)
	var js [128]byte
	y, err := yaml.JSONToYAML(append(appendListMetaJSON(append(js[:0], `{"metadata":`...), m), '}'))
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot convert list metadata to YAML: %v", err))
	}
	return append(dst, y...)
}

// AppendYAMLEmptyList appends a whole list without items.
func AppendYAMLEmptyList(dst []byte, apiVersion, listKind string, m ListMeta) []byte {
	dst = appendYAMLScalarKey(dst, "apiVersion", apiVersion)
	dst = append(dst, "items: []\n"...)
	return AppendYAMLListTail(dst, listKind, m)
}

// appendYAMLScalarKey appends "key: <value>\n" with value quoted as
// sigs.k8s.io/yaml would quote it.
func appendYAMLScalarKey(dst []byte, key, value string) []byte {
	var js [128]byte
	b := append(js[:0], `{"`...)
	b = append(b, key...)
	b = append(b, `":`...)
	b = appendJSONQuote(b, value)
	b = append(b, '}')
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot convert a string to YAML: %v", err))
	}
	return append(dst, y...)
}
