package codec

import (
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// corePrinters are the printers of the core group ("", v1), with
// coreStatusPrinters.
func corePrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("", "configmaps", configMapCells, c.name,
			metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: corev1.ConfigMap{}.SwaggerDoc()["data"]},
			c.age,
		),
		def("", "secrets", secretCells, c.name,
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: corev1.Secret{}.SwaggerDoc()["data"]},
			c.age,
		),
		def("", "namespaces", namespaceCells, c.name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the namespace"},
			c.age,
		),
		// kube-apiserver v1.37 prints no SECRETS column (removed with the
		// legacy service account token secrets).
		def("", "serviceaccounts", serviceAccountCells, c.name, c.age),
		def("", "services", serviceCells, c.name,
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Cluster-IP", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["clusterIP"]},
			metav1.TableColumnDefinition{Name: "External-IP", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["externalIPs"]},
			metav1.TableColumnDefinition{Name: "Port(s)", Type: "string", Description: corev1.ServiceSpec{}.SwaggerDoc()["ports"]},
			c.age,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: corev1.ServiceSpec{}.SwaggerDoc()["selector"]},
		),
		def("", "endpoints", endpointsCells, c.name,
			metav1.TableColumnDefinition{Name: "Endpoints", Type: "string", Description: corev1.Endpoints{}.SwaggerDoc()["subsets"]},
			c.age,
		),
		def("", "replicationcontrollers", replicationControllerCells, c.name,
			metav1.TableColumnDefinition{Name: "Desired", Type: "integer", Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Current", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["replicas"]},
			metav1.TableColumnDefinition{Name: "Ready", Type: "integer", Description: corev1.ReplicationControllerStatus{}.SwaggerDoc()["readyReplicas"]},
			c.age, c.containers, c.images,
			metav1.TableColumnDefinition{Name: "Selector", Type: "string", Priority: 1, Description: corev1.ReplicationControllerSpec{}.SwaggerDoc()["selector"]},
		),
	}
}

