package resource

import (
	"fmt"
	"slices"
)

// fieldStyle is how kube-apiserver checks a field selector label of a kind.
type fieldStyle uint8

const (
	// fieldsDefault: no conversion function is registered for the kind, so
	// apimachinery's DefaultMetaV1FieldSelectorConversion accepts only
	// metadata.name and metadata.namespace.
	fieldsDefault fieldStyle = iota
	// fieldsListed: a conversion function accepts metadata.name,
	// metadata.namespace (unless noNamespaceField) and FieldSelectors, and
	// refuses others with "field label not supported: X". Custom resources
	// (metadata.namespace only when namespaced, plus the CRD's
	// selectableFields) use the same message.
	fieldsListed
	// fieldsBatchJob: pkg/apis/batch/v1 refuses with
	// "field label \"X\" not supported for batchv1.Job".
	fieldsBatchJob
	// fieldsResourceSlice: pkg/apis/resource/v1 refuses with
	// "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: X".
	fieldsResourceSlice
)

// ConvertFieldLabel checks a field selector label the way kube-apiserver's
// list and watch handlers do before they read anything, and returns the label
// to match against (pods accept the legacy "spec.host" for "spec.nodeName").
// The error's text is kube-apiserver's message for the 400 BadRequest
// Status, e.g. `field label not supported: spec.foo` or
// `"spec.foo" is not a known field selector: only "metadata.name", "metadata.namespace"`.
func (r *Resource) ConvertFieldLabel(label string) (string, error) {
	if label == "metadata.name" {
		return label, nil
	}
	if label == "metadata.namespace" && !r.noNamespaceField {
		return label, nil
	}
	if r.fieldAliases != nil {
		if l, ok := r.fieldAliases[label]; ok {
			return l, nil
		}
		return "", fmt.Errorf("field label not supported: %s", label)
	}
	if r.fieldStyle == fieldsDefault {
		return "", fmt.Errorf("%q is not a known field selector: only %q, %q", label, "metadata.name", "metadata.namespace")
	}
	if slices.Contains(r.FieldSelectors, label) {
		return label, nil
	}
	if label == "spec.host" && r.Group == "" && r.Kind == "Pod" {
		return "spec.nodeName", nil
	}
	switch r.fieldStyle {
	case fieldsBatchJob:
		return "", fmt.Errorf("field label %q not supported for batchv1.Job", label)
	case fieldsResourceSlice:
		return "", fmt.Errorf("field label not supported for %s/%s, Kind=%s: %s", r.Group, r.Version, r.Kind, label)
	}
	return "", fmt.Errorf("field label not supported: %s", label)
}
