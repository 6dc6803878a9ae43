package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/lazyapi/lazyapi/codec"
)

// The names of the template CRDs (internal/testing/kubecapture/crds.go): the
// documents kube-apiserver built for them are the templates of every CRD's
// documents here, with these tokens replaced by the CRD's names.
const (
	tmplGroup         = "zzgroup.zzdomain.zztld"
	tmplGroupReversed = "zztld.zzdomain.zzgroup"
	tmplOpGroup       = "ZzgroupZzdomainZztld" // ToValidOperationID(group, true)
	tmplTagGroup      = "zzgroupZzdomainZztld" // ToValidOperationID(group, false)
	tmplVersion       = "zzversion"
	tmplOpVersion     = "Zzversion"
)

// tmplKind is one of the two template kinds: namespaced or cluster-scoped.
type tmplKind struct{ kind, plural string }

var (
	tmplSpaced  = tmplKind{"Zzspacedkind", "zzspacedplural"}
	tmplCluster = tmplKind{"Zzclusterkind", "zzclusterplural"}
)

// CRD is what one CustomResourceDefinition contributes to the OpenAPI
// documents, as apiextensions-apiserver's builder (BuildOpenAPIV3,
// BuildOpenAPIV2) makes them: per served version, the kind's schemas and
// what is needed to make its paths and list schema from the templates when
// a document is built. It is immutable.
type CRD struct {
	Group    string
	Versions []*CRDVersion
}

// CRDVersion is one served version of a CRD.
type CRDVersion struct {
	Version    string
	tk         tmplKind
	replacer   *strings.Replacer
	hasStatus  bool
	hasScale   bool
	selectable []any
	// v3Kind and v2Kind are the kind's schemas.
	v3Kind, v2Kind json.RawMessage
}

// parts returns the version's paths and the schemas (v3
// components.schemas, v2 definitions) they refer to.
func (v *CRDVersion) parts(t *templates, v2 bool) (paths, schemas map[string]json.RawMessage, err error) {
	tm, kind := t.v3, v.v3Kind
	if v2 {
		tm, kind = t.v2, v.v2Kind
	}
	return tm.instantiate(v.tk, v.replacer, v.hasStatus, v.hasScale, kind, v.selectable)
}

