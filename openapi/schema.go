package openapi

import "slices"

// kindSchema is apiextensions-apiserver's buildKubeNative: the CRD
// version's openAPIV3Schema as a structural schema (Unfold, for v2
// ToStructuralOpenAPIV2, then ToKubeOpenAPI), with apiVersion, kind and
// metadata properties and x-kubernetes-group-version-kind taken from the
// template's kind schema tmpl, the properties of embedded resources
// (addEmbeddedProperties) and the selectable fields. For v2 a schema that
// preserves unknown fields at its root is {"type":"object"}, and defaults
// are pruned (handler.PruneDefaults).
func kindSchema(tmpl, schema map[string]any, v2, preserveUnknownFields bool, selectable []any) map[string]any {
	tprops, _ := tmpl["properties"].(map[string]any)
	var ret map[string]any
	switch {
	case schema == nil || (v2 && (isTrue(schema, "x-kubernetes-preserve-unknown-fields") || preserveUnknownFields)):
		ret = map[string]any{"type": "object"}
	default:
		ret = structural(schema, v2)
		props, _ := ret["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
			ret["properties"] = props
		}
		for _, k := range []string{"metadata", "apiVersion", "kind"} {
			if p, ok := tprops[k]; ok {
				props[k] = p
			}
		}
		addEmbedded(ret, v2, tprops)
		if v2 {
			pruneDefaults(ret)
		}
	}
	ret["x-kubernetes-group-version-kind"] = tmpl["x-kubernetes-group-version-kind"]
	if len(selectable) > 0 {
		ret["x-kubernetes-selectable-fields"] = selectable
	}
	return ret
}

// structuralKeys are the keys of a JSONSchemaProps a structural schema
// keeps (Generic, Extensions, ValueValidation, ValidationExtensions of
// k8s.io/apiextensions-apiserver/pkg/apiserver/schema), with whether a
// false or empty value is dropped.
var structuralKeys = map[string]bool{
	"type": false, "description": false, "title": false, "default": false, "externalDocs": false, "example": false,
	"format": false, "maximum": false, "minimum": false, "maxLength": false, "minLength": false, "pattern": false,
	"maxItems": false, "minItems": false, "multipleOf": false, "enum": false, "maxProperties": false, "minProperties": false,
	"nullable": true, "exclusiveMaximum": true, "exclusiveMinimum": true, "uniqueItems": true, "required": true,
	"x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true, "x-kubernetes-int-or-string": true,
	"x-kubernetes-list-map-keys": true, "x-kubernetes-list-type": false, "x-kubernetes-map-type": false,
	"x-kubernetes-validations": true,
}

// structural returns s as ToKubeOpenAPI writes a structural schema after
// Unfold (and, for v2, ToStructuralOpenAPIV2, which visits a node before its
// children).
func structural(s map[string]any, v2 bool) map[string]any {
	out := map[string]any{}
	for k, v := range s {
		dropEmpty, ok := structuralKeys[k]
		if !ok || v == nil || (dropEmpty && empty(v)) {
			continue
		}
		out[k] = v
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := s[k].([]any); ok && len(l) > 0 {
			n := make([]any, 0, len(l))
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					n = append(n, structural(m, false))
				}
			}
			out[k] = n
		}
	}
	if m, ok := s["not"].(map[string]any); ok {
		out["not"] = structural(m, false)
	}
	if isTrue(s, "x-kubernetes-int-or-string") {
		unfoldIntOrString(out)
	}
	var props map[string]any
	if m, ok := s["properties"].(map[string]any); ok && len(m) > 0 {
		props = m
	}
	items, _ := s["items"].(map[string]any)
	if v2 {
		delete(out, "allOf")
		delete(out, "oneOf")
		delete(out, "anyOf")
		delete(out, "not")
		if isTrue(s, "nullable") {
			delete(out, "type")
			delete(out, "nullable")
			items, props = nil, nil
		}
		if isTrue(s, "x-kubernetes-preserve-unknown-fields") {
			items, props = nil, nil
		}
		if items == nil && out["type"] == "array" {
			delete(out, "type")
		}
		if isTrue(s, "x-kubernetes-preserve-unknown-fields") && out["type"] == "object" {
			delete(out, "type")
		}
		if req, ok := out["required"].([]any); ok {
			req = slices.DeleteFunc(slices.Clone(req), func(f any) bool {
				name, _ := f.(string)
				p, _ := props[name].(map[string]any)
				return isTrue(p, "nullable")
			})
			if ap, ok := s["additionalProperties"].(map[string]any); ok && isTrue(ap, "nullable") {
				req = nil
			}
			if len(req) == 0 {
				delete(out, "required")
			} else {
				out["required"] = req
			}
		}
	}
	if items != nil {
		out["items"] = structural(items, v2)
	}
	if props != nil {
		p := make(map[string]any, len(props))
		for k, v := range props {
			if m, ok := v.(map[string]any); ok {
				p[k] = structural(m, v2)
			}
		}
		out["properties"] = p
	}
	switch ap := s["additionalProperties"].(type) {
	case bool:
		out["additionalProperties"] = ap
	case map[string]any:
		out["additionalProperties"] = structural(ap, v2)
	}
	return out
}

