package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// CustomResourceDefinitions are the one kind lazyapi converts.
// kube-apiserver stores them as apiextensions.k8s.io/v1beta1 JSON (the
// apiextensions storage codec is LegacyCodec(v1beta1)) but serves only
// apiextensions.k8s.io/v1 since 1.22, so clients (kubectl get crd, client-go
// informers) ask for v1. Unwrap hands out such a value already converted to
// v1, as kube-apiserver's read path does it: decode the v1beta1 JSON with
// v1beta1 defaulting into the internal version, then convert to v1 and
// encode with encoding/json (k8s.io/apiextensions-apiserver
// pkg/apis/apiextensions/v1beta1/defaults.go, v1/conversion.go and the
// generated conversions). CRDs are few and a few KB to a few hundred KB
// each, so they are decoded into Go values rather than rewritten in place.
//
// The parts that are the same in both versions (metadata, openAPIV3Schema,
// subresources, status conditions) are copied as stored (compacted and
// HTML-escaped by encoding/json, which does not change what kube-apiserver
// stored). Known differences from kube-apiserver, for values it would never
// write: unknown fields inside those parts are kept (kube-apiserver drops
// them), keys match case-insensitively (encoding/json; apimachinery's
// decoder is case-sensitive), and a v1beta1 CRD is recognised only when it
// begins with its kind and apiVersion, compact, in struct or sorted order
// (isCRDv1beta1), as every encoder kube-apiserver uses writes it.

// The two ways a stored v1beta1 CRD can begin: kube-apiserver's encoding
// of the Go struct (kind first), and sorted keys (apiVersion first), as an
// unstructured object is written.
var (
	crdV1beta1Struct = []byte(`{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1"`)
	crdV1beta1Sorted = []byte(`{"apiVersion":"apiextensions.k8s.io/v1beta1","kind":"CustomResourceDefinition"`)
)

const (
	crdV1APIVersion = "apiextensions.k8s.io/v1"
	crdKind         = "CustomResourceDefinition"
)

// isCRDv1beta1 reports whether the stored JSON object raw, starting at its
// '{', is an apiextensions.k8s.io/v1beta1 CustomResourceDefinition. It is
// two prefix comparisons, which every JSON value (every custom resource)
// pays.
func isCRDv1beta1(raw []byte) bool {
	return bytes.HasPrefix(raw, crdV1beta1Struct) || bytes.HasPrefix(raw, crdV1beta1Sorted)
}

// ConvertCRDv1beta1 converts a CustomResourceDefinition stored as
// apiextensions.k8s.io/v1beta1 JSON into the apiextensions.k8s.io/v1 JSON
// kube-apiserver serves for it (kind and apiVersion first, metadata as
// stored). It appends to dst and returns the extended slice; on error dst
// is returned unchanged.
func ConvertCRDv1beta1(dst, stored []byte) ([]byte, error) {
	var in crdV1beta1
	if err := json.Unmarshal(stored, &in); err != nil {
		return dst, fmt.Errorf("cannot decode CustomResourceDefinition v1beta1 JSON: %w", err)
	}
	in.setDefaults()
	out := in.toV1()
	b, err := json.Marshal(&out)
	if err != nil {
		return dst, fmt.Errorf("cannot encode CustomResourceDefinition v1 JSON: %w", err)
	}
	if dst == nil {
		return b, nil
	}
	return append(dst, b...), nil
}

// unwrapCRD is Unwrap for a v1beta1 CRD: Raw is its v1 JSON, in a new
// buffer.
func unwrapCRD(stored []byte) (Object, error) {
	raw, err := ConvertCRDv1beta1(nil, stored)
	if err != nil {
		return Object{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return Object{Format: FormatJSON, APIVersion: crdV1APIVersion, Kind: crdKind, Raw: raw}, nil
}

// rawJSON is a JSON value copied as is; a JSON null is absent, as it is for
// the pointer fields it stands for.
type rawJSON []byte

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*r = nil
		return nil
	}
	*r = append((*r)[:0], b...)
	return nil
}

func (r rawJSON) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r, nil
}

// The v1beta1 types as stored, with the parts common to both versions kept
// raw.
type crdV1beta1 struct {
	Metadata rawJSON        `json:"metadata"`
	Spec     crdSpecV1beta1 `json:"spec"`
	Status   crdStatus      `json:"status"`
}