// crdV1 is the part of an apiextensions.k8s.io/v1 CRD the builder reads.
type crdV1 struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Group                 string `json:"group"`
		Scope                 string `json:"scope"`
		PreserveUnknownFields bool   `json:"preserveUnknownFields"`
		Names                 struct {
			Plural   string `json:"plural"`
			Kind     string `json:"kind"`
			ListKind string `json:"listKind"`
		} `json:"names"`
		Versions []struct {
			Name    string `json:"name"`
			Served  bool   `json:"served"`
			Storage bool   `json:"storage"`
			Schema  *struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
			Subresources *struct {
				Status *json.RawMessage `json:"status"`
				Scale  *json.RawMessage `json:"scale"`
			} `json:"subresources"`
			SelectableFields []struct {
				JSONPath string `json:"jsonPath"`
			} `json:"selectableFields"`
		} `json:"versions"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// nonStructural reports whether kube-apiserver found the CRD's schemas not
// structural (condition NonStructuralSchema, only possible for CRDs created
// through v1beta1): the builder then publishes {"type":"object"} for them.
func (c *crdV1) nonStructural() bool {
	for _, cond := range c.Status.Conditions {
		if cond.Type == "NonStructuralSchema" && cond.Status == "True" {
			return true
		}
	}
	return false
}

// BuildCRD builds the documents of a stored CustomResourceDefinition
// (apiextensions.k8s.io/v1beta1 JSON as kube-apiserver stores it, or v1).
// It returns nil for a value that is not a CRD it can read; the resource
// table decides separately whether the CRD is served.
func BuildCRD(stored []byte) *CRD {
	c, err := buildCRD(stored)
	if err != nil {
		return nil
	}
	return c
}

func buildCRD(stored []byte) (*CRD, error) {
	v1 := stored
	if bytes.Contains(stored[:min(len(stored), 200)], []byte(`"apiextensions.k8s.io/v1beta1"`)) {
		var err error
		if v1, err = codec.ConvertCRDv1beta1(nil, stored); err != nil {
			return nil, err
		}
	}
	var in crdV1
	d := json.NewDecoder(bytes.NewReader(v1))
	d.UseNumber()
	if err := d.Decode(&in); err != nil {
		return nil, fmt.Errorf("cannot decode CRD: %w", err)
	}
	t, err := loadTemplates()
	if err != nil {
		return nil, err
	}
	names := in.Spec.Names
	if names.ListKind == "" {
		names.ListKind = names.Kind + "List"
	}
	out := &CRD{Group: in.Spec.Group}
	for _, v := range in.Spec.Versions {
		if !v.Served {
			continue
		}
		cv := &CRDVersion{Version: v.Name, tk: tmplSpaced}
		if in.Spec.Scope == "Cluster" {
			cv.tk = tmplCluster
		}
		cv.replacer = newReplacer(cv.tk, in.Spec.Group, v.Name, names.Kind, names.ListKind, names.Plural)
		cv.hasStatus = v.Subresources != nil && v.Subresources.Status != nil
		cv.hasScale = v.Subresources != nil && v.Subresources.Scale != nil
		for _, f := range v.SelectableFields {
			cv.selectable = append(cv.selectable, map[string]any{"fieldPath": strings.TrimPrefix(f.JSONPath, ".")})
		}
		var schema map[string]any
		if v.Schema != nil && !in.nonStructural() {
			schema = v.Schema.OpenAPIV3Schema
		}
		var err error
		if cv.v3Kind, err = t.v3.kindSchema(cv, func(tmpl map[string]any) map[string]any {
			return kindSchema(tmpl, schema, false, false, cv.selectable)
		}); err != nil {
			return nil, err
		}
		if cv.v2Kind, err = t.v2.kindSchema(cv, func(tmpl map[string]any) map[string]any {
			return kindSchema(tmpl, schema, true, in.Spec.PreserveUnknownFields, cv.selectable)
		}); err != nil {
			return nil, err
		}
		out.Versions = append(out.Versions, cv)
	}
	return out, nil
}

// template is the paths and schemas kube-apiserver built for the two
// template CRDs in one document version.
type template struct {
	v2              bool
	paths, schemas  map[string]json.RawMessage
	refPrefix       string // "#/components/schemas/" or "#/definitions/"
	scaleSchemaName string
}

// kindSchema returns the kind's schema of a CRD version: build applied to
// the template kind's schema with the version's names.
func (t *template) kindSchema(v *CRDVersion, build func(tmpl map[string]any) map[string]any) (json.RawMessage, error) {
	name := tmplGroupReversed + "." + tmplVersion + "." + v.tk.kind
	s, ok := t.schemas[name]
	if !ok {
		return nil, fmt.Errorf("the CRD template has no schema %q", name)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(v.replacer.Replace(string(s))), &m); err != nil {
		return nil, fmt.Errorf("cannot decode the CRD template's %q: %w", name, err)
	}
	return json.Marshal(build(m))
}

// instantiate returns the paths and schemas of a CRD version made from
// the template kind tk: its paths (without status or scale when the
// version has none), every schema they refer to (as builder3 includes only
// referenced definitions) with the kind's schema kind and the list's with
// its selectable fields.
func (t *template) instantiate(tk tmplKind, r *strings.Replacer, hasStatus, hasScale bool,
	kind json.RawMessage, selectable []any) (paths, schemas map[string]json.RawMessage, err error) {
	keep := func(p string) bool {
		return strings.Contains(p, "/"+tk.plural) &&
			(hasStatus || !strings.HasSuffix(p, "/status")) && (hasScale || !strings.HasSuffix(p, "/scale"))
	}
	paths = map[string]json.RawMessage{}
	used := map[string]bool{}
	var walk func(raw []byte)
	walk = func(raw []byte) {
		for _, name := range refs(raw, t.refPrefix) {
			if s, ok := t.schemas[name]; ok && !used[name] {
				used[name] = true
				walk(s)
			}
		}
	}
	for p, item := range t.paths {
		if keep(p) {
			paths[r.Replace(p)] = json.RawMessage(r.Replace(string(item)))
			walk(item)
		}
	}
	kindName := tmplGroupReversed + "." + tmplVersion + "." + tk.kind
	listName := kindName + "List"
	schemas = map[string]json.RawMessage{}
	for name := range used {
		switch name {
		case kindName:
			schemas[r.Replace(name)] = kind
		case listName:
			s := json.RawMessage(r.Replace(string(t.schemas[name])))
			if len(selectable) > 0 {
				var m map[string]any
				if err := json.Unmarshal(s, &m); err != nil {
					return nil, nil, err
				}
				m["x-kubernetes-selectable-fields"] = selectable
				if s, err = json.Marshal(m); err != nil {
					return nil, nil, err
				}
			}
			schemas[r.Replace(name)] = s
		default:
			schemas[name] = t.schemas[name]
		}
	}
	return paths, schemas, nil
}

// refs returns the schema names raw refers to with "$ref": prefix+name.
func refs(raw []byte, prefix string) []string {
	var names []string
	needle := []byte(`"$ref":"` + prefix)
	for {
		i := bytes.Index(raw, needle)
		if i < 0 {
			return names
		}
		raw = raw[i+len(needle):]
		j := bytes.IndexByte(raw, '"')
		if j < 0 {
			return names
		}
		names = append(names, strings.ReplaceAll(strings.ReplaceAll(string(raw[:j]), "~1", "/"), "~0", "~"))
		raw = raw[j:]
	}
}

