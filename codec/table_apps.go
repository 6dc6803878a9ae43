package codec

import (
	"fmt"
	"time"

	gojson "github.com/goccy/go-json"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// appsPrinters are the printers of the apps group.
func appsPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("apps", "deployments", deploymentCells, c.name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
			metav1.TableColumnDefinition{Name: "Up-to-date", Type: "string", Description: appsv1.DeploymentStatus{}.SwaggerDoc()["updatedReplicas"]},
			metav1.TableColumnDefinition{Name: "Available", Type: "string", Description: appsv1.DeploymentStatus{}.SwaggerDoc()["availableReplicas"]},
			c.age,
			metav1.TableColumnDefinition{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
			metav1.TableColumnDefinition{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DeploymentSpec{}.SwaggerDoc()["selector"]},
		),
		def("apps", "replicasets", replicaSetCells, c.name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: appsv1.ReplicaSetSpec{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: appsv1.ReplicaSetStatus{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: appsv1.ReplicaSetStatus{}.SwaggerDoc()["readyReplicas"]},
			c.age, c.containers, c.images,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.ReplicaSetSpec{}.SwaggerDoc()["selector"]},
		),
		def("apps", "daemonsets", daemonSetCells, c.name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["desiredNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["currentNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["numberReady"]},
			metav1.TableColumnDefinition{Name: "Up-to-date", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["updatedNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Available", Type: "integer", Description: appsv1.DaemonSetStatus{}.SwaggerDoc()["numberAvailable"]},
			metav1.TableColumnDefinition{Name: "Node Selector", Type: "string", Description: corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]},
			c.age, c.containers, c.images,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: appsv1.DaemonSetSpec{}.SwaggerDoc()["selector"]},
		),
		def("apps", "statefulsets", statefulSetCells, c.name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
			c.age, c.containers, c.images,
		),
	}
}

func deploymentCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var d struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32                `json:"replicas"`
			Selector *metav1.LabelSelector `json:"selector"`
			Template struct {
				Spec struct {
					Containers []containerNameImage `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
		Status appsv1.DeploymentStatus `json:"status"`
	}
	if err := gojson.Unmarshal(js, &d); err != nil {
		return nil, nil, err
	}
	desired := int32(1) // kube-apiserver defaults spec.replicas to 1
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	selector := "<invalid>"
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		selector = sel.String()
	}
	names, images := layoutContainerCells(d.Spec.Template.Spec.Containers)
	return []any{
		d.Metadata.Name,
		fmt.Sprintf("%d/%d", int64(d.Status.ReadyReplicas), int64(desired)),
		int64(d.Status.UpdatedReplicas),
		int64(d.Status.AvailableReplicas),
		translateTimestampSince(d.Metadata.CreationTimestamp, now),
		names, images, selector,
	}, nil, nil
}

func replicaSetCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32                `json:"replicas"`
			Selector *metav1.LabelSelector `json:"selector"`
			Template podTemplate           `json:"template"`
		} `json:"spec"`
		Status appsv1.ReplicaSetStatus `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	names, images := layoutContainerCells(o.Spec.Template.Spec.Containers)
	return []any{o.Metadata.Name, replicasOr1(o.Spec.Replicas), int64(o.Status.Replicas), int64(o.Status.ReadyReplicas),
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images, metav1.FormatLabelSelector(o.Spec.Selector)}, nil, nil
}

func daemonSetCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Selector *metav1.LabelSelector `json:"selector"`
			Template podTemplate           `json:"template"`
		} `json:"spec"`
		Status appsv1.DaemonSetStatus `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	names, images := layoutContainerCells(o.Spec.Template.Spec.Containers)
	st := o.Status
	return []any{o.Metadata.Name, int64(st.DesiredNumberScheduled), int64(st.CurrentNumberScheduled), int64(st.NumberReady),
		int64(st.UpdatedNumberScheduled), int64(st.NumberAvailable), labels.FormatLabels(o.Spec.Template.Spec.NodeSelector),
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images, metav1.FormatLabelSelector(o.Spec.Selector)}, nil, nil
}

func statefulSetCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32      `json:"replicas"`
			Template podTemplate `json:"template"`
		} `json:"spec"`
		Status appsv1.StatefulSetStatus `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	names, images := layoutContainerCells(o.Spec.Template.Spec.Containers)
	return []any{o.Metadata.Name, fmt.Sprintf("%d/%d", int64(o.Status.ReadyReplicas), replicasOr1(o.Spec.Replicas)),
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images}, nil, nil
}
