// Command gen writes the CustomResourceDefinition conversion fixtures of
// codec's TestCRDv1Oracle: for each case, the value kube-apiserver stores in
// etcd (<name>.stored.json: the internal object encoded by
// apiextensions-apiserver's storage codec, LegacyCodec(v1beta1)) and what
// kube-apiserver serves for it at apiextensions.k8s.io/v1
// (<name>.v1.json: the stored value decoded, with v1beta1 defaulting, into
// the internal version and encoded by LegacyCodec(v1)).
//
// It is a module of its own (ignored by go test ./... as it is under
// testdata) so that lazyapi's module graph does not take in
// k8s.io/apiextensions-apiserver, which would raise prometheus/client_golang,
// prometheus/common, prometheus/procfs (used by the embedded etcd), cel-go
// and otelhttp for every package. Run it from this directory (needs the
// module proxy or a module cache holding its go.sum's modules):
//
//	go run . ..
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/install"
	v1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() { install.Install(scheme) }

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gen OUTDIR")
		os.Exit(2)
	}
	dir := os.Args[1]
	for _, c := range created() {
		stored, err := storeV1(c.obj)
		must(err)
		write(dir, c.name, stored)
	}
	for _, c := range legacy {
		write(dir, c.name, []byte(c.stored))
	}
}

// write writes the stored value and what kube-apiserver serves for it.
func write(dir, name string, stored []byte) {
	served, err := serveV1(stored)
	must(err)
	must(os.WriteFile(filepath.Join(dir, name+".stored.json"), stored, 0o644))
	must(os.WriteFile(filepath.Join(dir, name+".v1.json"), served, 0o644))
}

// storeV1 is kube-apiserver's write path for a v1 CRD a client sent:
// v1 defaulting, conversion to the internal version, storage encoding.
func storeV1(obj *v1.CustomResourceDefinition) ([]byte, error) {
	scheme.Default(obj)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := scheme.Convert(obj, internal, nil); err != nil {
		return nil, err
	}
	return runtime.Encode(codecs.LegacyCodec(v1beta1.SchemeGroupVersion), internal)
}

// serveV1 is kube-apiserver's read path: storage decoding (with v1beta1
// defaulting) into the internal version, then encoding at v1.
func serveV1(stored []byte) ([]byte, error) {
	obj, _, err := codecs.UniversalDecoder(apiextensions.SchemeGroupVersion).Decode(stored, nil, &apiextensions.CustomResourceDefinition{})
	if err != nil {
		return nil, err
	}
	out, err := runtime.Encode(codecs.LegacyCodec(v1.SchemeGroupVersion), obj)
	return bytes.TrimSuffix(out, []byte("\n")), err
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type createdCase struct {
	name string
	obj  *v1.CustomResourceDefinition
}

func js(s string) *v1.JSON { return &v1.JSON{Raw: []byte(s)} }

func established(names v1.CustomResourceDefinitionNames, stored ...string) v1.CustomResourceDefinitionStatus {
	t := metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))
	return v1.CustomResourceDefinitionStatus{
		Conditions: []v1.CustomResourceDefinitionCondition{
			{Type: v1.NamesAccepted, Status: v1.ConditionTrue, LastTransitionTime: t, Reason: "NoConflicts", Message: "no conflicts found"},
			{Type: v1.Established, Status: v1.ConditionTrue, LastTransitionTime: t, Reason: "InitialNamesAccepted", Message: "the initial names have been accepted"},
		},
		AcceptedNames:  names,
		StoredVersions: stored,
	}
}

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("6c1f0c4e-0000-4000-8000-%012d", len(name))),
		Generation: 1, CreationTimestamp: metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))}
}