// unfoldIntOrString is Structural.Unfold for x-kubernetes-int-or-string:
// anyOf integer or string, unless the schema already says so.
func unfoldIntOrString(s map[string]any) {
	intOrString := []any{map[string]any{"type": "integer"}, map[string]any{"type": "string"}}
	anyOf, _ := s["anyOf"].([]any)
	if isIntOrStringAnyOf(anyOf) {
		return
	}
	if allOf, _ := s["allOf"].([]any); len(allOf) > 0 {
		if first, ok := allOf[0].(map[string]any); ok {
			if a, _ := first["anyOf"].([]any); isIntOrStringAnyOf(a) {
				return
			}
		}
	}
	if anyOf == nil {
		s["anyOf"] = intOrString
		return
	}
	allOf, _ := s["allOf"].([]any)
	s["allOf"] = append([]any{map[string]any{"anyOf": intOrString}}, allOf...)
}

func isIntOrStringAnyOf(l []any) bool {
	if len(l) != 2 {
		return false
	}
	a, _ := l[0].(map[string]any)
	b, _ := l[1].(map[string]any)
	return len(a) == 1 && len(b) == 1 && a["type"] == "integer" && b["type"] == "string"
}

// addEmbedded is the builder's addEmbeddedProperties: an
// x-kubernetes-embedded-resource gets apiVersion, kind (TypeMeta's, with
// the builder's descriptions) and metadata properties, and requires kind
// and apiVersion. Children first; in v2 a node that preserves unknown
// fields is left as it is.
func addEmbedded(s map[string]any, v2 bool, tprops map[string]any) {
	if s == nil {
		return
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, v := range props {
			m, _ := v.(map[string]any)
			addEmbedded(m, v2, tprops)
		}
	}
	if m, ok := s["items"].(map[string]any); ok {
		addEmbedded(m, v2, tprops)
	}
	if m, ok := s["additionalProperties"].(map[string]any); ok {
		addEmbedded(m, v2, tprops)
	}
	if v2 && isTrue(s, "x-kubernetes-preserve-unknown-fields") {
		return
	}
	if !isTrue(s, "x-kubernetes-embedded-resource") {
		return
	}
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		s["properties"] = props
	}
	props["apiVersion"] = withDescription(tprops["apiVersion"],
		"apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources")
	props["kind"] = withDescription(tprops["kind"],
		"kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds")
	props["metadata"] = tprops["metadata"]
	req, _ := s["required"].([]any)
	for _, f := range []string{"kind", "apiVersion"} {
		if !slices.Contains(req, any(f)) {
			req = append(req, f)
		}
	}
	s["required"] = req
}

func withDescription(v any, desc string) any {
	m, _ := v.(map[string]any)
	out := make(map[string]any, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out["description"] = desc
	return out
}

// pruneDefaults removes the default of s and of every schema in it
// (kube-openapi handler.PruneDefaults).
func pruneDefaults(s map[string]any) {
	if s == nil {
		return
	}
	delete(s, "default")
	if props, ok := s["properties"].(map[string]any); ok {
		for _, v := range props {
			m, _ := v.(map[string]any)
			pruneDefaults(m)
		}
	}
	for _, k := range []string{"items", "additionalProperties", "not"} {
		m, _ := s[k].(map[string]any)
		pruneDefaults(m)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		l, _ := s[k].([]any)
		for _, v := range l {
			m, _ := v.(map[string]any)
			pruneDefaults(m)
		}
	}
}

func isTrue(m map[string]any, k string) bool {
	b, _ := m[k].(bool)
	return b
}

func empty(v any) bool {
	switch v := v.(type) {
	case bool:
		return !v
	case []any:
		return len(v) == 0
	case string:
		return v == ""
	}
	return false
}
