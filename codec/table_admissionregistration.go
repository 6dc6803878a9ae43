package codec

import (
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// admissionregistrationPrinters are the printers of the
// admissionregistration.k8s.io group.
func admissionregistrationPrinters(c stdColumns) []printerDef {
	webhooks := metav1.TableColumnDefinition{Name: "Webhooks", Type: "integer", Description: "Webhooks indicates the number of webhooks registered in this configuration"}
	paramKind := metav1.TableColumnDefinition{Name: "ParamKind", Type: "string", Description: "ParamKind specifies the kind of resources used to parameterize this policy"}
	policyName := metav1.TableColumnDefinition{Name: "PolicyName", Type: "string", Description: "PolicyName indicates the policy definition which the policy binding binded to"}
	paramRef := metav1.TableColumnDefinition{Name: "ParamRef", Type: "string", Description: "ParamRef indicates the param resource which sets the configuration param"}
	return []printerDef{
		def("admissionregistration.k8s.io", "mutatingwebhookconfigurations", typedCells(func(o *admissionv1.MutatingWebhookConfiguration, now time.Time) []any {
			return []any{o.Name, int64(len(o.Webhooks)), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, webhooks, c.age),
		def("admissionregistration.k8s.io", "validatingwebhookconfigurations", typedCells(func(o *admissionv1.ValidatingWebhookConfiguration, now time.Time) []any {
			return []any{o.Name, int64(len(o.Webhooks)), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, webhooks, c.age),
		def("admissionregistration.k8s.io", "validatingadmissionpolicies", typedCells(func(o *admissionv1.ValidatingAdmissionPolicy, now time.Time) []any {
			return []any{o.Name, int64(len(o.Spec.Validations)), formatParamKind(o.Spec.ParamKind), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Validations", Type: "integer", Description: "Validations indicates the number of validation rules defined in this configuration"},
			paramKind, c.age),
		def("admissionregistration.k8s.io", "validatingadmissionpolicybindings", typedCells(func(o *admissionv1.ValidatingAdmissionPolicyBinding, now time.Time) []any {
			return []any{o.Name, o.Spec.PolicyName, formatParamRef(o.Spec.ParamRef), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, policyName, paramRef, c.age),
		def("admissionregistration.k8s.io", "mutatingadmissionpolicies", typedCells(func(o *admissionv1.MutatingAdmissionPolicy, now time.Time) []any {
			return []any{o.Name, int64(len(o.Spec.Mutations)), formatParamKind(o.Spec.ParamKind), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Mutations", Type: "integer", Description: "Mutation indicates the number of mutations rules defined in this configuration"},
			paramKind, c.age),
		def("admissionregistration.k8s.io", "mutatingadmissionpolicybindings", typedCells(func(o *admissionv1.MutatingAdmissionPolicyBinding, now time.Time) []any {
			return []any{o.Name, o.Spec.PolicyName, formatParamRef(o.Spec.ParamRef), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, policyName, paramRef, c.age),
	}
}

func formatParamKind(pk *admissionv1.ParamKind) string {
	if pk == nil {
		return "<unset>"
	}
	return pk.APIVersion + "/" + pk.Kind
}

func formatParamRef(pr *admissionv1.ParamRef) string {
	switch {
	case pr == nil:
		return "<unset>"
	case pr.Name != "" && pr.Namespace != "":
		return pr.Namespace + "/" + pr.Name
	case pr.Name != "":
		return "*/" + pr.Name
	case pr.Selector != nil:
		// kube-apiserver prints the selector's generated String().
		return pr.Selector.String()
	}
	return "<unset>"
}