// schema is a structural schema with defaults, examples, enums, CEL rules,
// x-kubernetes extensions and characters encoding/json escapes.
func schema(extra string) *v1.CustomResourceValidation {
	min := 1.0
	return &v1.CustomResourceValidation{OpenAPIV3Schema: &v1.JSONSchemaProps{
		Type:        "object",
		Description: "A <b>widget</b> & co " + extra,
		Properties: map[string]v1.JSONSchemaProps{
			"spec": {
				Type: "object",
				Properties: map[string]v1.JSONSchemaProps{
					"size":   {Type: "integer", Minimum: &min, Default: js(`3`), Format: "int32"},
					"ratio":  {Type: "number", Default: js(`0.25`)},
					"color":  {Type: "string", Enum: []v1.JSON{{Raw: []byte(`"red"`)}, {Raw: []byte(`"blue"`)}}, Default: js(`"red"`)},
					"labels": {Type: "object", AdditionalProperties: &v1.JSONSchemaPropsOrBool{Allows: true, Schema: &v1.JSONSchemaProps{Type: "string"}}},
					"config": {Type: "object", XPreserveUnknownFields: ptr.To(true), Default: js(`{"z":1,"a":{"b":[1,2.5,"x"]}}`)},
					"items": {Type: "array", XListType: ptr.To("map"), XListMapKeys: []string{"name"},
						Items: &v1.JSONSchemaPropsOrArray{Schema: &v1.JSONSchemaProps{Type: "object", Required: []string{"name"},
							Properties: map[string]v1.JSONSchemaProps{"name": {Type: "string", MaxLength: ptr.To[int64](63)}}}}},
					"port": {XIntOrString: true, AnyOf: []v1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
				},
				XValidations: v1.ValidationRules{{Rule: "self.size <= 10", Message: "size ≤ 10", MessageExpression: "'size is ' + string(self.size)"}},
			},
			"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
		},
	}}
}

func created() []createdCase {
	widgetNames := v1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList",
		ShortNames: []string{"wd"}, Categories: []string{"all", "things"}}
	columns := []v1.CustomResourceColumnDefinition{
		{Name: "Color", Type: "string", JSONPath: ".spec.color", Description: "the color"},
		{Name: "Size", Type: "integer", Format: "int32", JSONPath: ".spec.size", Priority: 1},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}
	single := &v1.CustomResourceDefinition{
		ObjectMeta: meta("widgets.example.com"),
		Spec: v1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: widgetNames, Scope: v1.NamespaceScoped,
			Versions: []v1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true, Schema: schema(""),
				Subresources: &v1.CustomResourceSubresources{Status: &v1.CustomResourceSubresourceStatus{},
					Scale: &v1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.size", LabelSelectorPath: ptr.To(".status.selector")}},
				AdditionalPrinterColumns: columns,
				SelectableFields:         []v1.SelectableField{{JSONPath: ".spec.color"}},
			}},
		},
		Status: established(widgetNames, "v1"),
	}
	single.Labels = map[string]string{"app.kubernetes.io/part-of": "widgets"}
	single.Annotations = map[string]string{"controller-gen.kubebuilder.io/version": "v0.19.0", "note": "<&>"}

	// Several versions: the schemas differ (not hoisted), the columns and
	// subresources are the same (hoisted to spec by the v1 -> internal
	// conversion), a webhook converts.
	gadgetNames := v1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"}
	multi := &v1.CustomResourceDefinition{
		ObjectMeta: meta("gadgets.example.org"),
		Spec: v1.CustomResourceDefinitionSpec{
			Group: "example.org", Names: gadgetNames, Scope: v1.ClusterScoped,
			Versions: []v1.CustomResourceDefinitionVersion{
				{Name: "v2", Served: true, Storage: true, Schema: schema("v2"), AdditionalPrinterColumns: columns,
					Subresources: &v1.CustomResourceSubresources{Status: &v1.CustomResourceSubresourceStatus{}}},
				{Name: "v1", Served: true, Storage: false, Deprecated: true, DeprecationWarning: ptr.To("example.org/v1 Gadget is deprecated; use v2"),
					Schema: schema("v1"), AdditionalPrinterColumns: columns,
					Subresources: &v1.CustomResourceSubresources{Status: &v1.CustomResourceSubresourceStatus{}}},
				{Name: "v1alpha1", Served: false, Storage: false, Schema: schema("v1"), AdditionalPrinterColumns: columns[:1],
					Subresources: &v1.CustomResourceSubresources{Status: &v1.CustomResourceSubresourceStatus{}}},
			},
			Conversion: &v1.CustomResourceConversion{Strategy: v1.WebhookConverter, Webhook: &v1.WebhookConversion{
				ClientConfig: &v1.WebhookClientConfig{
					Service:  &v1.ServiceReference{Namespace: "gadgets", Name: "converter", Path: ptr.To("/convert")},
					CABundle: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"),
				},
				ConversionReviewVersions: []string{"v1", "v1beta1"},
			}},
		},
		Status: established(gadgetNames, "v1", "v2"),
	}
	multi.Finalizers = []string{"customresourcecleanup.apiextensions.k8s.io"}

	// A webhook by URL; per-version selectable fields that differ; a CRD
	// that is not established yet (no status).
	urlNames := v1.CustomResourceDefinitionNames{Plural: "sprockets", Kind: "Sprocket"}
	url := &v1.CustomResourceDefinition{
		ObjectMeta: meta("sprockets.example.net"),
		Spec: v1.CustomResourceDefinitionSpec{
			Group: "example.net", Names: urlNames, Scope: v1.NamespaceScoped,
			Versions: []v1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schema("url"), SelectableFields: []v1.SelectableField{{JSONPath: ".spec.color"}}},
				{Name: "v1beta1", Served: true, Storage: false, Schema: schema("url"), SelectableFields: []v1.SelectableField{{JSONPath: ".spec.size"}}},
			},
			Conversion: &v1.CustomResourceConversion{Strategy: v1.WebhookConverter, Webhook: &v1.WebhookConversion{
				ClientConfig:             &v1.WebhookClientConfig{URL: ptr.To("https://convert.example.net:8443/convert")},
				ConversionReviewVersions: []string{"v1"},
			}},
		},
	}
	url.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		APIVersion: "apiextensions.k8s.io/v1", Time: ptr.To(metav1.NewTime(time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC))),
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:group":{}}}`)}}}
	// Edges: observedGeneration in status and conditions, a CRD being
	// deleted, identical selectable fields and schemas in two versions
	// (hoisted to spec in storage), large and fractional numbers and
	// characters encoding/json escapes (U+2028, U+2029, <, >, &) in
	// defaults and descriptions, nullable and embedded resources.
	edgeNames := v1.CustomResourceDefinitionNames{Plural: "edges", Singular: "edge", Kind: "Edge", ListKind: "EdgeList"}
	edgeSchema := &v1.CustomResourceValidation{OpenAPIV3Schema: &v1.JSONSchemaProps{
		Type: "object", Description: "line\u2028sep\u2029 <tag> & \"quoted\" \\ back",
		Properties: map[string]v1.JSONSchemaProps{
			"spec": {Type: "object", Properties: map[string]v1.JSONSchemaProps{
				"big":      {Type: "integer", Default: js(`9007199254740993`)},
				"tiny":     {Type: "number", Default: js(`1e-7`), Maximum: ptr.To(1e21), ExclusiveMaximum: true},
				"text":     {Type: "string", Default: js(`"a\u2028b <c> & d"`), Pattern: `^[a-z]+$`, Nullable: true},
				"template": {Type: "object", XEmbeddedResource: true, XPreserveUnknownFields: ptr.To(true)},
				"list":     {Type: "array", Default: js(`[]`), Items: &v1.JSONSchemaPropsOrArray{Schema: &v1.JSONSchemaProps{Type: "string"}}},
			}},
		},
	}}
	edgeStatus := established(edgeNames, "v1")
	edgeStatus.ObservedGeneration = 3
	for i := range edgeStatus.Conditions {
		edgeStatus.Conditions[i].ObservedGeneration = 3
	}
	edge := &v1.CustomResourceDefinition{
		ObjectMeta: meta("edges.example.io"),
		Spec: v1.CustomResourceDefinitionSpec{
			Group: "example.io", Names: edgeNames, Scope: v1.NamespaceScoped,
			Versions: []v1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: edgeSchema, SelectableFields: []v1.SelectableField{{JSONPath: ".spec.text"}}},
				{Name: "v1beta1", Served: true, Storage: false, Schema: edgeSchema, SelectableFields: []v1.SelectableField{{JSONPath: ".spec.text"}}},
			},
		},
		Status: edgeStatus,
	}
	edge.Generation = 3
	edge.DeletionTimestamp = ptr.To(metav1.NewTime(time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)))
	edge.DeletionGracePeriodSeconds = ptr.To[int64](0)
	edge.Finalizers = []string{"customresourcecleanup.apiextensions.k8s.io"}
	return []createdCase{{"single", single}, {"multi", multi}, {"url", url}, {"edge", edge}}
}