type crdSpecV1beta1 struct {
	Group                    string                `json:"group"`
	Version                  string                `json:"version"`
	Names                    crdNames              `json:"names"`
	Scope                    string                `json:"scope"`
	Validation               rawJSON               `json:"validation"`
	Subresources             rawJSON               `json:"subresources"`
	Versions                 []crdVersionV1beta1   `json:"versions"`
	AdditionalPrinterColumns []crdColumnV1beta1    `json:"additionalPrinterColumns"`
	SelectableFields         []crdSelectableField  `json:"selectableFields"`
	Conversion               *crdConversionV1beta1 `json:"conversion"`
	PreserveUnknownFields    *bool                 `json:"preserveUnknownFields"`
}

type crdVersionV1beta1 struct {
	Name                     string               `json:"name"`
	Served                   bool                 `json:"served"`
	Storage                  bool                 `json:"storage"`
	Deprecated               bool                 `json:"deprecated"`
	DeprecationWarning       *string              `json:"deprecationWarning"`
	Schema                   rawJSON              `json:"schema"`
	Subresources             rawJSON              `json:"subresources"`
	AdditionalPrinterColumns []crdColumnV1beta1   `json:"additionalPrinterColumns"`
	SelectableFields         []crdSelectableField `json:"selectableFields"`
}

// crdColumnV1beta1 spells the path "JSONPath"; v1 spells it "jsonPath".
type crdColumnV1beta1 struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format"`
	Description string `json:"description"`
	Priority    int32  `json:"priority"`
	JSONPath    string `json:"JSONPath"`
}

type crdConversionV1beta1 struct {
	Strategy                 string                  `json:"strategy"`
	WebhookClientConfig      *crdWebhookClientConfig `json:"webhookClientConfig"`
	ConversionReviewVersions []string                `json:"conversionReviewVersions"`
}

// The types both versions share, in v1's field order and omitempty.
type crdNames struct {
	Plural     string   `json:"plural"`
	Singular   string   `json:"singular,omitempty"`
	ShortNames []string `json:"shortNames,omitempty"`
	Kind       string   `json:"kind"`
	ListKind   string   `json:"listKind,omitempty"`
	Categories []string `json:"categories,omitempty"`
}

type crdSelectableField struct {
	JSONPath string `json:"jsonPath"`
}

type crdWebhookClientConfig struct {
	URL      *string              `json:"url,omitempty"`
	Service  *crdServiceReference `json:"service,omitempty"`
	CABundle []byte               `json:"caBundle,omitempty"`
}

type crdServiceReference struct {
	Namespace string  `json:"namespace"`
	Name      string  `json:"name"`
	Path      *string `json:"path,omitempty"`
	Port      *int32  `json:"port,omitempty"`
}

type crdStatus struct {
	Conditions         rawJSON  `json:"conditions"`
	AcceptedNames      crdNames `json:"acceptedNames"`
	StoredVersions     []string `json:"storedVersions"`
	ObservedGeneration int64    `json:"observedGeneration,omitempty"`
}

// The v1 types as served.
type crdV1 struct {
	Kind       string    `json:"kind"`
	APIVersion string    `json:"apiVersion"`
	Metadata   rawJSON   `json:"metadata"`
	Spec       crdSpecV1 `json:"spec"`
	Status     crdStatus `json:"status"`
}

type crdSpecV1 struct {
	Group                 string           `json:"group"`
	Names                 crdNames         `json:"names"`
	Scope                 string           `json:"scope"`
	Versions              []crdVersionV1   `json:"versions"`
	Conversion            *crdConversionV1 `json:"conversion,omitempty"`
	PreserveUnknownFields bool             `json:"preserveUnknownFields,omitempty"`
}

type crdVersionV1 struct {
	Name                     string               `json:"name"`
	Served                   bool                 `json:"served"`
	Storage                  bool                 `json:"storage"`
	Deprecated               bool                 `json:"deprecated,omitempty"`
	DeprecationWarning       *string              `json:"deprecationWarning,omitempty"`
	Schema                   rawJSON              `json:"schema,omitempty"`
	Subresources             rawJSON              `json:"subresources,omitempty"`
	AdditionalPrinterColumns []crdColumnV1        `json:"additionalPrinterColumns,omitempty"`
	SelectableFields         []crdSelectableField `json:"selectableFields,omitempty"`
}

type crdColumnV1 struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Format      string `json:"format,omitempty"`
	Description string `json:"description,omitempty"`
	Priority    int32  `json:"priority,omitempty"`
	JSONPath    string `json:"jsonPath"`
}

type crdConversionV1 struct {
	Strategy string                `json:"strategy"`
	Webhook  *crdWebhookConversion `json:"webhook,omitempty"`
}

type crdWebhookConversion struct {
	ClientConfig             *crdWebhookClientConfig `json:"clientConfig,omitempty"`
	ConversionReviewVersions []string                `json:"conversionReviewVersions"`
}

