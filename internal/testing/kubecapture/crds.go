package kubecapture

// TemplateGroup, TemplateVersion and the template kinds name the two
// CustomResourceDefinitions whose OpenAPI documents, as kube-apiserver
// builds them, package openapi uses as templates for the documents of any
// CRD: every occurrence of these tokens is replaced by the CRD's names.
// They are spelled so that no other text of the documents contains them.
const (
	TemplateGroup        = "zzgroup.zzdomain.zztld"
	TemplateVersion      = "zzversion"
	TemplateSpacedKind   = "Zzspacedkind"
	TemplateSpacedPlural = "zzspacedplural"
	TemplateClusterKind  = "Zzclusterkind"
	TemplateClusterPlrl  = "zzclusterplural"
)

// templateCRD returns a CRD with status and scale subresources and a small
// schema; the kind's schema is replaced per CRD, the rest is kept.
func templateCRD(kind, plural, scope string) string {
	return `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"` + plural + `.` + TemplateGroup + `"},
"spec":{"group":"` + TemplateGroup + `","scope":"` + scope + `",
"names":{"plural":"` + plural + `","singular":"` + lower(kind) + `","kind":"` + kind + `","listKind":"` + kind + `List"},
"versions":[{"name":"` + TemplateVersion + `","served":true,"storage":true,
"subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}},
"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"replicas":{"type":"integer"}}},
"status":{"type":"object","properties":{"replicas":{"type":"integer"}}}}}}}]}}`
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// testCRDs are CRDs whose schemas exercise the structural schema
// conversion of apiextensions-apiserver's OpenAPI builder: every kind of
// property, int-or-string, embedded resources, preserve-unknown-fields,
// list and map types, CEL rules, defaults, nullable, several versions (one
// deprecated, one not served), selectable fields, cluster scope, no
// subresources.
var testCRDs = map[string]string{
	"crontabs": `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"crontabs.stable.example.com"},
"spec":{"group":"stable.example.com","scope":"Namespaced",
"names":{"plural":"crontabs","singular":"crontab","kind":"CronTab","shortNames":["ct"],"categories":["all"]},
"versions":[
{"name":"v1","served":true,"storage":true,
 "subresources":{"status":{}},
 "selectableFields":[{"jsonPath":".spec.color"}],
 "additionalPrinterColumns":[{"name":"Spec","type":"string","jsonPath":".spec.cronSpec"}],
 "schema":{"openAPIV3Schema":{"type":"object","description":"CronTab runs things.",
  "required":["spec"],
  "properties":{
   "spec":{"type":"object","description":"The desired state.","required":["cronSpec"],
    "x-kubernetes-validations":[{"rule":"self.replicas <= 10","message":"too many"}],
    "properties":{
     "cronSpec":{"type":"string","pattern":"^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$","minLength":1,"maxLength":64},
     "image":{"type":"string","default":"busybox"},
     "replicas":{"type":"integer","format":"int32","minimum":1,"maximum":10,"default":1},
     "ratio":{"type":"number","exclusiveMinimum":true,"minimum":0},
     "color":{"type":"string","enum":["red","green","blue"]},
     "port":{"x-kubernetes-int-or-string":true},
     "nullableNote":{"type":"string","nullable":true},
     "enabled":{"type":"boolean"},
     "tags":{"type":"array","items":{"type":"string"},"x-kubernetes-list-type":"set","maxItems":5,"uniqueItems":false},
     "ports":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
      "items":{"type":"object","required":["name"],"properties":{"name":{"type":"string"},"number":{"type":"integer","format":"int64"}}}},
     "labels":{"type":"object","additionalProperties":{"type":"string"},"x-kubernetes-map-type":"granular","maxProperties":20},
     "template":{"type":"object","x-kubernetes-embedded-resource":true,"x-kubernetes-preserve-unknown-fields":true},
     "extra":{"type":"object","x-kubernetes-preserve-unknown-fields":true,"properties":{"known":{"type":"string"}}},
     "choice":{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"oneOf":[{"required":["a"]},{"required":["b"]}]},
     "created":{"type":"string","format":"date-time"}
    }},
   "status":{"type":"object","properties":{"phase":{"type":"string"},"conditions":{"type":"array","items":{"type":"object",
    "properties":{"type":{"type":"string"},"status":{"type":"string"},"lastTransitionTime":{"type":"string","format":"date-time"}}}}}}
  }}}},
{"name":"v1beta1","served":true,"storage":false,"deprecated":true,
 "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}},
{"name":"v1alpha1","served":false,"storage":false,
 "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}
]}}`,
	"widgets": `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.example.com"},
"spec":{"group":"example.com","scope":"Cluster",
"names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
"versions":[{"name":"v1","served":true,"storage":true,
 "schema":{"openAPIV3Schema":{"type":"object","properties":{
  "spec":{"type":"object","properties":{"size":{"type":"string","description":"How big."},
   "items":{"type":"array","items":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}},
  "data":{"type":"object","additionalProperties":true}}}}}]}}`,
	"gadgets": `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"gadgets.example.com"},
"spec":{"group":"example.com","scope":"Namespaced",
"names":{"plural":"gadgets","singular":"gadget","kind":"Gadget"},
"versions":[{"name":"v1","served":true,"storage":true,
 "subresources":{"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.selector"}},
 "schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`,
}
