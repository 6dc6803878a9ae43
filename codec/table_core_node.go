package codec

import (
	"sort"
	"strings"
	"time"

	gojson "github.com/goccy/go-json"
	corev1 "k8s.io/api/core/v1"
)

const (
	labelNodeRolePrefix = "node-role.kubernetes.io/"
	nodeLabelRole       = "kubernetes.io/role"
)

// nodeRoles returns a Node's roles from its labels
// (node-role.kubernetes.io/ROLE and kubernetes.io/role), sorted.
func nodeRoles(labels map[string]string) []string {
	roleSet := map[string]bool{}
	for k, v := range labels {
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
	return roles
}

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
				Architecture            string `json:"architecture"`
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

	roles := nodeRoles(n.Metadata.Labels)

	address := func(typ string) string {
		for _, a := range n.Status.Addresses {
			if a.Type == typ {
				return a.Address
			}
		}
		return "<none>"
	}
	info := n.Status.NodeInfo
	kernel := orUnknown(info.KernelVersion)
	if info.Architecture != "" {
		kernel += " (" + info.Architecture + ")"
	}
	return []any{
		n.Metadata.Name,
		strings.Join(status, ","),
		orNone(strings.Join(roles, ",")),
		translateTimestampSince(n.Metadata.CreationTimestamp, now),
		info.KubeletVersion,
		address(string(corev1.NodeInternalIP)),
		address(string(corev1.NodeExternalIP)),
		orUnknown(info.OSImage), kernel, orUnknown(info.ContainerRuntimeVersion),
	}, nil, nil
}
