package codec

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	gojson "github.com/goccy/go-json"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	batchv1beta1 "k8s.io/api/batch/v1beta1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1beta1 "k8s.io/api/discovery/v1beta1"
	extensionsv1beta1 "k8s.io/api/extensions/v1beta1"
	rbacv1beta1 "k8s.io/api/rbac/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/util/jsonpath"
)

// Tables (meta.k8s.io/v1 Table), as kube-apiserver returns them for
// Accept: application/json;as=Table;v=v1;g=meta.k8s.io. Column definitions
// and cells follow kube-apiserver's printers (pkg/printers/internalversion)
// with Wide output, as its TableConvertor uses them, for pods, configmaps,
// secrets, namespaces, nodes, services, serviceaccounts, events,
// endpoints, persistentvolumes, persistentvolumeclaims,
// replicationcontrollers, discovery endpointslices, apps
// deployments, replicasets, daemonsets and statefulsets, batch jobs and
// cronjobs, coordination leases, networking ingresses and networkpolicies,
// policy poddisruptionbudgets and rbac (cluster)rolebindings. Other built-in
// resources get kube-apiserver's default table convertor (Name, Created At);
// custom resources get the CRD table convertor (Name, then the CRD's
// additionalPrinterColumns via CustomColumns, or Age when it has none).
//
// Cells are computed from the object's JSON (Schema.AppendJSON) decoded into
// small structs: tables are for humans, so clarity wins over speed here.

// IncludeObjectPolicy says what a table row carries in its "object" field
// (the includeObject parameter of TableOptions). The zero value is
// IncludeMetadata, kube-apiserver's default.
type IncludeObjectPolicy uint8

const (
	// IncludeMetadata: the object's metadata as a PartialObjectMetadata.
	IncludeMetadata IncludeObjectPolicy = iota
	// IncludeNone: "object":null.
	IncludeNone
	// IncludeObject: the whole object.
	IncludeObject
)

// ParseIncludeObject parses the includeObject query parameter ("", "None",
// "Metadata", "Object"); ok is false for anything else.
func ParseIncludeObject(s string) (p IncludeObjectPolicy, ok bool) {
	switch s {
	case "", "Metadata":
		return IncludeMetadata, true
	case "None":
		return IncludeNone, true
	case "Object":
		return IncludeObject, true
	}
	return 0, false
}

// tableRowCondition is metav1.TableRowCondition.
type tableRowCondition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// tablePrinter prints the rows of one resource.
type tablePrinter struct {
	// columns is the JSON array of the column definitions.
	columns []byte
	// cells returns the cells of a row (string, int64, float64, bool or
	// nil) and its
	// conditions from the object's JSON.
	cells func(js []byte, now time.Time) ([]any, []tableRowCondition, error)
}

type tableKey struct{ group, resource string }

var (
	tablePrintersOnce sync.Once
	tablePrinters     map[tableKey]*tablePrinter
	defaultPrinter    *tablePrinter // built-in resources without a printer
	customPrinter     *tablePrinter // custom resources
)

func mustColumnsJSON(cols []metav1.TableColumnDefinition) []byte {
	b, err := json.Marshal(cols)
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot marshal column definitions: %v", err))
	}
	return b
}

