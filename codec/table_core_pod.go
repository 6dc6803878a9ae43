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
	totalContainers := len(pod.Spec.Containers)

	phase := pod.Status.Phase
	r := podRow{reason: phase}
	if pod.Status.Reason != "" {
		r.reason = pod.Status.Reason
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == string(corev1.PodScheduled) && c.Reason == corev1.PodReasonSchedulingGated {
			r.reason = corev1.PodReasonSchedulingGated
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
		rs := c.RestartPolicy != nil && *c.RestartPolicy == string(corev1.ContainerRestartPolicyAlways)
		restartable[c.Name] = rs
		if rs {
			totalContainers++
		}
	}

	initializing := r.initContainers(&pod, restartable)
	if !initializing || podConditionTrue(pod.Status.Conditions, string(corev1.PodInitialized)) {
		r.containers(&pod)
	}

	terminal := phase == string(corev1.PodSucceeded) || phase == string(corev1.PodFailed)
	if pod.Metadata.DeletionTimestamp != nil && pod.Status.Reason == "NodeLost" {
		r.reason = "Unknown"
	} else if pod.Metadata.DeletionTimestamp != nil && !terminal {
		r.reason = "Terminating"
	}

	restartsStr := strconv.Itoa(r.restarts)
	if r.restarts != 0 && !r.lastRestartDate.IsZero() {
		restartsStr = fmt.Sprintf("%d (%s ago)", r.restarts, translateTimestampSince(r.lastRestartDate, now))
	}

	podIP := ""
	if len(pod.Status.PodIPs) > 0 {
		podIP = pod.Status.PodIPs[0].IP
	}
	return []any{
		pod.Metadata.Name,
		fmt.Sprintf("%d/%d", r.readyContainers, totalContainers),
		r.reason,
		restartsStr,
		translateTimestampSince(pod.Metadata.CreationTimestamp, now),
		orNone(podIP), orNone(pod.Spec.NodeName), orNone(pod.Status.NominatedNodeName), readinessGatesCell(&pod),
	}, conds, nil
}

// podRow is what podCells gathers from a Pod's container statuses, as
// printPod does: the STATUS reason, the restarts and the last restart's
// time (of all containers, and of the restartable init containers alone),
// the ready containers.
type podRow struct {
	reason                                          string
	restarts, restartableInitRestarts               int
	readyContainers                                 int
	lastRestartDate, lastRestartableInitRestartDate metav1.Time
}

// initContainers reads the init container statuses, up to the first that
// has not completed; it reports whether the pod is still initializing.
func (r *podRow) initContainers(pod *podForTable, restartable map[string]bool) (initializing bool) {
	for i, c := range pod.Status.InitContainerStatuses {
		r.restarts += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && r.lastRestartDate.Before(&t.FinishedAt) {
			r.lastRestartDate = t.FinishedAt
		}
		if restartable[c.Name] {
			r.restartableInitRestarts += int(c.RestartCount)
			if t := c.LastTerminationState.Terminated; t != nil && r.lastRestartableInitRestartDate.Before(&t.FinishedAt) {
				r.lastRestartableInitRestartDate = t.FinishedAt
			}
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case restartable[c.Name] && c.Started != nil && *c.Started:
			if c.Ready {
				r.readyContainers++
			}
			continue
		case c.State.Terminated != nil:
			switch {
			case c.State.Terminated.Reason != "":
				r.reason = "Init:" + c.State.Terminated.Reason
			case c.State.Terminated.Signal != 0:
				r.reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
			default:
				r.reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
			}
			initializing = true
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			r.reason = "Init:" + c.State.Waiting.Reason
			initializing = true
		default:
			r.reason = fmt.Sprintf("Init:%d/%d", i, len(pod.Spec.InitContainers))
			initializing = true
		}
		break
	}
	return initializing
}

// containers reads the (non-init) container statuses of an initialized
// pod: its restarts count the restartable init containers' and its own.
func (r *podRow) containers(pod *podForTable) {
	r.restarts = r.restartableInitRestarts
	r.lastRestartDate = r.lastRestartableInitRestartDate
	hasRunning := false
	for i := len(pod.Status.ContainerStatuses) - 1; i >= 0; i-- {
		c := pod.Status.ContainerStatuses[i]
		r.restarts += int(c.RestartCount)
		if t := c.LastTerminationState.Terminated; t != nil && r.lastRestartDate.Before(&t.FinishedAt) {
			r.lastRestartDate = t.FinishedAt
		}
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			r.reason = c.State.Waiting.Reason
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			r.reason = c.State.Terminated.Reason
		case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
			r.reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
		case c.State.Terminated != nil:
			r.reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
		case c.Ready && c.State.Running != nil:
			hasRunning = true
			r.readyContainers++
		}
	}
	// A pod whose containers completed but one still runs is Running
	// (or NotReady without the Ready condition).
	if r.reason == "Completed" && hasRunning {
		if hasPodReadyCondition(pod.Status.Conditions) {
			r.reason = "Running"
		} else {
			r.reason = "NotReady"
		}
	}
}

// readinessGatesCell is the READINESS GATES cell: the gates whose
// condition is True, of all.
func readinessGatesCell(pod *podForTable) string {
	if len(pod.Spec.ReadinessGates) == 0 {
		return "<none>"
	}
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
	return fmt.Sprintf("%d/%d", trueConditions, len(pod.Spec.ReadinessGates))
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
