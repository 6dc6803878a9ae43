package codec

import (
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const betaStorageClassAnnotation = "volume.beta.kubernetes.io/storage-class"

// accessModesString is GetAccessModesAsString: RWO, ROX, RWX, RWOP in that
// order, each once.
func accessModesString(modes []string) string {
	has := func(m corev1.PersistentVolumeAccessMode) bool {
		for _, x := range modes {
			if x == string(m) {
				return true
			}
		}
		return false
	}
	var out []string
	for _, m := range []struct {
		mode  corev1.PersistentVolumeAccessMode
		short string
	}{{corev1.ReadWriteOnce, "RWO"}, {corev1.ReadOnlyMany, "ROX"}, {corev1.ReadWriteMany, "RWX"}, {corev1.ReadWriteOncePod, "RWOP"}} {
		if has(m.mode) {
			out = append(out, m.short)
		}
	}
	return strings.Join(out, ",")
}

type pvMeta struct {
	objMeta
	Annotations map[string]string `json:"annotations"`
}

// storageClassOf is GetPersistentVolume(Claim)Class: the beta annotation,
// else spec.storageClassName.
func storageClassOf(m pvMeta, className *string) string {
	if c, ok := m.Annotations[betaStorageClassAnnotation]; ok {
		return c
	}
	if className != nil {
		return *className
	}
	return ""
}

func orUnset(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}

func persistentVolumeCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata pvMeta `json:"metadata"`
		Spec     struct {
			Capacity                      map[string]resource.Quantity `json:"capacity"`
			AccessModes                   []string                     `json:"accessModes"`
			PersistentVolumeReclaimPolicy string                       `json:"persistentVolumeReclaimPolicy"`
			ClaimRef                      *struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"claimRef"`
			StorageClassName          *string `json:"storageClassName"`
			VolumeAttributesClassName *string `json:"volumeAttributesClassName"`
			VolumeMode                *string `json:"volumeMode"`
		} `json:"spec"`
		Status struct {
			Phase  string `json:"phase"`
			Reason string `json:"reason"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	claim := ""
	if o.Spec.ClaimRef != nil {
		claim = o.Spec.ClaimRef.Namespace + "/" + o.Spec.ClaimRef.Name
	}
	size := o.Spec.Capacity[string(corev1.ResourceStorage)]
	phase := o.Status.Phase
	if o.Metadata.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	return []any{o.Metadata.Name, size.String(), accessModesString(o.Spec.AccessModes), o.Spec.PersistentVolumeReclaimPolicy,
		phase, claim, storageClassOf(o.Metadata, o.Spec.StorageClassName), orUnset(o.Spec.VolumeAttributesClassName),
		o.Status.Reason, translateTimestampSince(o.Metadata.CreationTimestamp, now), orUnset(o.Spec.VolumeMode)}, nil, nil
}

func persistentVolumeClaimCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata pvMeta `json:"metadata"`
		Spec     struct {
			VolumeName                string  `json:"volumeName"`
			StorageClassName          *string `json:"storageClassName"`
			VolumeAttributesClassName *string `json:"volumeAttributesClassName"`
			VolumeMode                *string `json:"volumeMode"`
		} `json:"spec"`
		Status struct {
			Phase       string                       `json:"phase"`
			AccessModes []string                     `json:"accessModes"`
			Capacity    map[string]resource.Quantity `json:"capacity"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	phase := o.Status.Phase
	if o.Metadata.DeletionTimestamp != nil {
		phase = "Terminating"
	}
	capacity, modes := "", ""
	if o.Spec.VolumeName != "" {
		modes = accessModesString(o.Status.AccessModes)
		q := o.Status.Capacity[string(corev1.ResourceStorage)]
		capacity = q.String()
	}
	return []any{o.Metadata.Name, phase, o.Spec.VolumeName, capacity, modes, storageClassOf(o.Metadata, o.Spec.StorageClassName),
		orUnset(o.Spec.VolumeAttributesClassName), translateTimestampSince(o.Metadata.CreationTimestamp, now), orUnset(o.Spec.VolumeMode)}, nil, nil
}
