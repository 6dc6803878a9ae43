package codec

import (
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// storagePrinters are the printers of the storage.k8s.io group.
// CSIStorageCapacities have none: kube-apiserver's registry gives them the
// default table (Name, Created At).
func storagePrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("storage.k8s.io", "storageclasses", typedCells(storageClassCells), c.name,
			metav1.TableColumnDefinition{Name: "Provisioner", Type: "string", Description: storagev1.StorageClass{}.SwaggerDoc()["provisioner"]},
			metav1.TableColumnDefinition{Name: "ReclaimPolicy", Type: "string", Description: storagev1.StorageClass{}.SwaggerDoc()["reclaimPolicy"]},
			metav1.TableColumnDefinition{Name: "VolumeBindingMode", Type: "string", Description: storagev1.StorageClass{}.SwaggerDoc()["volumeBindingMode"]},
			metav1.TableColumnDefinition{Name: "AllowVolumeExpansion", Type: "string", Description: storagev1.StorageClass{}.SwaggerDoc()["allowVolumeExpansion"]},
			c.age,
		),
		def("storage.k8s.io", "volumeattributesclasses", typedCells(func(o *storagev1.VolumeAttributesClass, now time.Time) []any {
			return []any{o.Name, o.DriverName, translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "DriverName", Type: "string", Description: storagev1.VolumeAttributesClass{}.SwaggerDoc()["driverName"]},
			c.age,
		),
		def("storage.k8s.io", "volumeattachments", typedCells(func(o *storagev1.VolumeAttachment, now time.Time) []any {
			return []any{o.Name, o.Spec.Attacher, deref(o.Spec.Source.PersistentVolumeName, ""), o.Spec.NodeName, o.Status.Attached,
				translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Attacher", Type: "string", Format: "name", Description: storagev1.VolumeAttachmentSpec{}.SwaggerDoc()["attacher"]},
			metav1.TableColumnDefinition{Name: "PV", Type: "string", Description: storagev1.VolumeAttachmentSource{}.SwaggerDoc()["persistentVolumeName"]},
			metav1.TableColumnDefinition{Name: "Node", Type: "string", Description: storagev1.VolumeAttachmentSpec{}.SwaggerDoc()["nodeName"]},
			metav1.TableColumnDefinition{Name: "Attached", Type: "boolean", Description: storagev1.VolumeAttachmentStatus{}.SwaggerDoc()["attached"]},
			c.age,
		),
		def("storage.k8s.io", "csinodes", typedCells(func(o *storagev1.CSINode, now time.Time) []any {
			return []any{o.Name, int64(len(o.Spec.Drivers)), translateTimestampSince(o.CreationTimestamp, now)}
		}), c.name,
			metav1.TableColumnDefinition{Name: "Drivers", Type: "integer", Description: "Drivers indicates the number of CSI drivers registered on the node"},
			c.age,
		),
		def("storage.k8s.io", "csidrivers", typedCells(csiDriverCells), c.name,
			metav1.TableColumnDefinition{Name: "AttachRequired", Type: "boolean", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["attachRequired"]},
			metav1.TableColumnDefinition{Name: "PodInfoOnMount", Type: "boolean", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["podInfoOnMount"]},
			metav1.TableColumnDefinition{Name: "StorageCapacity", Type: "boolean", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["storageCapacity"]},
			metav1.TableColumnDefinition{Name: "TokenRequests", Type: "string", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["tokenRequests"]},
			metav1.TableColumnDefinition{Name: "RequiresRepublish", Type: "boolean", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["requiresRepublish"]},
			metav1.TableColumnDefinition{Name: "Modes", Type: "string", Description: storagev1.CSIDriverSpec{}.SwaggerDoc()["volumeLifecycleModes"]},
			c.age,
		),
	}
}

// storageClassCells is printStorageClass without the "(default)" marker,
// which kube-apiserver's printer is never given (printStorageClass passes
// no effective default).
func storageClassCells(o *storagev1.StorageClass, now time.Time) []any {
	reclaim := "Delete"
	if o.ReclaimPolicy != nil {
		reclaim = string(*o.ReclaimPolicy)
	}
	binding := "Immediate"
	if o.VolumeBindingMode != nil {
		binding = string(*o.VolumeBindingMode)
	}
	return []any{o.Name, o.Provisioner, reclaim, binding, deref(o.AllowVolumeExpansion, false), translateTimestampSince(o.CreationTimestamp, now)}
}

func csiDriverCells(o *storagev1.CSIDriver, now time.Time) []any {
	var modes []string
	for _, m := range o.Spec.VolumeLifecycleModes {
		modes = append(modes, string(m))
	}
	mode := strings.Join(modes, ",")
	if mode == "" {
		mode = "<none>"
	}
	tokens := "<unset>"
	if o.Spec.TokenRequests != nil {
		var aud []string
		for _, t := range o.Spec.TokenRequests {
			aud = append(aud, t.Audience)
		}
		tokens = strings.Join(aud, ",")
	}
	return []any{o.Name, deref(o.Spec.AttachRequired, true), deref(o.Spec.PodInfoOnMount, false), deref(o.Spec.StorageCapacity, false),
		tokens, deref(o.Spec.RequiresRepublish, false), mode, translateTimestampSince(o.CreationTimestamp, now)}
}
