package codec

import (
	"fmt"
	"strconv"
	"time"

	gojson "github.com/goccy/go-json"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