// setDefaults applies v1beta1's defaulting, which kube-apiserver's decoder
// runs on every stored CRD it reads (SetObjectDefaults_CustomResourceDefinition).
func (c *crdV1beta1) setDefaults() {
	s := &c.Spec
	if s.Scope == "" {
		s.Scope = "Namespaced"
	}
	if s.Names.Singular == "" {
		s.Names.Singular = strings.ToLower(s.Names.Kind)
	}
	if s.Names.ListKind == "" && s.Names.Kind != "" {
		s.Names.ListKind = s.Names.Kind + "List"
	}
	if len(s.Versions) == 0 && s.Version != "" {
		s.Versions = []crdVersionV1beta1{{Name: s.Version, Storage: true, Served: true}}
	}
	if s.Conversion == nil {
		s.Conversion = &crdConversionV1beta1{Strategy: "None"}
	}
	if s.Conversion.Strategy == "Webhook" && len(s.Conversion.ConversionReviewVersions) == 0 {
		s.Conversion.ConversionReviewVersions = []string{"v1beta1"}
	}
	if s.PreserveUnknownFields == nil {
		t := true
		s.PreserveUnknownFields = &t
	}
	if len(c.Status.StoredVersions) == 0 {
		for _, v := range s.Versions {
			if v.Storage {
				c.Status.StoredVersions = append(c.Status.StoredVersions, v.Name)
				break
			}
		}
	}
	if cc := s.Conversion.WebhookClientConfig; cc != nil && cc.Service != nil && cc.Service.Port == nil {
		p := int32(443)
		cc.Service.Port = &p
	}
}

// toV1 converts a defaulted v1beta1 CRD to v1: spec.version is dropped,
// and top-level validation, subresources, additionalPrinterColumns and
// selectableFields, when set, replace those of every version
// (Convert_apiextensions_CustomResourceDefinitionSpec_To_v1_CustomResourceDefinitionSpec);
// the webhook settings move under conversion.webhook.
func (c *crdV1beta1) toV1() crdV1 {
	s := &c.Spec
	out := crdV1{Kind: crdKind, APIVersion: crdV1APIVersion, Metadata: c.Metadata, Status: c.Status}
	if out.Metadata == nil {
		out.Metadata = rawJSON("{}")
	}
	o := &out.Spec
	o.Group, o.Names, o.Scope = s.Group, s.Names, s.Scope
	if s.Versions != nil {
		o.Versions = make([]crdVersionV1, len(s.Versions))
	}
	for i, v := range s.Versions {
		o.Versions[i] = crdVersionV1{Name: v.Name, Served: v.Served, Storage: v.Storage, Deprecated: v.Deprecated,
			DeprecationWarning: v.DeprecationWarning, Schema: v.Schema, Subresources: v.Subresources,
			AdditionalPrinterColumns: columnsV1(v.AdditionalPrinterColumns), SelectableFields: v.SelectableFields}
	}
	if len(o.Versions) == 0 && s.Version != "" {
		o.Versions = []crdVersionV1{{Name: s.Version, Served: true, Storage: true}}
	}
	for i := range o.Versions {
		v := &o.Versions[i]
		if s.Subresources != nil {
			v.Subresources = s.Subresources
		}
		if s.Validation != nil {
			v.Schema = s.Validation
		}
		if s.AdditionalPrinterColumns != nil {
			v.AdditionalPrinterColumns = columnsV1(s.AdditionalPrinterColumns)
		}
		if s.SelectableFields != nil {
			v.SelectableFields = s.SelectableFields
		}
	}
	if cv := s.Conversion; cv != nil {
		o.Conversion = &crdConversionV1{Strategy: cv.Strategy}
		if cv.WebhookClientConfig != nil || cv.ConversionReviewVersions != nil {
			o.Conversion.Webhook = &crdWebhookConversion{ClientConfig: cv.WebhookClientConfig,
				ConversionReviewVersions: cv.ConversionReviewVersions}
		}
	}
	if s.PreserveUnknownFields != nil {
		o.PreserveUnknownFields = *s.PreserveUnknownFields
	}
	return out
}

func columnsV1(in []crdColumnV1beta1) []crdColumnV1 {
	if in == nil {
		return nil
	}
	out := make([]crdColumnV1, len(in))
	for i, c := range in {
		out[i] = crdColumnV1{Name: c.Name, Type: c.Type, Format: c.Format, Description: c.Description,
			Priority: c.Priority, JSONPath: c.JSONPath}
	}
	return out
}