// legacy are values as older kube-apiservers stored them, or stored with
// fields left to defaulting: spec.version without versions, no scope, no
// conversion, no preserveUnknownFields (v1beta1 default true), no
// storedVersions, webhookClientConfig without port, top-level printer
// columns with per-version ones overridden.
var legacy = []struct{ name, stored string }{
	{"legacy-version-only", `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","metadata":{"name":"olds.example.com","uid":"u-1","resourceVersion":"77","creationTimestamp":"2019-01-02T03:04:05Z"},"spec":{"group":"example.com","version":"v1alpha1","names":{"plural":"olds","kind":"Old"},"validation":{"openAPIV3Schema":{"properties":{"spec":{"properties":{"n":{"type":"integer","minimum":0}}}}}},"subresources":{"status":{}},"additionalPrinterColumns":[{"name":"N","type":"integer","JSONPath":".spec.n"}]},"status":{"conditions":[{"type":"Established","status":"True","lastTransitionTime":"2019-01-02T03:04:05Z","reason":"InitialNamesAccepted","message":"the initial names have been accepted"}],"acceptedNames":{"plural":"olds","kind":"Old"},"storedVersions":null}}`},
	{"legacy-webhook", `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","metadata":{"name":"hooks.example.com"},"spec":{"group":"example.com","names":{"plural":"hooks","singular":"hook","kind":"Hook","listKind":"HookList"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":false,"additionalPrinterColumns":[{"name":"Own","type":"string","JSONPath":".own"}]},{"name":"v2","served":true,"storage":true}],"additionalPrinterColumns":[{"name":"Top","type":"string","description":"top-level","priority":2,"JSONPath":".top"}],"conversion":{"strategy":"Webhook","webhookClientConfig":{"service":{"namespace":"ns","name":"svc"}}},"preserveUnknownFields":false},"status":{"conditions":[],"acceptedNames":{"plural":"","kind":""},"storedVersions":[]}}`},
	{"legacy-none-review-versions", `{"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1beta1","metadata":{"name":"nones.example.com"},"spec":{"group":"example.com","names":{"plural":"nones","kind":"None"},"scope":"Cluster","versions":[{"name":"v1","served":true,"storage":true}],"conversion":{"strategy":"None","conversionReviewVersions":["v1"]},"preserveUnknownFields":true},"status":{"acceptedNames":{"plural":"nones","kind":"None"},"storedVersions":["v1"]}}`},
}