// initTablePrinters builds the immutable printer table once.
func initTablePrinters() {
	metaDoc := metav1.ObjectMeta{}.SwaggerDoc()
	name := metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name", Description: metaDoc["name"]}
	age := metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: metaDoc["creationTimestamp"]}
	containersCol := metav1.TableColumnDefinition{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."}
	imagesCol := metav1.TableColumnDefinition{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."}
	p := func(cells func([]byte, time.Time) ([]any, []tableRowCondition, error), cols ...metav1.TableColumnDefinition) *tablePrinter {
		return &tablePrinter{columns: mustColumnsJSON(cols), cells: cells}
	}
	tablePrinters = map[tableKey]*tablePrinter{
		{"", "pods"}: p(podCells, name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
			metav1.TableColumnDefinition{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
			age,
			metav1.TableColumnDefinition{Name: "IP", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["podIP"]},
			metav1.TableColumnDefinition{Name: "Node", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["nodeName"]},
			metav1.TableColumnDefinition{Name: "Nominated Node", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"]},
			metav1.TableColumnDefinition{Name: "Readiness Gates", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["readinessGates"]},
		),
		{"", "configmaps"}: p(configMapCells, name,
			metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: corev1.ConfigMap{}.SwaggerDoc()["data"]},
			age,
		),
		{"", "secrets"}: p(secretCells, name,
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["data"]},
			age,
		),
		{"", "namespaces"}: p(namespaceCells, name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the namespace"},
			age,
		),
		{"", "nodes"}: p(nodeCells, name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the node"},
			metav1.TableColumnDefinition{Name: "Roles", Type: "string", Description: "The roles of the node"},
			age,
			metav1.TableColumnDefinition{Name: "Version", Type: "string", Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]},
			metav1.TableColumnDefinition{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
			metav1.TableColumnDefinition{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
			metav1.TableColumnDefinition{Name: "OS-Image", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"]},
			metav1.TableColumnDefinition{Name: "Kernel-Version", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]},
			metav1.TableColumnDefinition{Name: "Container-Runtime", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]},
		),
		{"", "services"}: p(serviceCells, name,
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Cluster-IP", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]},
			metav1.TableColumnDefinition{Name: "External-IP", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]},
			metav1.TableColumnDefinition{Name: "Port(s)", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["ports"]},
			age,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: corev1.ServiceSpec{}.SwaggerDoc()["selector"]},
		),
		{"apps", "deployments"}: p(deploymentCells, name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
			metav1.TableColumnDefinition{Name: "Up-to-date", Type: "string", Description: extensionsv1beta1.DeploymentStatus{}.SwaggerDoc()["updatedReplicas"]},
			metav1.TableColumnDefinition{Name: "Available", Type: "string", Description: extensionsv1beta1.DeploymentStatus{}.SwaggerDoc()["availableReplicas"]},
			age,
			metav1.TableColumnDefinition{Name: "Containers", Type: "string", Priority: 1, Description: "Names of each container in the template."},
			metav1.TableColumnDefinition{Name: "Images", Type: "string", Priority: 1, Description: "Images referenced by each container in the template."},
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: extensionsv1beta1.DeploymentSpec{}.SwaggerDoc()["selector"]},
		),
		{"apps", "replicasets"}: p(replicaSetCells, name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: extensionsv1beta1.ReplicaSetSpec{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: extensionsv1beta1.ReplicaSetStatus{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: extensionsv1beta1.ReplicaSetStatus{}.SwaggerDoc()["readyReplicas"]},
			age, containersCol, imagesCol,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: extensionsv1beta1.ReplicaSetSpec{}.SwaggerDoc()["selector"]},
		),
		{"apps", "daemonsets"}: p(daemonSetCells, name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: extensionsv1beta1.DaemonSetStatus{}.SwaggerDoc()["desiredNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: extensionsv1beta1.DaemonSetStatus{}.SwaggerDoc()["currentNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: extensionsv1beta1.DaemonSetStatus{}.SwaggerDoc()["numberReady"]},
			metav1.TableColumnDefinition{Name: "Up-to-date", Type: "integer", Description: extensionsv1beta1.DaemonSetStatus{}.SwaggerDoc()["updatedNumberScheduled"]},
			metav1.TableColumnDefinition{Name: "Available", Type: "integer", Description: extensionsv1beta1.DaemonSetStatus{}.SwaggerDoc()["numberAvailable"]},
			metav1.TableColumnDefinition{Name: "Node Selector", Type: "string", Description: corev1.PodSpec{}.SwaggerDoc()["nodeSelector"]},
			age, containersCol, imagesCol,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: extensionsv1beta1.DaemonSetSpec{}.SwaggerDoc()["selector"]},
		),
		{"apps", "statefulsets"}: p(statefulSetCells, name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "Number of the pod with ready state"},
			age, containersCol, imagesCol,
		),
		{"batch", "jobs"}: p(jobCells, name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "Status of the job."},
			metav1.TableColumnDefinition{Name: "Completions", Type: "string", Description: batchv1.JobStatus{}.SwaggerDoc()["succeeded"]},
			metav1.TableColumnDefinition{Name: "Duration", Type: "string", Description: "Time required to complete the job."},
			age, containersCol, imagesCol,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: batchv1.JobSpec{}.SwaggerDoc()["selector"]},
		),
		{"batch", "cronjobs"}: p(cronJobCells, name,
			metav1.TableColumnDefinition{Name: "Schedule", Type: "string", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["schedule"]},
			metav1.TableColumnDefinition{Name: "Timezone", Type: "string", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["timeZone"]},
			metav1.TableColumnDefinition{Name: "Suspend", Type: "boolean", Description: batchv1beta1.CronJobSpec{}.SwaggerDoc()["suspend"]},
			metav1.TableColumnDefinition{Name: "Active", Type: "integer", Description: batchv1beta1.CronJobStatus{}.SwaggerDoc()["active"]},
			metav1.TableColumnDefinition{Name: "Last Schedule", Type: "string", Description: batchv1beta1.CronJobStatus{}.SwaggerDoc()["lastScheduleTime"]},
			age, containersCol, imagesCol,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: batchv1.JobSpec{}.SwaggerDoc()["selector"]},
		),
		{"", "serviceaccounts"}: p(serviceAccountCells, name,
			metav1.TableColumnDefinition{Name: "Secrets", Type: "string", Description: corev1.ServiceAccount{}.SwaggerDoc()["secrets"]},
			age,
		),
		{"coordination.k8s.io", "leases"}: p(leaseCells, name,
			metav1.TableColumnDefinition{Name: "Holder", Type: "string", Description: coordinationv1.LeaseSpec{}.SwaggerDoc()["holderIdentity"]},
			age,
		),
		{"networking.k8s.io", "ingresses"}: p(ingressCells, name,
			metav1.TableColumnDefinition{Name: "Class", Type: "string", Description: "The name of the IngressClass resource that should be used for additional configuration"},
			metav1.TableColumnDefinition{Name: "Hosts", Type: "string", Description: "Hosts that incoming requests are matched against before the ingress rule"},
			metav1.TableColumnDefinition{Name: "Address", Type: "string", Description: "Address is a list containing ingress points for the load-balancer"},
			metav1.TableColumnDefinition{Name: "Ports", Type: "string", Description: "Ports of TLS configurations that open"},
			age,
		),
		{"", "events"}: p(eventCells,
			metav1.TableColumnDefinition{Name: "Last Seen", Type: "string", Description: corev1.Event{}.SwaggerDoc()["lastTimestamp"]},
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.Event{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Reason", Type: "string", Description: corev1.Event{}.SwaggerDoc()["reason"]},
			metav1.TableColumnDefinition{Name: "Object", Type: "string", Description: corev1.Event{}.SwaggerDoc()["involvedObject"]},
			metav1.TableColumnDefinition{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.Event{}.InvolvedObject.SwaggerDoc()["fieldPath"]},
			metav1.TableColumnDefinition{Name: "Source", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["source"]},
			metav1.TableColumnDefinition{Name: "Message", Type: "string", Description: corev1.Event{}.SwaggerDoc()["message"]},
			metav1.TableColumnDefinition{Name: "First Seen", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["firstTimestamp"]},
			metav1.TableColumnDefinition{Name: "Count", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["count"]},
			metav1.TableColumnDefinition{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: metaDoc["name"]},
		),
		{"", "persistentvolumes"}: p(persistentVolumeCells, name,
			metav1.TableColumnDefinition{Name: "Capacity", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["capacity"]},
			metav1.TableColumnDefinition{Name: "Access Modes", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["accessModes"]},
			metav1.TableColumnDefinition{Name: "Reclaim Policy", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["persistentVolumeReclaimPolicy"]},
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]},
			metav1.TableColumnDefinition{Name: "Claim", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["claimRef"]},
			metav1.TableColumnDefinition{Name: "StorageClass", Type: "string", Description: "StorageClass of the pv"},
			metav1.TableColumnDefinition{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pv"},
			metav1.TableColumnDefinition{Name: "Reason", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]},
			age,
			metav1.TableColumnDefinition{Name: "VolumeMode", Type: "string", Priority: 1, Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["volumeMode"]},
		),
		{"", "persistentvolumeclaims"}: p(persistentVolumeClaimCells, name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["phase"]},
			metav1.TableColumnDefinition{Name: "Volume", Type: "string", Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]},
			metav1.TableColumnDefinition{Name: "Capacity", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["capacity"]},
			metav1.TableColumnDefinition{Name: "Access Modes", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["accessModes"]},
			metav1.TableColumnDefinition{Name: "StorageClass", Type: "string", Description: "StorageClass of the pvc"},
			metav1.TableColumnDefinition{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pvc"},
			age,
			metav1.TableColumnDefinition{Name: "VolumeMode", Type: "string", Priority: 1, Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"]},
		),
		{"", "replicationcontrollers"}: p(replicationControllerCells, name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]},
			age, containersCol, imagesCol,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"]},
		),
		{"policy", "poddisruptionbudgets"}: p(podDisruptionBudgetCells, name,
			metav1.TableColumnDefinition{Name: "Min Available", Type: "string", Description: "The minimum number of pods that must be available."},
			metav1.TableColumnDefinition{Name: "Max Unavailable", Type: "string", Description: "The maximum number of pods that may be unavailable."},
			metav1.TableColumnDefinition{Name: "Allowed Disruptions", Type: "integer", Description: "Calculated number of pods that may be disrupted at this time."},
			age,
		),
		{"networking.k8s.io", "networkpolicies"}: p(networkPolicyCells, name,
			metav1.TableColumnDefinition{Name: "Pod-Selector", Type: "string", Description: extensionsv1beta1.NetworkPolicySpec{}.SwaggerDoc()["podSelector"]},
			age,
		),
		{"rbac.authorization.k8s.io", "rolebindings"}: p(roleBindingCells, name,
			metav1.TableColumnDefinition{Name: "Role", Type: "string", Description: rbacv1beta1.RoleBinding{}.SwaggerDoc()["roleRef"]},
			age,
			metav1.TableColumnDefinition{Name: "Users", Type: "string", Priority: 1, Description: "Users in the roleBinding"},
			metav1.TableColumnDefinition{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the roleBinding"},
			metav1.TableColumnDefinition{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the roleBinding"},
		),
		{"rbac.authorization.k8s.io", "clusterrolebindings"}: p(roleBindingCells, name,
			metav1.TableColumnDefinition{Name: "Role", Type: "string", Description: rbacv1beta1.ClusterRoleBinding{}.SwaggerDoc()["roleRef"]},
			age,
			metav1.TableColumnDefinition{Name: "Users", Type: "string", Priority: 1, Description: "Users in the clusterRoleBinding"},
			metav1.TableColumnDefinition{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the clusterRoleBinding"},
			metav1.TableColumnDefinition{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the clusterRoleBinding"},
		),
		{"", "endpoints"}: p(endpointsCells, name,
			metav1.TableColumnDefinition{Name: "Endpoints", Type: "string", Description: corev1.Endpoints{}.SwaggerDoc()["subsets"]},
			age,
		),
		{"discovery.k8s.io", "endpointslices"}: p(endpointSliceCells, name,
			metav1.TableColumnDefinition{Name: "AddressType", Type: "string", Description: discoveryv1beta1.EndpointSlice{}.SwaggerDoc()["addressType"]},
			metav1.TableColumnDefinition{Name: "Ports", Type: "string", Description: discoveryv1beta1.EndpointSlice{}.SwaggerDoc()["ports"]},
			metav1.TableColumnDefinition{Name: "Endpoints", Type: "string", Description: discoveryv1beta1.EndpointSlice{}.SwaggerDoc()["endpoints"]},
			age,
		),
	}
	defaultPrinter = p(defaultCells, name,
		metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: metaDoc["creationTimestamp"]})
	cc, err := NewCustomColumns(nil)
	if err != nil {
		panic(fmt.Sprintf("BUG: default custom resource columns: %v", err))
	}
	customPrinter = &cc.p
}

// isBuiltinGroup reports whether group is served by kube-apiserver itself
// rather than by a CustomResourceDefinition.
func isBuiltinGroup(group string) bool {
	return group == "" || !strings.Contains(group, ".") || strings.HasSuffix(group, ".k8s.io")
}

func printerFor(group, resource string) *tablePrinter {
	tablePrintersOnce.Do(initTablePrinters)
	if p := tablePrinters[tableKey{group, resource}]; p != nil {
		return p
	}
	if isBuiltinGroup(group) {
		return defaultPrinter
	}
	return customPrinter
}

// AppendTableHead appends the start of a Table of resource.group up to the
// '[' of its rows: {"kind":"Table","apiVersion":"meta.k8s.io/v1",
// "metadata":{...},"columnDefinitions":[...],"rows":[
// Then come rows (AppendTableRow) separated by AppendTableSep, then
// AppendTableTail. For a single object pass its resourceVersion in m.
// Custom resources with additionalPrinterColumns use AppendCustomTableHead.
func (s *Schema) AppendTableHead(dst []byte, group, resource string, m ListMeta) []byte {
	return appendTableHead(dst, printerFor(group, resource), m)
}

func appendTableHead(dst []byte, p *tablePrinter, m ListMeta) []byte {
	dst = append(dst, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":`...)
	dst = appendListMetaJSON(dst, m)
	dst = append(dst, `,"columnDefinitions":`...)
	dst = append(dst, p.columns...)
	return append(dst, `,"rows":[`...)
}

// AppendTableWatchEvent appends a JSON watch frame whose object is a Table
// with obj's row, as kube-apiserver writes the events of a watch with
// Accept: application/json;as=Table;v=v1;g=meta.k8s.io (kubectl get -w):
// the first event of a watch carries the column definitions (headers true),
// later ones have "columnDefinitions":null. cc, when not nil, gives a custom
// resource's columns instead of group and resource. ERROR events are written
// with AppendJSONWatchStatus as for any watch. On error dst is returned
// unchanged.
func (s *Schema) AppendTableWatchEvent(dst []byte, t EventType, group, resource string, cc *CustomColumns, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time, headers bool) ([]byte, error) {
	p := printerFor(group, resource)
	if cc != nil {
		p = &cc.p
	}
	start := len(dst)
	dst = appendJSONWatchEventHead(dst, t)
	if headers {
		dst = appendTableHead(dst, p, ListMeta{ResourceVersion: rv})
	} else {
		dst = append(dst, `{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":`...)
		dst = appendListMetaJSON(dst, ListMeta{ResourceVersion: rv})
		dst = append(dst, `,"columnDefinitions":null,"rows":[`...)
	}
	dst, err := s.appendTableRow(dst, p, obj, rv, inc, now)
	if err != nil {
		return dst[:start], err
	}
	return append(dst, "]}}\n"...), nil
}

// AppendTableSep appends the separator written between two rows.
func AppendTableSep(dst []byte) []byte { return append(dst, ',') }

// AppendTableTail appends the end of a Table.
func AppendTableTail(dst []byte) []byte { return append(dst, "]}"...) }

var tableScratch = sync.Pool{New: func() any { return new([]byte) }}

// AppendTableRow appends one row {"cells":[...],"object":...} for obj with
// resourceVersion rv; now is the time Age cells are computed against. On
// error dst is returned unchanged.
func (s *Schema) AppendTableRow(dst []byte, group, resource string, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	return s.appendTableRow(dst, printerFor(group, resource), obj, rv, inc, now)
}

func (s *Schema) appendTableRow(dst []byte, p *tablePrinter, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	bp := tableScratch.Get().(*[]byte)
	defer tableScratch.Put(bp)
	js, err := s.AppendJSON((*bp)[:0], obj, rv, JSONOptions{})
	*bp = js[:0]
	if err != nil {
		return dst, err
	}
	cells, conds, err := p.cells(js, now)
	if err != nil {
		return dst, fmt.Errorf("cannot compute table cells of %s %s: %w", obj.APIVersion, obj.Kind, err)
	}
	start := len(dst)
	dst = append(dst, `{"cells":[`...)
	for i, c := range cells {
		if i > 0 {
			dst = append(dst, ',')
		}
		switch v := c.(type) {
		case nil:
			dst = append(dst, "null"...)
		case string:
			dst = appendJSONQuote(dst, v)
		case int64:
			dst = strconv.AppendInt(dst, v, 10)
		case float64:
			var ok bool
			if dst, ok = appendJSONFloat(dst, v, 64); !ok {
				dst = append(dst, "null"...)
			}
		case bool:
			dst = strconv.AppendBool(dst, v)
		default:
			panic(fmt.Sprintf("BUG: table cell of type %T", c))
		}
	}
	dst = append(dst, ']')
	if len(conds) > 0 {
		b, err := json.Marshal(conds)
		if err != nil {
			return dst[:start], fmt.Errorf("cannot write row conditions: %w", err)
		}
		dst = append(dst, `,"conditions":`...)
		dst = append(dst, b...)
	}
	dst = append(dst, `,"object":`...)
	switch inc {
	case IncludeNone:
		dst = append(dst, "null"...)
	case IncludeObject:
		dst = append(dst, js...)
	default:
		if dst, err = s.AppendPartialJSON(dst, obj, rv); err != nil {
			return dst[:start], err
		}
	}
	return append(dst, '}'), nil
}

// translateTimestampSince is the printers' Age: the time since t in
// human-readable approximation, "<unknown>" for a zero time.
func translateTimestampSince(t metav1.Time, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// objMeta is the part of ObjectMeta the printers read.
type objMeta struct {
	Name              string            `json:"name"`
	CreationTimestamp metav1.Time       `json:"creationTimestamp"`
	DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
	Labels            map[string]string `json:"labels"`
}

func defaultCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, o.Metadata.CreationTimestamp.Time.UTC().Format(time.RFC3339)}, nil, nil
}

func configMapCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata   objMeta                      `json:"metadata"`
		Data       map[string]gojson.RawMessage `json:"data"`
		BinaryData map[string]gojson.RawMessage `json:"binaryData"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, int64(len(o.Data) + len(o.BinaryData)), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func secretCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta                      `json:"metadata"`
		Type     string                       `json:"type"`
		Data     map[string]gojson.RawMessage `json:"data"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, o.Type, int64(len(o.Data)), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func namespaceCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Status   struct {
			Phase string `json:"phase"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, o.Status.Phase, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

// Pods.

type podContainerState struct {
	Waiting *struct {
		Reason string `json:"reason"`
	} `json:"waiting"`
	Running *struct{} `json:"running"`
	// Terminated carries what printPod reads of ContainerStateTerminated.
	Terminated *struct {
		ExitCode   int32       `json:"exitCode"`
		Signal     int32       `json:"signal"`
		Reason     string      `json:"reason"`
		FinishedAt metav1.Time `json:"finishedAt"`
	} `json:"terminated"`
}

type podContainerStatus struct {
	Name                 string            `json:"name"`
	Ready                bool              `json:"ready"`
	RestartCount         int32             `json:"restartCount"`
	Started              *bool             `json:"started"`
	State                podContainerState `json:"state"`
	LastTerminationState podContainerState `json:"lastState"`
}

type podCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

type podForTable struct {
	Metadata objMeta `json:"metadata"`
	Spec     struct {
		NodeName       string `json:"nodeName"`
		InitContainers []struct {
			Name          string  `json:"name"`
			RestartPolicy *string `json:"restartPolicy"`
		} `json:"initContainers"`
		Containers     []struct{} `json:"containers"`
		ReadinessGates []struct {
			ConditionType string `json:"conditionType"`
		} `json:"readinessGates"`
	} `json:"spec"`
	Status struct {
		Phase             string `json:"phase"`
		Reason            string `json:"reason"`
		NominatedNodeName string `json:"nominatedNodeName"`
		PodIPs            []struct {
			IP string `json:"ip"`
		} `json:"podIPs"`
		Conditions            []podCondition       `json:"conditions"`
		InitContainerStatuses []podContainerStatus `json:"initContainerStatuses"`
		ContainerStatuses     []podContainerStatus `json:"containerStatuses"`
	} `json:"status"`
}

var (
	podSucceededConditions = []tableRowCondition{{Type: string(metav1.RowCompleted), Status: string(metav1.ConditionTrue), Reason: string(corev1.PodSucceeded), Message: "The pod has completed successfully."}}
	podFailedConditions    = []tableRowCondition{{Type: string(metav1.RowCompleted), Status: string(metav1.ConditionTrue), Reason: string(corev1.PodFailed), Message: "The pod failed."}}
)

// podCells follows printPod of kube-apiserver's printers: READY counts ready
// containers (and started restartable init containers), STATUS is the
// phase refined by the pod reason, init container progress, container
// waiting/terminated reasons and deletion, RESTARTS adds the time since the
// last restart.
func podCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var pod podForTable
	if err := gojson.Unmarshal(js, &pod); err != nil {
		return nil, nil, err
	}
	restarts, restartableInitRestarts := 0, 0
	totalContainers := len(pod.Spec.Containers)
	readyContainers := 0
	var lastRestartDate, lastRestartableInitRestartDate metav1.Time

	phase := pod.Status.Phase
	reason := phase
	if pod.Status.Reason != "" {
		reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == string(corev1.PodScheduled) && c.Reason == corev1.PodReasonSchedulingGated {
			reason = corev1.PodReasonSchedulingGated
		}
	}

	var conds []tableRowCondition
	switch corev1.PodPhase(phase) {
	case corev1.PodSucceeded:
		conds = podSucceededConditions
	case corev1.PodFailed:
		conds = podFailedConditions
	}

	restartable := make(map[string]bool, len(pod.Spec.InitContainers))
	for _, c := range pod.Spec.InitContainers {
		r := c.RestartPolicy != nil && *c.RestartPolicy == string(corev1.ContainerRestartPolicyAlways)
		restartable[c.Name] = r
		if r {
			totalContainers++
		}
	}

	initializing := false
	for i, c := range pod.Status.InitContainerStatuses {
		restarts += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && lastRestartDate.Before(&t.FinishedAt) {
			lastRestartDate = t.FinishedAt
		}
		if restartable[c.Name] {
			restartableInitRestarts += int(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && lastRestartableInitRestartDate.Before(&t.FinishedAt) {
				lastRestartableInitRestartDate = t.FinishedAt
			}
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case restartable[c.Name] && c.Started != nil && *c.Started:
			if c.Ready {
				readyContainers++
			}
			continue
		case c.State.Terminated != nil:
			switch {
			case c.State.Terminated.Reason != "":
				reason = "Init:" + c.State.Terminated.Reason
			case c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
			default:
				reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
			}
			initializing = true
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
			initializing = true
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
			initializing = true
		}
		break
	}

	if !initializing || podConditionTrue(pod.Status.Conditions, string(corev1.PodInitialized)) {
		restarts = restartableInitRestarts
		lastRestartDate = lastRestartableInitRestartDate
		hasRunning := false
		for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
			c := pod.Status.ContainerStatuses[i]
			restarts += int(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && lastRestartDate.Before(&t.FinishedAt) {
				lastRestartDate = t.FinishedAt
			}
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				readyContainers++
			}
		}
		// A pod whose containers completed but one still runs is Running
		// (or NotReady without the Ready condition).
		if reason == "Completed" && hasRunning {
			if hasPodReadyCondition(pod.Status.Conditions) {
				reason = "Running"
			} else {
				reason = "NotReady"
			}
		}
	}

	terminal := phase == string(corev1.PodSucceeded) || phase == string(corev1.PodFailed)
	if pod.Metadata.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		reason = "Unknown"
	} else if pod.Metadata.DeletionTimestamp != nil && !terminal {
		reason = "Terminating"
	}

	restartsStr := strconv.Itoa(restarts)
	if restarts != 0 && !lastRestartDate.IsZero() {
		restartsStr = fmt.Sprintf("%d (%s ago)", restarts, translateTimestampSince(lastRestartDate, now))
	}

	podIP := ""
	if len(pod.Status.PodIPs) > 0 {
		podIP = pod.Status.PodIPs[0].IP
	}
	readinessGates := "<none>"
	if len(pod.Spec.ReadinessGates) > 0 {
		trueConditions := 0
		for _, g := range pod.Spec.ReadinessGates {
			for _, c := range pod.Status.Conditions {
				if c.Type == g.ConditionType {
					if c.Status == string(corev1.ConditionTrue) {
						trueConditions++
					}
					break
				}
			}
		}
		readinessGates = fmt.Sprintf("%d/%d", trueConditions, len(pod.Spec.ReadinessGates))
	}
	return []any{
		pod.Metadata.Name,
		fmt.Sprintf("%d/%d", readyContainers, totalContainers),
		reason,
		restartsStr,
		translateTimestampSince(pod.Metadata.CreationTimestamp, now),
		orNone(podIP), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), readinessGates,
	}, conds, nil
}

// podConditionTrue reports whether the first condition of type typ is True.
func podConditionTrue(conds []podCondition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == string(corev1.ConditionTrue)
		}
	}
	return false
}

// hasPodReadyCondition reports whether any Ready condition is True.
func hasPodReadyCondition(conds []podCondition) bool {
	for _, c := range conds {
		if c.Type == string(corev1.PodReady) && c.Status == string(corev1.ConditionTrue) {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}

// Deployments.

type containerNameImage struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// layoutContainerCells joins the container names and images with ",".
func layoutContainerCells(cs []containerNameImage) (names, images string) {
	var n, i strings.Builder
	for k, c := range cs {
		if k > 0 {
			n.WriteByte(',')
			i.WriteByte(',')
		}
		n.WriteString(c.Name)
		i.WriteString(c.Image)
	}
	return n.String(), i.String()
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

// Nodes.

const (
	labelNodeRolePrefix = "node-role.kubernetes.io/"
	nodeLabelRole       = "kubernetes.io/role"
)

func nodeCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var n struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
			Addresses []struct {
				Type    string `json:"type"`
				Address string `json:"address"`
			} `json:"addresses"`
			NodeInfo struct {
				KubeletVersion          string `json:"kubeletVersion"`
				OSImage                 string `json:"osImage"`
				KernelVersion           string `json:"kernelVersion"`
				ContainerRuntimeVersion string `json:"containerRuntimeVersion"`
			} `json:"nodeInfo"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &n); err != nil {
		return nil, nil, err
	}
	// The last Ready condition decides, as in the printer's condition map.
	var ready *string
	for i, c := range n.Status.Conditions {
		if c.Type == string(corev1.NodeReady) {
			ready = &n.Status.Conditions[i].Status
		}
	}
	var status []string
	switch {
	case ready == nil:
		status = append(status, "Unknown")
	case *ready == string(corev1.ConditionTrue):
		status = append(status, "Ready")
	default:
		status = append(status, "NotReady")
	}
	if n.Spec.Unschedulable {
		status = append(status, "SchedulingDisabled")
	}

	roleSet := map[string]bool{}
	for k, v := range n.Metadata.Labels {
		switch {
		case strings.HasPrefix(k, labelNodeRolePrefix):
			if role := strings.TrimPrefix(k, labelNodeRolePrefix); role != "" {
				roleSet[role] = true
			}
		case k == nodeLabelRole && v != "":
			roleSet[v] = true
		}
	}
	roles := make([]string, 0, len(roleSet))
	for r := range roleSet {
		roles = append(roles, r)
	}
	sort.Strings(roles)

	address := func(typ string) string {
		for _, a := range n.Status.Addresses {
			if a.Type == typ {
				return a.Address
			}
		}
		return "<none>"
	}
	info := n.Status.NodeInfo
	return []any{
		n.Metadata.Name,
		strings.Join(status, ","),
		orNone(strings.Join(roles, ",")),
		translateTimestampSince(n.Metadata.CreationTimestamp, now),
		info.KubeletVersion,
		address(string(corev1.NodeInternalIP)),
		address(string(corev1.NodeExternalIP)),
		orUnknown(info.OSImage), orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion),
	}, nil, nil
}