// newReplacer replaces the template's tokens by a CRD version's names as
// apiextensions-apiserver's builder and kube-openapi spell them: schema
// names (gvkToModelName: reversed group), operation IDs and tags
// (GetOperationIDAndTags: ToValidOperationID of the group without
// ".k8s.io" and of the version), paths, descriptions with their article
// (GetArticleForNoun), and x-kubernetes-group-version-kind.
func newReplacer(tk tmplKind, group, version, kind, listKind, plural string) *strings.Replacer {
	opGroup := strings.TrimSuffix(group, ".k8s.io")
	return strings.NewReplacer(
		tmplGroupReversed+"."+tmplVersion+"."+tk.kind+"List", modelName(group, version, listKind),
		tmplGroupReversed+"."+tmplVersion+"."+tk.kind, modelName(group, version, kind),
		tmplOpGroup+tmplOpVersion, validOperationID(opGroup, true)+validOperationID(version, true),
		tmplTagGroup+"_"+tmplVersion, validOperationID(opGroup, false)+"_"+validOperationID(version, false),
		tmplGroup, group,
		tk.kind+"List", listKind,
		" a "+tk.kind, articleForNoun(kind, " ")+kind,
		tk.kind, kind,
		tk.plural, plural,
		tmplVersion, version,
	)
}

// modelName is the builder's gvkToModelName: "com.example.stable.v1.CronTab".
func modelName(group, version, kind string) string {
	parts := strings.Split(group, ".")
	slices.Reverse(parts)
	return strings.Join(parts, ".") + "." + version + "." + kind
}

// validOperationID is k8s.io/apiserver/pkg/endpoints/openapi's
// ToValidOperationID.
func validOperationID(s string, capitalizeFirst bool) string {
	var b strings.Builder
	capitalize := capitalizeFirst
	for i, r := range s {
		if unicode.IsLetter(r) || r == '_' || (i != 0 && unicode.IsDigit(r)) {
			if capitalize {
				b.WriteRune(unicode.ToUpper(r))
				capitalize = false
			} else {
				b.WriteRune(r)
			}
		} else {
			capitalize = true
		}
	}
	return b.String()
}

// articleForNoun is k8s.io/apiserver/pkg/endpoints's GetArticleForNoun.
func articleForNoun(noun, padding string) string {
	if !strings.HasSuffix(noun, "ss") && strings.HasSuffix(noun, "s") {
		return padding
	}
	article := "a"
	if noun != "" && strings.ContainsRune("aeiou", unicode.ToLower(rune(noun[0]))) {
		article = "an"
	}
	return padding + article + padding
}
