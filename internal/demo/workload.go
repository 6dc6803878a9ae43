package demo

import (
	"crypto/sha1"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// workload writes a Deployment, the ReplicaSet it owns and that ReplicaSet's
// running Pods, with the status a healthy cluster reports.
func (b *builder) workload() {
	age := 7 * day
	replicas := int32(PodReplicas)
	hash := strings.TrimPrefix(ReplicaSet, Deployment+"-")
	tmplLabels := map[string]string{"app": Deployment}
	container := corev1.Container{
		Name:  "nginx",
		Image: "nginx:1.27",
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: corev1.ProtocolTCP}},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
			PeriodSeconds:    10,
			TimeoutSeconds:   1,
			SuccessThreshold: 1,
			FailureThreshold: 3,
		},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy:          corev1.PullIfNotPresent,
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	podSpec := corev1.PodSpec{
		Containers:                    []corev1.Container{container},
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: &grace,
		DNSPolicy:                     corev1.DNSClusterFirst,
		SecurityContext:               &corev1.PodSecurityContext{},
		SchedulerName:                 corev1.DefaultSchedulerName,
	}
	maxUnavail, maxSurge := intstr.FromString("25%"), intstr.FromString("25%")
	revisionHistory, progressDeadline := int32(10), int32(600)
	dep := &appsv1.Deployment{
		ObjectMeta: b.meta("deployments", AppNamespace, Deployment, age, map[string]string{"app": Deployment}),
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: tmplLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmplLabels}, Spec: podSpec},
			Strategy: appsv1.DeploymentStrategy{
				Type:          appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &maxUnavail, MaxSurge: &maxSurge},
			},
			RevisionHistoryLimit:    &revisionHistory,
			ProgressDeadlineSeconds: &progressDeadline,
		},
		Status: appsv1.DeploymentStatus{
			ObservedGeneration: 1,
			Replicas:           replicas,
			UpdatedReplicas:    replicas,
			ReadyReplicas:      replicas,
			AvailableReplicas:  replicas,
			Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: b.ago(age - time.Minute), LastTransitionTime: b.ago(age - time.Minute), Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
				{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, LastUpdateTime: b.ago(age - time.Minute), LastTransitionTime: b.ago(age), Reason: "NewReplicaSetAvailable", Message: fmt.Sprintf("ReplicaSet %q has successfully progressed.", ReplicaSet)},
			},
		},
	}
	dep.Generation = 1
	dep.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	b.add("deployments", "deployments", dep, dep)

	rsLabels := map[string]string{"app": Deployment, "pod-template-hash": hash}
	controller := true
	rs := &appsv1.ReplicaSet{
		ObjectMeta: b.meta("replicasets", AppNamespace, ReplicaSet, age, rsLabels),
		Spec: appsv1.ReplicaSetSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: rsLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: rsLabels}, Spec: podSpec},
		},
		Status: appsv1.ReplicaSetStatus{
			Replicas: replicas, FullyLabeledReplicas: replicas, ReadyReplicas: replicas, AvailableReplicas: replicas, ObservedGeneration: 1,
		},
	}
	rs.Generation = 1
	rs.Annotations = map[string]string{"deployment.kubernetes.io/desired-replicas": "3", "deployment.kubernetes.io/max-replicas": "4", "deployment.kubernetes.io/revision": "1"}
	rs.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: Deployment, UID: dep.UID, Controller: &controller, BlockOwnerDeletion: &controller}}
	b.add("replicasets", "replicasets", rs, rs)

	for i, suffix := range []string{"7xkqp", "b2n4m", "zq9tw"}[:PodReplicas] {
		name := ReplicaSet + "-" + suffix
		started := b.ago(age - time.Duration(i+1)*time.Minute)
		spec := podSpec
		spec.NodeName = NodeName
		spec.ServiceAccountName = "default"
		spec.Tolerations = []corev1.Toleration{
			{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
		}
		spec.EnableServiceLinks = ptr(true)
		spec.PreemptionPolicy = ptr(corev1.PreemptLowerPriority)
		spec.Priority = ptr(int32(0))
		podIP := fmt.Sprintf("10.244.0.%d", 11+i)
		pod := &corev1.Pod{
			ObjectMeta: b.meta("pods", AppNamespace, name, age-time.Duration(i+1)*time.Minute, rsLabels),
			Spec:       spec,
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
					{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
				},
				HostIP:    "10.0.0.10",
				HostIPs:   []corev1.HostIP{{IP: "10.0.0.10"}},
				PodIP:     podIP,
				PodIPs:    []corev1.PodIP{{IP: podIP}},
				StartTime: &started,
				ContainerStatuses: []corev1.ContainerStatus{{
					Name:         "nginx",
					State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
					Ready:        true,
					RestartCount: 0,
					Image:        "docker.io/library/nginx:1.27",
					ImageID:      "docker.io/library/nginx@sha256:2d194184b067db3598771b4cf326cfe6ad5051937ba1132b8b7d4b0184e0d0a6",
					ContainerID:  fmt.Sprintf("containerd://%x", sha1.Sum([]byte(name))),
					Started:      ptr(true),
				}},
				QOSClass: corev1.PodQOSBurstable,
			},
		}
		pod.GenerateName = ReplicaSet + "-"
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: ReplicaSet, UID: rs.UID, Controller: &controller, BlockOwnerDeletion: &controller}}
		b.add("pods", "pods", pod, pod)
	}
}
