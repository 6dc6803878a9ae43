package codec

import (
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	certificatesv1beta1 "k8s.io/api/certificates/v1beta1"
	nodev1 "k8s.io/api/node/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
)

// nodePrinters are the printers of the node.k8s.io group.
func nodePrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("node.k8s.io", "runtimeclasses", typedCells(func(o *nodev1.RuntimeClass, now time.Time) []any {
			return []any{o.Name, o.Handler, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			// kube-apiserver's description is ObjectMeta's "handler", which is empty.
			metav1.TableColumnDefinition{Name: "Handler", Type: "string", Description: c.metaDoc["handler"]},
			c.age),
	}
}

// schedulingPrinters are the printers of the scheduling.k8s.io group.
func schedulingPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("scheduling.k8s.io", "priorityclasses", typedCells(func(o *schedulingv1.PriorityClass, now time.Time) []any {
			pp := ""
			if o.PreemptionPolicy != nil {
				pp = string(*o.PreemptionPolicy)
			}
			return []any{o.Name, int64(o.Value), o.GlobalDefault, translateTimestampSince(o.CreationTimestamp, now), pp}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Value", Type: "integer", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["value"]},
			metav1.TableColumnDefinition{Name: "Global-Default", Type: "boolean", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["globalDefault"]},
			c.age,
			metav1.TableColumnDefinition{Name: "PreemptionPolicy", Type: "string", Description: schedulingv1.PriorityClass{}.SwaggerDoc()["preemptionPolicy"]},
		),
	}
}

// certificatesPrinters are the printers of the certificates.k8s.io group.
func certificatesPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("certificates.k8s.io", "certificatesigningrequests", typedCells(csrCells), c.name, c.age,
			metav1.TableColumnDefinition{Name: "SignerName", Type: "string", Description: certificatesv1beta1.CertificateSigningRequestSpec{}.SwaggerDoc()["signerName"]},
			metav1.TableColumnDefinition{Name: "Requestor", Type: "string", Description: certificatesv1beta1.CertificateSigningRequestSpec{}.SwaggerDoc()["request"]},
			metav1.TableColumnDefinition{Name: "RequestedDuration", Type: "string", Description: certificatesv1beta1.CertificateSigningRequestSpec{}.SwaggerDoc()["expirationSeconds"]},
			metav1.TableColumnDefinition{Name: "Condition", Type: "string", Description: certificatesv1beta1.CertificateSigningRequestStatus{}.SwaggerDoc()["conditions"]},
		),
		def("certificates.k8s.io", "clustertrustbundles", typedCells(func(o *certificatesv1.ClusterTrustBundle, now time.Time) []any {
			return []any{o.Name, orNone(o.Spec.SignerName)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "SignerName", Type: "string", Description: certificatesv1.ClusterTrustBundleSpec{}.SwaggerDoc()["signerName"]},
		),
		// printPodCertificateRequest, from the stored v1beta1 object (as
		// kube-apiserver prints the internal one); the columns are
		// described from certificates.k8s.io/v1 as in printers.go.
		def("certificates.k8s.io", "podcertificaterequests", typedCells(func(o *certificatesv1beta1.PodCertificateRequest, now time.Time) []any {
			state := "Pending"
			for _, c := range o.Status.Conditions {
				switch c.Type {
				case certificatesv1beta1.PodCertificateRequestConditionTypeIssued:
					state = "Issued"
				case certificatesv1beta1.PodCertificateRequestConditionTypeDenied:
					state = "Denied"
				case certificatesv1beta1.PodCertificateRequestConditionTypeFailed:
					state = "Failed"
				}
			}
			return []any{o.Name, o.Spec.PodName, o.Spec.ServiceAccountName, string(o.Spec.NodeName), o.Spec.SignerName, state,
				labels.FormatLabels(o.Spec.UnverifiedUserAnnotations)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "PodName", Type: "string", Description: certificatesv1.PodCertificateRequestSpec{}.SwaggerDoc()["podName"]},
			metav1.TableColumnDefinition{Name: "ServiceAccountName", Type: "string", Description: certificatesv1.PodCertificateRequestSpec{}.SwaggerDoc()["serviceAccountName"]},
			metav1.TableColumnDefinition{Name: "NodeName", Type: "string", Description: certificatesv1.PodCertificateRequestSpec{}.SwaggerDoc()["nodeName"]},
			metav1.TableColumnDefinition{Name: "SignerName", Type: "string", Description: certificatesv1.PodCertificateRequestSpec{}.SwaggerDoc()["signerName"]},
			metav1.TableColumnDefinition{Name: "State", Type: "string", Description: "Is the request Pending, Issued, Denied, or Failed?"},
			metav1.TableColumnDefinition{Name: "UnverifiedUserAnnotations", Type: "string", Description: certificatesv1.PodCertificateRequestSpec{}.SwaggerDoc()["unverifiedUserAnnotations"]},
		),
	}
}

// csrCells is printCertificateSigningRequest.
func csrCells(o *certificatesv1.CertificateSigningRequest, now time.Time) []any {
	var approved, denied, failed bool
	for _, c := range o.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	status := "Pending"
	if denied {
		status = "Denied"
	} else if approved {
		status = "Approved"
	}
	if failed {
		status += ",Failed"
	}
	if len(o.Status.Certificate) > 0 {
		status += ",Issued"
	}
	requested := "<none>"
	if o.Spec.ExpirationSeconds != nil {
		requested = duration.HumanDuration(time.Duration(*o.Spec.ExpirationSeconds) * time.Second)
	}
	return []any{o.Name, translateTimestampSince(o.CreationTimestamp, now), orNone(o.Spec.SignerName), o.Spec.Username, requested, status}
}

// resourcePrinters are the printers of the resource.k8s.io group.
func resourcePrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("resource.k8s.io", "deviceclasses", typedCells(func(o *resourcev1.DeviceClass, now time.Time) []any {
			return []any{o.Name, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, c.age),
		def("resource.k8s.io", "resourceclaimtemplates", typedCells(func(o *resourcev1.ResourceClaimTemplate, now time.Time) []any {
			return []any{o.Name, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name, c.age),
		def("resource.k8s.io", "resourceclaims", typedCells(func(o *resourcev1.ResourceClaim, now time.Time) []any {
			var states []string
			if o.DeletionTimestamp != nil {
				states = append(states, "deleted")
			}
			if o.Status.Allocation == nil {
				if o.DeletionTimestamp == nil {
					states = append(states, "pending")
				}
			} else {
				states = append(states, "allocated")
				if len(o.Status.ReservedFor) > 0 {
					states = append(states, "reserved")
				}
			}
			return []any{o.Name, strings.Join(states, ","), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "State", Type: "string", Description: "A summary of the current state (allocated, pending, reserved, etc.)."},
			c.age),
		def("resource.k8s.io", "resourceslices", typedCells(func(o *resourcev1.ResourceSlice, now time.Time) []any {
			return []any{o.Name, deref(o.Spec.NodeName, ""), o.Spec.Driver, o.Spec.Pool.Name, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Node", Type: "string", Description: resourcev1.ResourceSliceSpec{}.SwaggerDoc()["nodeName"]},
			metav1.TableColumnDefinition{Name: "Driver", Type: "string", Description: resourcev1.ResourceSliceSpec{}.SwaggerDoc()["driver"]},
			metav1.TableColumnDefinition{Name: "Pool", Type: "string", Description: resourcev1.ResourcePool{}.SwaggerDoc()["name"]},
			c.age),
		def("resource.k8s.io", "devicetaintrules", typedCells(func(o *resourcev1.DeviceTaintRule, now time.Time) []any {
			added := ""
			if o.Spec.Taint.TimeAdded != nil {
				added = translateTimestampSince(*o.Spec.Taint.TimeAdded, now)
			}
			return []any{o.Name, o.Spec.Taint.Key, o.Spec.Taint.Value, string(o.Spec.Taint.Effect), added, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Key", Type: "string", Description: resourcev1.DeviceTaint{}.SwaggerDoc()["key"]},
			metav1.TableColumnDefinition{Name: "Value", Type: "string", Description: resourcev1.DeviceTaint{}.SwaggerDoc()["value"]},
			metav1.TableColumnDefinition{Name: "Effect", Type: "string", Description: resourcev1.DeviceTaint{}.SwaggerDoc()["effect"]},
			metav1.TableColumnDefinition{Name: "TimeAdded", Type: "string", Description: resourcev1.DeviceTaint{}.SwaggerDoc()["timeAdded"]},
			c.age),
	}
}

// storagemigrationPrinters are the printers of the storagemigration.k8s.io
// group.
func storagemigrationPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("storagemigration.k8s.io", "storageversionmigrations", typedCells(func(o *storagemigrationv1beta1.StorageVersionMigration, now time.Time) []any {
			status := "Unknown"
			for _, cond := range o.Status.Conditions {
				if cond.Status != metav1.ConditionTrue {
					continue
				}
				switch cond.Type {
				case "Running", "Failed", "Succeeded":
					status = cond.Type
				}
			}
			return []any{o.Name, o.Spec.Resource.String(), status}
		}),
			metav1.TableColumnDefinition{Name: "Name", Type: "string", Description: c.metaDoc["name"]},
			metav1.TableColumnDefinition{Name: "Resource", Type: "string", Description: "GroupResource to migrate"},
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "Status of the migration"},
		),
	}
}