// coreStatusPrinters are the rest of the core group's printers: pods,
// nodes, events and persistent volumes and their claims.
func coreStatusPrinters(c stdColumns) []printerDef {
	return []printerDef{
		def("", "pods", podCells, c.name,
			metav1.TableColumnDefinition{Name: "Ready", Type: "string", Description: "The aggregate readiness state of this pod for accepting traffic."},
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The aggregate status of the containers in this pod."},
			metav1.TableColumnDefinition{Name: "Restarts", Type: "string", Description: "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."},
			c.age,
			metav1.TableColumnDefinition{Name: "IP", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["podIP"]},
			metav1.TableColumnDefinition{Name: "Node", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["nodeName"]},
			metav1.TableColumnDefinition{Name: "Nominated Node", Type: "string", Priority: 1, Description: corev1.PodStatus{}.SwaggerDoc()["nominatedNodeName"]},
			metav1.TableColumnDefinition{Name: "Readiness Gates", Type: "string", Priority: 1, Description: corev1.PodSpec{}.SwaggerDoc()["readinessGates"]},
		),
		def("", "nodes", nodeCells, c.name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the node"},
			metav1.TableColumnDefinition{Name: "Roles", Type: "string", Description: "The roles of the node"},
			c.age,
			metav1.TableColumnDefinition{Name: "Version", Type: "string", Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kubeletVersion"]},
			metav1.TableColumnDefinition{Name: "Internal-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
			metav1.TableColumnDefinition{Name: "External-IP", Type: "string", Priority: 1, Description: corev1.NodeStatus{}.SwaggerDoc()["addresses"]},
			metav1.TableColumnDefinition{Name: "OS-Image", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["osImage"]},
			metav1.TableColumnDefinition{Name: "Kernel-Version", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["kernelVersion"]},
			metav1.TableColumnDefinition{Name: "Container-Runtime", Type: "string", Priority: 1, Description: corev1.NodeSystemInfo{}.SwaggerDoc()["containerRuntimeVersion"]},
		),
		def("", "events", eventCells,
			metav1.TableColumnDefinition{Name: "Last Seen", Type: "string", Description: corev1.Event{}.SwaggerDoc()["lastTimestamp"]},
			metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: corev1.Event{}.SwaggerDoc()["type"]},
			metav1.TableColumnDefinition{Name: "Reason", Type: "string", Description: corev1.Event{}.SwaggerDoc()["reason"]},
			metav1.TableColumnDefinition{Name: "Object", Type: "string", Description: corev1.Event{}.SwaggerDoc()["involvedObject"]},
			metav1.TableColumnDefinition{Name: "Subobject", Type: "string", Priority: 1, Description: corev1.Event{}.InvolvedObject.SwaggerDoc()["fieldPath"]},
			metav1.TableColumnDefinition{Name: "Source", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["source"]},
			metav1.TableColumnDefinition{Name: "Message", Type: "string", Description: corev1.Event{}.SwaggerDoc()["message"]},
			metav1.TableColumnDefinition{Name: "First Seen", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["firstTimestamp"]},
			metav1.TableColumnDefinition{Name: "Count", Type: "string", Priority: 1, Description: corev1.Event{}.SwaggerDoc()["count"]},
			metav1.TableColumnDefinition{Name: "Name", Type: "string", Priority: 1, Format: "name", Description: c.metaDoc["name"]},
		),
		def("", "persistentvolumes", persistentVolumeCells, c.name,
			metav1.TableColumnDefinition{Name: "Capacity", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["capacity"]},
			metav1.TableColumnDefinition{Name: "Access Modes", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["accessModes"]},
			metav1.TableColumnDefinition{Name: "Reclaim Policy", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["persistentVolumeReclaimPolicy"]},
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["phase"]},
			metav1.TableColumnDefinition{Name: "Claim", Type: "string", Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["claimRef"]},
			metav1.TableColumnDefinition{Name: "StorageClass", Type: "string", Description: "StorageClass of the pv"},
			metav1.TableColumnDefinition{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pv"},
			metav1.TableColumnDefinition{Name: "Reason", Type: "string", Description: corev1.PersistentVolumeStatus{}.SwaggerDoc()["reason"]},
			c.age,
			metav1.TableColumnDefinition{Name: "VolumeMode", Type: "string", Priority: 1, Description: corev1.PersistentVolumeSpec{}.SwaggerDoc()["volumeMode"]},
		),
		def("", "persistentvolumeclaims", persistentVolumeClaimCells, c.name,
			metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["phase"]},
			metav1.TableColumnDefinition{Name: "Volume", Type: "string", Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeName"]},
			metav1.TableColumnDefinition{Name: "Capacity", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["capacity"]},
			metav1.TableColumnDefinition{Name: "Access Modes", Type: "string", Description: corev1.PersistentVolumeClaimStatus{}.SwaggerDoc()["accessModes"]},
			metav1.TableColumnDefinition{Name: "StorageClass", Type: "string", Description: "StorageClass of the pvc"},
			metav1.TableColumnDefinition{Name: "VolumeAttributesClass", Type: "string", Description: "VolumeAttributesClass of the pvc"},
			c.age,
			metav1.TableColumnDefinition{Name: "VolumeMode", Type: "string", Priority: 1, Description: corev1.PersistentVolumeClaimSpec{}.SwaggerDoc()["volumeMode"]},
		),
	}
}

// skipped is a JSON value that is only counted: decoding it keeps nothing
// (a json.RawMessage copied every value of a ConfigMap's or Secret's data
// to count the keys, a third of a Table LIST's CPU).
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// configMapProtoCells: v1.ConfigMap is {1 metadata, 2 data (map entry,
// repeated), 3 binaryData (map entry, repeated), 4 immutable}; DATA counts
// the entries (apimachinery writes each key once).
func configMapProtoCells(raw []byte, m *Meta, now time.Time) ([]any, error) {
	n := int64(0)
	for i := 0; i < len(raw); {
		f, next, err := readField(raw, i)
		if err != nil {
			return nil, err
		}
		if f.wt == 2 && (f.num == 2 || f.num == 3) {
			n++
		}
		i = next
	}
	return []any{string(m.Name), n, translateTimestampSince(metav1.NewTime(m.Created), now)}, nil
}

// secretProtoCells: v1.Secret is {1 metadata, 2 data (map entry,
// repeated), 3 type, 4 stringData, 5 immutable}.
func secretProtoCells(raw []byte, m *Meta, now time.Time) ([]any, error) {
	n := int64(0)
	typ := ""
	for i := 0; i < len(raw); {
		f, next, err := readField(raw, i)
		if err != nil {
			return nil, err
		}
		switch {
		case f.wt == 2 && f.num == 2:
			n++
		case f.wt == 2 && f.num == 3:
			typ = string(f.p)
		}
		i = next
	}
	return []any{string(m.Name), typ, n, translateTimestampSince(metav1.NewTime(m.Created), now)}, nil
}

func configMapCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata   objMeta            `json:"metadata"`
		Data       map[string]skipped `json:"data"`
		BinaryData map[string]skipped `json:"binaryData"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, int64(len(o.Data) + len(o.BinaryData)), translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

func secretCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta            `json:"metadata"`
		Type     string             `json:"type"`
		Data     map[string]skipped `json:"data"`
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

func serviceAccountCells(js []byte, now time.Time) ([]any, []tableRowCondition, error) {
	var o struct {
		Metadata objMeta `json:"metadata"`
	}
	if err := gojson.Unmarshal(js, &o); err != nil {
		return nil, nil, err
	}
	return []any{o.Metadata.Name, translateTimestampSince(o.Metadata.CreationTimestamp, now)}, nil, nil
}

// lbIngress is a Service's status.loadBalancer.ingress entry.
type lbIngress struct {
	IP       string `json:"ip"`
	Hostname string `json:"hostname"`
}

// loadBalancerAddresses returns a LoadBalancer Service's addresses as the
// wide output prints them: sorted, unique, unclipped.
func loadBalancerAddresses(ingress []lbIngress) []string {
	set := map[string]bool{}
	for _, in := range ingress {
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
	return lb
}

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
				Ingress []lbIngress `json:"ingress"`
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
		lb := loadBalancerAddresses(s.Status.LoadBalancer.Ingress)
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
