package demo

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// crd writes the CronTab CustomResourceDefinition as kube-apiserver stores
// it: JSON, apiextensions.k8s.io/v1beta1, with the schema and printer
// columns hoisted to spec.validation and spec.additionalPrinterColumns (the
// v1 -> v1beta1 conversion does that when every version shares them).
func (b *builder) crd() {
	age := 14 * day
	created := b.ago(age).UTC().Format(time.RFC3339)
	names := map[string]any{
		"plural":     CRDPlural,
		"singular":   "crontab",
		"shortNames": []any{"ct"},
		"kind":       CRDKind,
		"listKind":   CRDKind + "List",
		"categories": []any{"all"},
	}
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"spec": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"cronSpec": map[string]any{"type": "string"},
					"image":    map[string]any{"type": "string"},
					"replicas": map[string]any{"type": "integer"},
				},
			},
			"status": map[string]any{
				"type":       "object",
				"properties": map[string]any{"lastScheduleTime": map[string]any{"type": "string", "format": "date-time"}},
			},
		},
	}
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1beta1",
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name":              CRDName,
			"uid":               string(uid(storagefmt.Key(b.prefix, "apiextensions.k8s.io/customresourcedefinitions", "", CRDName))),
			"generation":        int64(1),
			"creationTimestamp": created,
		},
		"spec": map[string]any{
			"group":   CRDGroup,
			"version": CRDVersion,
			"names":   names,
			"scope":   "Namespaced",
			"validation": map[string]any{
				"openAPIV3Schema": schema,
			},
			"subresources": map[string]any{"status": map[string]any{}},
			"versions": []any{
				map[string]any{"name": CRDVersion, "served": true, "storage": true},
			},
			"additionalPrinterColumns": []any{
				map[string]any{"name": "Spec", "type": "string", "JSONPath": ".spec.cronSpec"},
				map[string]any{"name": "Replicas", "type": "integer", "JSONPath": ".spec.replicas"},
				map[string]any{"name": "Age", "type": "date", "JSONPath": ".metadata.creationTimestamp"},
			},
			"conversion":            map[string]any{"strategy": "None"},
			"preserveUnknownFields": false,
		},
		"status": map[string]any{
			"conditions": []any{
				map[string]any{"type": "NamesAccepted", "status": "True", "lastTransitionTime": created, "reason": "NoConflicts", "message": "no conflicts found"},
				map[string]any{"type": "Established", "status": "True", "lastTransitionTime": created, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
			},
			"acceptedNames":  names,
			"storedVersions": []any{CRDVersion},
		},
	}}
	b.add("customresourcedefinitions", "apiextensions.k8s.io/customresourcedefinitions", o, o)
}

func (b *builder) customResources() {
	specs := []string{"*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 * * 0"}
	for i := range CRDCount {
		name := fmt.Sprintf("backup-%02d", i)
		age := time.Duration(i+1) * time.Hour
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": CRDGroup + "/" + CRDVersion,
			"kind":       CRDKind,
			"metadata": map[string]any{
				"name":              name,
				"namespace":         AppNamespace,
				"uid":               string(uid(storagefmt.Key(b.prefix, CRDGroup+"/"+CRDPlural, AppNamespace, name))),
				"generation":        int64(1),
				"creationTimestamp": b.ago(age).UTC().Format(time.RFC3339),
				"labels":            map[string]any{"app": "backup", "tier": []string{"gold", "silver"}[i%2]},
			},
			"spec": map[string]any{
				"cronSpec": specs[i%len(specs)],
				"image":    "registry.example.com/backup:1.4." + fmt.Sprint(i%3),
				"replicas": int64(i%3 + 1),
			},
			"status": map[string]any{"lastScheduleTime": b.ago(5 * time.Minute).UTC().Format(time.RFC3339)},
		}}
		b.add(CRDPlural, CRDGroup+"/"+CRDPlural, o, o)
	}
}