// Services.

func serviceCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var s struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Type         string   `json:"type"`
			ClusterIPs   []string `json:"clusterIPs"`
			ExternalIPs  []string `json:"externalIPs"`
			ExternalName string   `json:"externalName"`
			Ports        []struct {
				Port     int32  `json:"port"`
				NodePort int32  `json:"nodePort"`
				Protocol string `json:"protocol"`
			} `json:"ports"`
			Selector map[string]string `json:"selector"`
		} `json:"spec"`
		Status struct {
			LoadBalancer struct {
				Ingress []struct {
					IP       string `json:"ip"`
					Hostname string `json:"hostname"`
				} `json:"ingress"`
			} `json:"loadBalancer"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &s); err != nil {
		return nil, nil, err
	}
	internalIP := "<none>"
	if len(s.Spec.ClusterIPs) > 0 {
		internalIP = s.Spec.ClusterIPs[0]
	}

	var externalIP string
	switch corev1.ServiceType(s.Spec.Type) {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		externalIP = "<none>"
		if len(s.Spec.ExternalIPs) > 0 {
			externalIP = strings.Join(s.Spec.ExternalIPs, ",")
		}
	case corev1.ServiceTypeLoadBalancer:
		// Wide output: load balancer addresses sorted, unique, unclipped.
		set := map[string]bool{}
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				set[in.IP] = true
			} else if in.Hostname != "" {
				set[in.Hostname] = true
			}
		}
		lb := make([]string, 0, len(set))
		for a := range set {
			lb = append(lb, a)
		}
		sort.Strings(lb)
		switch {
		case len(s.Spec.ExternalIPs) > 0:
			externalIP = strings.Join(append(lb, s.Spec.ExternalIPs...), ",")
		case len(lb) > 0:
			externalIP = strings.Join(lb, ",")
		default:
			externalIP = "<pending>"
		}
	case corev1.ServiceTypeExternalName:
		externalIP = s.Spec.ExternalName
	default:
		externalIP = "<unknown>"
	}

	ports := make([]string, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		if p.NodePort > 0 {
			ports[i] = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		} else {
			ports[i] = fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		}
	}
	return []any{
		s.Metadata.Name,
		s.Spec.Type,
		internalIP,
		externalIP,
		orNone(strings.Join(ports, ",")),
		translateTimestampSince(s.Metadata.CreationTimestamp, now),
		labels.FormatLabels(s.Spec.Selector),
	}, nil, nil
}

// Custom resources.

// PrinterColumn is one additionalPrinterColumn of a CustomResourceDefinition
// version.
type PrinterColumn struct {
	Name, Type, Format, Description string
	Priority                        int32
	// JSONPath is the simple JSONPath evaluated against each object, e.g.
	// ".spec.replicas".
	JSONPath string
}

// CustomColumns are the Table columns of a custom resource, as the CRD
// table convertor of kube-apiserver builds them from
// additionalPrinterColumns: Name, then the columns (a CRD without columns
// gets Age, a date column of metadata.creationTimestamp). It is immutable
// and safe for concurrent use.
type CustomColumns struct {
	p    tablePrinter
	cols []PrinterColumn
}

// NewCustomColumns compiles cols; it fails when a JSONPath does not parse,
// which also makes kube-apiserver refuse to serve the CRD's tables.
func NewCustomColumns(cols []PrinterColumn) (*CustomColumns, error) {
	if len(cols) == 0 {
		cols = []PrinterColumn{{Name: "Age", Type: "date", Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"], JSONPath: ".metadata.creationTimestamp"}}
	}
	defs := []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]}}
	for _, c := range cols {
		if _, err := parseColumnPath(c); err != nil {
			return nil, err
		}
		desc := c.Description
		if desc == "" {
			desc = fmt.Sprintf("Custom resource definition column (in JSONPath format): %s", c.JSONPath)
		}
		defs = append(defs, metav1.TableColumnDefinition{Name: c.Name, Type: c.Type, Format: c.Format, Description: desc, Priority: c.Priority})
	}
	cc := &CustomColumns{cols: append([]PrinterColumn(nil), cols...)}
	cc.p = tablePrinter{columns: mustColumnsJSON(defs), cells: cc.cells}
	return cc, nil
}

func parseColumnPath(c PrinterColumn) (*jsonpath.JSONPath, error) {
	jp := jsonpath.New(c.Name)
	if err := jp.Parse(fmt.Sprintf("{%s}", c.JSONPath)); err != nil {
		return nil, fmt.Errorf("cannot parse JSONPath %q of printer column %q: %w", c.JSONPath, c.Name, err)
	}
	jp.AllowMissingKeys(true)
	return jp, nil
}

// AppendCustomTableHead is AppendTableHead for a custom resource's columns.
func AppendCustomTableHead(dst []byte, cc *CustomColumns, m ListMeta) []byte {
	return appendTableHead(dst, &cc.p, m)
}

// AppendCustomTableRow is AppendTableRow for a custom resource's columns.
func (s *Schema) AppendCustomTableRow(dst []byte, cc *CustomColumns, obj Object, rv int64, inc IncludeObjectPolicy, now time.Time) ([]byte, error) {
	return s.appendTableRow(dst, &cc.p, obj, rv, inc, now)
}

// cells evaluates the columns on the object decoded as kube-apiserver holds
// a custom resource (unstructured: integers int64, other numbers float64).
func (cc *CustomColumns) cells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		return nil, nil, err
	}
	name := ""
	if m, ok := obj["metadata"].(map[string]any); ok {
		name, _ = m["name"].(string)
	}
	cells := make([]any, 0, 1+len(cc.cols))
	cells = append(cells, name)
	var buf strings.Builder
	for _, c := range cc.cols {
		jp, err := parseColumnPath(c) // a JSONPath is not safe for concurrent use
		if err != nil {
			return nil, nil, err
		}
		results, err := jp.FindResults(obj)
		if err != nil || len(results) == 0 || len(results[0]) == 0 {
			cells = append(cells, nil)
			continue
		}
		value := results[0][0].Interface()
		if c.Type == "string" {
			buf.Reset()
			if err := jp.PrintResults(&buf, []reflect.Value{reflect.ValueOf(value)}); err != nil {
				cells = append(cells, nil)
				continue
			}
			cells = append(cells, buf.String())
			continue
		}
		cells = append(cells, cellForJSONValue(c.Type, value, now))
	}
	return cells, nil, nil
}

// cellForJSONValue converts a JSONPath result to the cell of a column of
// type headerType, nil when it does not fit.
func cellForJSONValue(headerType string, value any, now time.Time) any {
	switch headerType {
	case "integer":
		switch v := value.(type) {
		case int64:
			return v
		case float64:
			return int64(v)
		case json.Number:
			if i, err := v.Int64(); err == nil {
				return i
			}
		}
	case "number":
		switch v := value.(type) {
		case int64:
			return float64(v)
		case float64:
			return v
		case json.Number:
			if f, err := v.Float64(); err == nil {
				return f
			}
		}
	case "boolean":
		if b, ok := value.(bool); ok {
			return b
		}
	case "string":
		if s, ok := value.(string); ok {
			return s
		}
	case "date":
		if s, ok := value.(string); ok {
			var t metav1.Time
			if err := t.UnmarshalQueryParameter(s); err != nil {
				return "<invalid>"
			}
			return translateTimestampSince(t, now)
		}
	}
	return nil
}

// Workloads.

// podTemplate is the part of a PodTemplateSpec the printers read.
type podTemplate struct {
	Spec struct {
		Containers   []containerNameImage `json:"containers"`
		NodeSelector map[string]string    `json:"nodeSelector"`
	} `json:"spec"`
}

// replicasOr1 is spec.replicas as kube-apiserver defaults it.
func replicasOr1(r *int32) int64 {
	if r == nil {
		return 1
	}
	return int64(*r)
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

type jobSpecForTable struct {
	Completions *int32                `json:"completions"`
	Parallelism *int32                `json:"parallelism"`
	Selector    *metav1.LabelSelector `json:"selector"`
	Template    podTemplate           `json:"template"`
}

func jobCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta         `json:"metadata"`
		Spec     jobSpecForTable `json:"spec"`
		Status   struct {
			Succeeded      int32        `json:"succeeded"`
			StartTime      *metav1.Time `json:"startTime"`
			CompletionTime *metav1.Time `json:"completionTime"`
			Conditions     []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var completions string
	if o.Spec.Completions != nil {
		completions = fmt.Sprintf("%d/%d", o.Status.Succeeded, *o.Spec.Completions)
	} else if o.Spec.Parallelism != nil && *o.Spec.Parallelism > 1 {
		completions = fmt.Sprintf("%d/1 of %d", o.Status.Succeeded, *o.Spec.Parallelism)
	} else {
		completions = fmt.Sprintf("%d/1", o.Status.Succeeded)
	}
	var jobDuration string
	switch {
	case o.Status.StartTime == nil:
	case o.Status.CompletionTime == nil:
		jobDuration = duration.HumanDuration(now.Sub(o.Status.StartTime.Time))
	default:
		jobDuration = duration.HumanDuration(o.Status.CompletionTime.Sub(o.Status.StartTime.Time))
	}
	// The first condition of a type decides whether the job has it.
	has := func(typ batchv1.JobConditionType) bool {
		for _, c := range o.Status.Conditions {
			if c.Type == string(typ) {
				return c.Status == string(corev1.ConditionTrue)
			}
		}
		return false
	}
	var status string
	switch {
	case has(batchv1.JobComplete):
		status = "Complete"
	case has(batchv1.JobFailed):
		status = "Failed"
	case o.Metadata.DeletionTimestamp != nil:
		status = "Terminating"
	case has(batchv1.JobSuspended):
		status = "Suspended"
	case has(batchv1.JobFailureTarget):
		status = "FailureTarget"
	default:
		status = "Running"
	}
	names, images := layoutContainerCells(o.Spec.Template.Spec.Containers)
	return []any{o.Metadata.Name, status, completions, jobDuration, translateTimestampSince(o.Metadata.CreationTimestamp, now),
		names, images, metav1.FormatLabelSelector(o.Spec.Selector)}, nil, nil
}

func cronJobCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Schedule    string  `json:"schedule"`
			TimeZone    *string `json:"timeZone"`
			Suspend     *bool   `json:"suspend"`
			JobTemplate struct {
				Spec jobSpecForTable `json:"spec"`
			} `json:"jobTemplate"`
		} `json:"spec"`
		Status struct {
			Active           []gojson.RawMessage `json:"active"`
			LastScheduleTime *metav1.Time        `json:"lastScheduleTime"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	last := "<none>"
	if o.Status.LastScheduleTime != nil {
		last = translateTimestampSince(*o.Status.LastScheduleTime, now)
	}
	tz := "<none>"
	if o.Spec.TimeZone != nil {
		tz = *o.Spec.TimeZone
	}
	suspend := "<unset>" // printBoolPtr: a string, although the column is boolean
	if o.Spec.Suspend != nil {
		suspend = "False"
		if *o.Spec.Suspend {
			suspend = "True"
		}
	}
	jt := o.Spec.JobTemplate.Spec
	names, images := layoutContainerCells(jt.Template.Spec.Containers)
	return []any{o.Metadata.Name, o.Spec.Schedule, tz, suspend, int64(len(o.Status.Active)), last,
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images, metav1.FormatLabelSelector(jt.Selector)}, nil, nil
}

func serviceAccountCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta             `json:"metadata"`
		Secrets  []gojson.RawMessage `json:"secrets"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, int64(len(o.Secrets)), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func leaseCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	holder := ""
	if o.Spec.HolderIdentity != nil {
		holder = *o.Spec.HolderIdentity
	}
	return []any{o.Metadata.Name, holder, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func ingressCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			IngressClassName *string `json:"ingressClassName"`
			Rules            []struct {
				Host string `json:"host"`
			} `json:"rules"`
			TLS []gojson.RawMessage `json:"tls"`
		} `json:"spec"`
		Status struct {
			LoadBalancer struct {
				Ingress []struct {
					IP       string `json:"ip"`
					Hostname string `json:"hostname"`
				} `json:"ingress"`
			} `json:"loadBalancer"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	class := "<none>"
	if o.Spec.IngressClassName != nil {
		class = *o.Spec.IngressClassName
	}
	// formatHosts: the first three non-empty hosts, "*" when none.
	var hosts []string
	more := false
	for _, r := range o.Spec.Rules {
		if len(hosts) == 3 {
			more = true
		}
		if !more && r.Host != "" {
			hosts = append(hosts, r.Host)
		}
	}
	hostsCell := "*"
	if len(hosts) > 0 {
		hostsCell = strings.Join(hosts, ",")
		if more {
			hostsCell = fmt.Sprintf("%s + %d more...", hostsCell, len(o.Spec.Rules)-3)
		}
	}
	set := map[string]bool{}
	for _, in := range o.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			set[in.IP] = true
		} else if in.Hostname != "" {
			set[in.Hostname] = true
		}
	}
	addrs := make([]string, 0, len(set))
	for a := range set {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	ports := "80"
	if len(o.Spec.TLS) != 0 {
		ports = "80, 443"
	}
	return []any{o.Metadata.Name, class, hostsCell, strings.Join(addrs, ","), ports, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

// Events (core/v1).

func translateMicroTimestampSince(t metav1.MicroTime, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

func eventCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var e struct {
		Metadata       objMeta `json:"metadata"`
		InvolvedObject struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			FieldPath string `json:"fieldPath"`
		} `json:"involvedObject"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Source  struct {
			Component string `json:"component"`
			Host      string `json:"host"`
		} `json:"source"`
		FirstTimestamp metav1.Time      `json:"firstTimestamp"`
		LastTimestamp  metav1.Time      `json:"lastTimestamp"`
		Count          int32            `json:"count"`
		Type           string           `json:"type"`
		EventTime      metav1.MicroTime `json:"eventTime"`
		Series         *struct {
			Count            int32            `json:"count"`
			LastObservedTime metav1.MicroTime `json:"lastObservedTime"`
		} `json:"series"`
		ReportingController string `json:"reportingComponent"`
		ReportingInstance   string `json:"reportingInstance"`
	}
	if err := gojson.Unmarshal(js, &e); err != nil {
		return nil, nil, err
	}
	first := translateTimestampSince(e.FirstTimestamp, now)
	if e.FirstTimestamp.IsZero() {
		first = translateMicroTimestampSince(e.EventTime, now)
	}
	last := translateTimestampSince(e.LastTimestamp, now)
	if e.LastTimestamp.IsZero() {
		last = first
	}
	count := e.Count
	if e.Series != nil {
		last = translateMicroTimestampSince(e.Series.LastObservedTime, now)
		count = e.Series.Count
	} else if count == 0 {
		count = 1 // singleton events of the new API have no count
	}
	target := strings.ToLower(e.InvolvedObject.Kind)
	if e.InvolvedObject.Name != "" {
		target += "/" + e.InvolvedObject.Name
	}
	component, instance := e.Source.Component, e.Source.Host
	if component == "" {
		component = e.ReportingController
	}
	if instance == "" {
		instance = e.ReportingInstance
	}
	source := component
	if instance != "" {
		source += ", " + instance
	}
	return []any{last, e.Type, e.Reason, target, e.InvolvedObject.FieldPath, source, strings.TrimSpace(e.Message),
		first, int64(count), e.Metadata.Name}, nil, nil
}

// Persistent volumes.

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

// More workloads and policy.

func replicationControllerCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			Replicas *int32            `json:"replicas"`
			Selector map[string]string `json:"selector"`
			Template *podTemplate      `json:"template"`
		} `json:"spec"`
		Status corev1.ReplicationControllerStatus `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var containers []containerNameImage
	if o.Spec.Template != nil {
		containers = o.Spec.Template.Spec.Containers
	}
	names, images := layoutContainerCells(containers)
	return []any{o.Metadata.Name, replicasOr1(o.Spec.Replicas), int64(o.Status.Replicas), int64(o.Status.ReadyReplicas),
		translateTimestampSince(o.Metadata.CreationTimestamp, now), names, images, labels.FormatLabels(o.Spec.Selector)}, nil, nil
}

func podDisruptionBudgetCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			MinAvailable   *intstr.IntOrString `json:"minAvailable"`
			MaxUnavailable *intstr.IntOrString `json:"maxUnavailable"`
		} `json:"spec"`
		Status struct {
			DisruptionsAllowed int32 `json:"disruptionsAllowed"`
		} `json:"status"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	orNA := func(v *intstr.IntOrString) string {
		if v == nil {
			return "N/A"
		}
		return v.String()
	}
	return []any{o.Metadata.Name, orNA(o.Spec.MinAvailable), orNA(o.Spec.MaxUnavailable), int64(o.Status.DisruptionsAllowed),
		translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func networkPolicyCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Spec     struct {
			PodSelector metav1.LabelSelector `json:"podSelector"`
		} `json:"spec"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, metav1.FormatLabelSelector(&o.Spec.PodSelector), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

// roleBindingCells prints RoleBindings and ClusterRoleBindings: the role as
// Kind/Name, and the subjects split as rbac.SubjectsStrings does.
func roleBindingCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		RoleRef  struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"roleRef"`
		Subjects []struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"subjects"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	var users, groups, sas []string
	for _, sub := range o.Subjects {
		switch sub.Kind {
		case "ServiceAccount":
			sas = append(sas, sub.Namespace+"/"+sub.Name)
		case "User":
			users = append(users, sub.Name)
		case "Group":
			groups = append(groups, sub.Name)
		}
	}
	return []any{o.Metadata.Name, o.RoleRef.Kind + "/" + o.RoleRef.Name, translateTimestampSince(o.Metadata.CreationTimestamp, now),
		strings.Join(users, ", "), strings.Join(groups, ", "), strings.Join(sas, ", ")}, nil, nil
}

// Endpoints.

// listWithMore joins list with "," and says how many more there were.
func listWithMore(list []string, more bool, count, max int) string {
	ret := strings.Join(list, ",")
	if more {
		return fmt.Sprintf("%s + %d more...", ret, count-max)
	}
	return ret
}

func endpointsCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
		Subsets  []struct {
			Addresses []struct {
				IP string `json:"ip"`
			} `json:"addresses"`
			Ports []struct {
				Port int32 `json:"port"`
			} `json:"ports"`
		} `json:"subsets"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	// formatEndpoints: up to three addresses (host:port per port).
	cell := "<none>"
	if len(o.Subsets) > 0 {
		const max = 3
		var list []string
		more, count := false, 0
		for _, ss := range o.Subsets {
			if len(ss.Ports) == 0 {
				count += len(ss.Addresses)
				for _, a := range ss.Addresses {
					if len(list) == max {
						more = true
						break
					}
					list = append(list, a.IP)
				}
				continue
			}
			for _, p := range ss.Ports {
				count += len(ss.Addresses)
				for _, a := range ss.Addresses {
					if len(list) == max {
						more = true
						break
					}
					list = append(list, net.JoinHostPort(a.IP, strconv.Itoa(int(p.Port))))
				}
			}
		}
		cell = listWithMore(list, more, count, max)
	}
	return []any{o.Metadata.Name, cell, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func endpointSliceCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata    objMeta `json:"metadata"`
		AddressType string  `json:"addressType"`
		Ports       []struct {
			Name *string `json:"name"`
			Port *int32  `json:"port"`
		} `json:"ports"`
		Endpoints []struct {
			Addresses []string `json:"addresses"`
		} `json:"endpoints"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	const max = 3
	unset := func(s string) string {
		if s == "" {
			return "<unset>"
		}
		return s
	}
	var ports []string
	more, count := false, 0
	for _, p := range o.Ports {
		if len(ports) < max {
			n := "*"
			if p.Port != nil {
				n = strconv.Itoa(int(*p.Port))
			} else if p.Name != nil {
				n = *p.Name
			}
			ports = append(ports, n)
		} else if len(ports) == max {
			more = true
		}
		count++
	}
	portsCell := listWithMore(ports, more, count, max)
	if !more {
		portsCell = unset(portsCell)
	}
	var addrs []string
	more, count = false, 0
	for _, e := range o.Endpoints {
		for _, a := range e.Addresses {
			if len(addrs) < max {
				addrs = append(addrs, a)
			} else if len(addrs) == max {
				more = true
			}
			count++
		}
	}
	addrsCell := listWithMore(addrs, more, count, max)
	if !more {
		addrsCell = unset(addrsCell)
	}
	return []any{o.Metadata.Name, o.AddressType, portsCell, addrsCell, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}
