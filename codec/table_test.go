package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// The expected cells below are what kube-apiserver's printers
// (pkg/printers/internalversion/printers.go, Wide output as its
// TableConvertor uses) produce for the same objects, worked out by hand from
// their rules. Integers are float64 because the Table is decoded with
// encoding/json into metav1.Table, as kubectl does.

var tableNow = fxCreated.Add(26 * time.Hour)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(tableNow.Add(-d)) }

var age = duration.HumanDuration(tableNow.Sub(fxCreated.Time)) // "26h"

type columnSpec struct {
	Name, Type, Format string
	Priority           int32
}

type tableCase struct {
	name            string
	group, resource string
	objs            []runtime.Object
	columns         []columnSpec
	cells           [][]any
	conditions      map[int][]metav1.TableRowCondition
}

func podMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: fxCreated}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: fxCreated}}
}

func tableCases() []tableCase {
	always := corev1.ContainerRestartPolicyAlways
	three := int32(3)
	cPod := func(n int) []corev1.Container {
		cs := make([]corev1.Container, n)
		for i := range cs {
			cs[i] = corev1.Container{Name: fmt.Sprint("c", i), Image: "img"}
		}
		return cs
	}
	podColumns := []columnSpec{{"Name", "string", "name", 0}, {"Ready", "string", "", 0}, {"Status", "string", "", 0}, {"Restarts", "string", "", 0}, {"Age", "string", "", 0},
		{"IP", "string", "", 1}, {"Node", "string", "", 1}, {"Nominated Node", "string", "", 1}, {"Readiness Gates", "string", "", 1}}
	return []tableCase{
		{
			name: "configmaps", resource: "configmaps",
			objs:    testConfigMaps(3),
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Data", "string", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"cm-000", 0.0, age}, {"cm-001", 4.0, age}, {"cm-002", 3.0, age}},
		},
		{
			name: "secrets", resource: "secrets",
			objs: []runtime.Object{
				&corev1.Secret{ObjectMeta: podMeta("s1"), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"a": []byte("1"), "b": {}}},
				&corev1.Secret{ObjectMeta: podMeta("tls"), Type: corev1.SecretTypeTLS},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Type", "string", "", 0}, {"Data", "string", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"s1", "Opaque", 2.0, age}, {"tls", "kubernetes.io/tls", 0.0, age}},
		},
		{
			name: "namespaces", resource: "namespaces",
			objs: []runtime.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", CreationTimestamp: fxCreated}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}},
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "old", CreationTimestamp: fxCreated}, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceTerminating}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Status", "string", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"default", "Active", age}, {"old", "Terminating", age}},
		},
		{
			name: "pods", resource: "pods", columns: podColumns,
			objs: []runtime.Object{
				// Running, one restart 5 minutes ago.
				&corev1.Pod{ObjectMeta: podMeta("running"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(2)},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.1.1.1"}, {IP: "fd00::1"}},
						Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
						ContainerStatuses: []corev1.ContainerStatus{
							{Name: "c0", Ready: true, State: running()},
							{Name: "c1", Ready: true, RestartCount: 1, State: running(), LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, FinishedAt: ago(5 * time.Minute)}}},
						}}},
				// Pending, creating its container.
				&corev1.Pod{ObjectMeta: podMeta("creating"), Spec: corev1.PodSpec{NodeName: "n2", Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{
						{Name: "c0", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}}},
				// Pending, not scheduled, nominated.
				&corev1.Pod{ObjectMeta: podMeta("pending"), Spec: corev1.PodSpec{Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodPending, NominatedNodeName: "n3"}},
				// CrashLoopBackOff.
				&corev1.Pod{ObjectMeta: podMeta("crash"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
						{Name: "c0", RestartCount: 5, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
							LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error", FinishedAt: ago(90 * time.Second)}}}}}},
				// Completed (Succeeded).
				&corev1.Pod{ObjectMeta: podMeta("done"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{
						{Name: "c0", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}}}},
				// Terminating.
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bye", Namespace: "ns", CreationTimestamp: fxCreated, DeletionTimestamp: fxPtr(ago(time.Minute)), DeletionGracePeriodSeconds: fxPtr(int64(30))},
					Spec:   corev1.PodSpec{NodeName: "n1", Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c0", Ready: true, State: running()}}}},
				// Evicted (Failed with a reason).
				&corev1.Pod{ObjectMeta: podMeta("evicted"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1)},
					Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}},
				// Second of two init containers running; a sidecar (restartable
				// init container) counts in READY's total.
				&corev1.Pod{ObjectMeta: podMeta("init"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1),
					InitContainers: []corev1.Container{{Name: "i0", Image: "img"}, {Name: "i1", Image: "img"}, {Name: "side", Image: "img", RestartPolicy: &always}}},
					Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
						{Name: "i0", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
						{Name: "i1", State: running()},
						{Name: "side"},
					}, ContainerStatuses: []corev1.ContainerStatus{{Name: "c0", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}},
				// Init container failed.
				&corev1.Pod{ObjectMeta: podMeta("initfail"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1), InitContainers: []corev1.Container{{Name: "i0", Image: "img"}}},
					Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
						{Name: "i0", RestartCount: 2, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}}}},
				// Readiness gates: one of two True.
				&corev1.Pod{ObjectMeta: podMeta("gated"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(1),
					ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/a"}, {ConditionType: "example.com/b"}}},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.1.1.9"}},
						Conditions:        []corev1.PodCondition{{Type: "example.com/a", Status: corev1.ConditionTrue}, {Type: "example.com/b", Status: corev1.ConditionFalse}},
						ContainerStatuses: []corev1.ContainerStatus{{Name: "c0", Ready: true, State: running()}}}},
				// A completed container beside a running one is Running (Ready
				// condition) .
				&corev1.Pod{ObjectMeta: podMeta("mixed"), Spec: corev1.PodSpec{NodeName: "n1", Containers: cPod(2)},
					Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
						ContainerStatuses: []corev1.ContainerStatus{
							{Name: "c0", Ready: true, State: running()},
							{Name: "c1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}},
						}}},
			},
			cells: [][]any{
				{"running", "2/2", "Running", "1 (5m ago)", age, "10.1.1.1", "n1", "<none>", "<none>"},
				{"creating", "0/1", "ContainerCreating", "0", age, "<none>", "n2", "<none>", "<none>"},
				{"pending", "0/1", "Pending", "0", age, "<none>", "<none>", "n3", "<none>"},
				{"crash", "0/1", "CrashLoopBackOff", "5 (90s ago)", age, "<none>", "n1", "<none>", "<none>"},
				{"done", "0/1", "Completed", "0", age, "<none>", "n1", "<none>", "<none>"},
				{"bye", "1/1", "Terminating", "0", age, "<none>", "n1", "<none>", "<none>"},
				{"evicted", "0/1", "Evicted", "0", age, "<none>", "n1", "<none>", "<none>"},
				{"init", "0/2", "Init:1/3", "0", age, "<none>", "n1", "<none>", "<none>"},
				{"initfail", "0/1", "Init:ExitCode:3", "2", age, "<none>", "n1", "<none>", "<none>"},
				{"gated", "1/1", "Running", "0", age, "10.1.1.9", "n1", "<none>", "1/2"},
				{"mixed", "1/2", "Running", "0", age, "<none>", "n1", "<none>", "<none>"},
			},
			conditions: map[int][]metav1.TableRowCondition{
				4: {{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "The pod has completed successfully."}},
				6: {{Type: metav1.RowCompleted, Status: metav1.ConditionTrue, Reason: "Failed", Message: "The pod failed."}},
			},
		},
		{
			name: "deployments", group: "apps", resource: "deployments",
			objs: []runtime.Object{
				&appsv1.Deployment{ObjectMeta: podMeta("web"), Spec: appsv1.DeploymentSpec{Replicas: &three,
					Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"b", "a"}}}},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:1.27"}, {Name: "sidecar", Image: "busybox"}}}}},
					Status: appsv1.DeploymentStatus{ReadyReplicas: 2, UpdatedReplicas: 3, AvailableReplicas: 1}},
				&appsv1.Deployment{ObjectMeta: podMeta("bad-selector"), Spec: appsv1.DeploymentSpec{
					Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: "Bogus"}}}}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Ready", "string", "", 0}, {"Up-to-date", "string", "", 0}, {"Available", "string", "", 0}, {"Age", "string", "", 0},
				{"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{
				{"web", "2/3", 3.0, 1.0, age, "nginx,sidecar", "nginx:1.27,busybox", "app=web,tier in (a,b)"},
				{"bad-selector", "0/1", 0.0, 0.0, age, "", "", "<invalid>"},
			},
		},
		{
			name: "nodes", resource: "nodes",
			objs: []runtime.Object{
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cp", CreationTimestamp: fxCreated, Labels: map[string]string{
					"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "x", "kubernetes.io/role": "worker", "other": "y"}},
					Spec: corev1.NodeSpec{Unschedulable: true},
					Status: corev1.NodeStatus{
						Conditions: []corev1.NodeCondition{{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, {Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
						Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "cp"}, {Type: corev1.NodeInternalIP, Address: "192.168.0.2"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.5"}},
						NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.0", OSImage: "Debian GNU/Linux 13", KernelVersion: "6.12.0", ContainerRuntimeVersion: "containerd://2.1.0"}}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "new", CreationTimestamp: fxCreated}},
				&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "sick", CreationTimestamp: fxCreated},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Status", "string", "", 0}, {"Roles", "string", "", 0}, {"Age", "string", "", 0}, {"Version", "string", "", 0},
				{"Internal-IP", "string", "", 1}, {"External-IP", "string", "", 1}, {"OS-Image", "string", "", 1}, {"Kernel-Version", "string", "", 1}, {"Container-Runtime", "string", "", 1}},
			cells: [][]any{
				{"cp", "Ready,SchedulingDisabled", "control-plane,worker", age, "v1.37.0", "192.168.0.2", "203.0.113.5", "Debian GNU/Linux 13", "6.12.0", "containerd://2.1.0"},
				{"new", "Unknown", "<none>", age, "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"},
				{"sick", "NotReady", "<none>", age, "", "<none>", "<none>", "<unknown>", "<unknown>", "<unknown>"},
			},
		},
		{
			name: "services", resource: "services",
			objs: []runtime.Object{
				&corev1.Service{ObjectMeta: podMeta("web"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
					Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}, {Port: 53, Protocol: corev1.ProtocolUDP}}, Selector: map[string]string{"app": "web", "a": "b"}}},
				&corev1.Service{ObjectMeta: podMeta("np"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIPs: []string{"10.96.0.11"}, ExternalIPs: []string{"198.51.100.1"},
					Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}},
				&corev1.Service{ObjectMeta: podMeta("lb"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.12"},
					Ports: []corev1.ServicePort{{Port: 443, NodePort: 31443, Protocol: corev1.ProtocolTCP}}},
					Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{Hostname: "lb.example.com"}, {IP: "5.6.7.8"}, {IP: "5.6.7.8"}}}}},
				&corev1.Service{ObjectMeta: podMeta("lb-pending"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIPs: []string{"10.96.0.13"}}},
				&corev1.Service{ObjectMeta: podMeta("ext"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example.com"}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Type", "string", "", 0}, {"Cluster-IP", "string", "", 0}, {"External-IP", "string", "", 0}, {"Port(s)", "string", "", 0}, {"Age", "string", "", 0}, {"Selector", "string", "", 1}},
			cells: [][]any{
				{"web", "ClusterIP", "10.96.0.10", "<none>", "80/TCP,53/UDP", age, "a=b,app=web"},
				{"np", "NodePort", "10.96.0.11", "198.51.100.1", "80:30080/TCP", age, "<none>"},
				{"lb", "LoadBalancer", "10.96.0.12", "5.6.7.8,lb.example.com", "443:31443/TCP", age, "<none>"},
				{"lb-pending", "LoadBalancer", "10.96.0.13", "<pending>", "<none>", age, "<none>"},
				{"ext", "ExternalName", "<none>", "db.example.com", "<none>", age, "<none>"},
			},
		},
		{
			name: "replicasets", group: "apps", resource: "replicasets",
			objs: []runtime.Object{
				&appsv1.ReplicaSet{ObjectMeta: podMeta("rs"), Spec: appsv1.ReplicaSetSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "a", Image: "img1"}}}}},
					Status: appsv1.ReplicaSetStatus{Replicas: 3, ReadyReplicas: 2}},
				&appsv1.ReplicaSet{ObjectMeta: podMeta("rs2")},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Desired", "integer", "", 0}, {"Current", "integer", "", 0}, {"Ready", "integer", "", 0}, {"Age", "string", "", 0},
				{"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{{"rs", 3.0, 3.0, 2.0, age, "a", "img1", "app=web"}, {"rs2", 1.0, 0.0, 0.0, age, "", "", "<none>"}},
		},
		{
			name: "daemonsets", group: "apps", resource: "daemonsets",
			objs: []runtime.Object{
				&appsv1.DaemonSet{ObjectMeta: podMeta("ds"), Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ds"}},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Containers: []corev1.Container{{Name: "agent", Image: "agent:2"}}}}},
					Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, NumberReady: 2, UpdatedNumberScheduled: 1, NumberAvailable: 2}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Desired", "integer", "", 0}, {"Current", "integer", "", 0}, {"Ready", "integer", "", 0}, {"Up-to-date", "integer", "", 0},
				{"Available", "integer", "", 0}, {"Node Selector", "string", "", 0}, {"Age", "string", "", 0}, {"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{{"ds", 3.0, 3.0, 2.0, 1.0, 2.0, "kubernetes.io/os=linux", age, "agent", "agent:2", "app=ds"}},
		},
		{
			name: "statefulsets", group: "apps", resource: "statefulsets",
			objs: []runtime.Object{&appsv1.StatefulSet{ObjectMeta: podMeta("db"), Spec: appsv1.StatefulSetSpec{Replicas: fxPtr(int32(2)),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pg", Image: "postgres:17"}, {Name: "exp", Image: "exporter"}}}}},
				Status: appsv1.StatefulSetStatus{ReadyReplicas: 1}}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Ready", "string", "", 0}, {"Age", "string", "", 0}, {"Containers", "string", "", 1}, {"Images", "string", "", 1}},
			cells:   [][]any{{"db", "1/2", age, "pg,exp", "postgres:17,exporter"}},
		},
		{
			name: "jobs", group: "batch", resource: "jobs",
			objs: []runtime.Object{
				&batchv1.Job{ObjectMeta: podMeta("done"), Spec: batchv1.JobSpec{Completions: &three, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"job-name": "done"}},
					Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "w", Image: "worker"}}}}},
					Status: batchv1.JobStatus{Succeeded: 3, StartTime: fxPtr(ago(10 * time.Minute)), CompletionTime: fxPtr(ago(5 * time.Minute)),
						Conditions: []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}, {Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}},
				&batchv1.Job{ObjectMeta: podMeta("run"), Spec: batchv1.JobSpec{Parallelism: fxPtr(int32(2))},
					Status: batchv1.JobStatus{StartTime: fxPtr(ago(90 * time.Second))}},
				&batchv1.Job{ObjectMeta: podMeta("fail"), Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue}}}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Status", "string", "", 0}, {"Completions", "string", "", 0}, {"Duration", "string", "", 0}, {"Age", "string", "", 0},
				{"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{
				{"done", "Complete", "3/3", "5m", age, "w", "worker", "job-name=done"},
				{"run", "Running", "0/1 of 2", "90s", age, "", "", "<none>"},
				{"fail", "Failed", "0/1", "", age, "", "", "<none>"},
			},
		},
		{
			name: "cronjobs", group: "batch", resource: "cronjobs",
			objs: []runtime.Object{
				&batchv1.CronJob{ObjectMeta: podMeta("every5"), Spec: batchv1.CronJobSpec{Schedule: "*/5 * * * *", Suspend: fxPtr(false),
					JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "cron"}}}}}}},
					Status: batchv1.CronJobStatus{Active: []corev1.ObjectReference{{Name: "j1"}}, LastScheduleTime: fxPtr(ago(2 * time.Minute))}},
				&batchv1.CronJob{ObjectMeta: podMeta("nightly"), Spec: batchv1.CronJobSpec{Schedule: "0 3 * * *", TimeZone: fxPtr("Etc/UTC")}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Schedule", "string", "", 0}, {"Timezone", "string", "", 0}, {"Suspend", "boolean", "", 0}, {"Active", "integer", "", 0},
				{"Last Schedule", "string", "", 0}, {"Age", "string", "", 0}, {"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{
				{"every5", "*/5 * * * *", "<none>", "False", 1.0, "2m", age, "c", "cron", "<none>"},
				{"nightly", "0 3 * * *", "Etc/UTC", "<unset>", 0.0, "<none>", age, "", "", "<none>"},
			},
		},
		{
			name: "serviceaccounts", resource: "serviceaccounts",
			objs: []runtime.Object{&corev1.ServiceAccount{ObjectMeta: podMeta("default"), Secrets: []corev1.ObjectReference{{Name: "tok"}}}},
			// kube-apiserver v1.37 has no SECRETS column.
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"default", age}},
		},
		{
			name: "leases", group: "coordination.k8s.io", resource: "leases",
			objs:    []runtime.Object{&coordinationv1.Lease{ObjectMeta: podMeta("node-1"), Spec: coordinationv1.LeaseSpec{HolderIdentity: fxPtr("node-1")}}, &coordinationv1.Lease{ObjectMeta: podMeta("free")}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Holder", "string", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"node-1", "node-1", age}, {"free", "", age}},
		},
		{
			name: "ingresses", group: "networking.k8s.io", resource: "ingresses",
			objs: []runtime.Object{
				&networkingv1.Ingress{ObjectMeta: podMeta("web"), Spec: networkingv1.IngressSpec{IngressClassName: fxPtr("nginx"), TLS: []networkingv1.IngressTLS{{Hosts: []string{"a.com"}}},
					Rules: []networkingv1.IngressRule{{Host: "a.com"}, {}, {Host: "b.com"}, {Host: "c.com"}, {Host: "d.com"}}},
					Status: networkingv1.IngressStatus{LoadBalancer: networkingv1.IngressLoadBalancerStatus{Ingress: []networkingv1.IngressLoadBalancerIngress{{Hostname: "h.example"}, {IP: "1.1.1.1"}}}}},
				&networkingv1.Ingress{ObjectMeta: podMeta("bare")},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Class", "string", "", 0}, {"Hosts", "string", "", 0}, {"Address", "string", "", 0}, {"Ports", "string", "", 0}, {"Age", "string", "", 0}},
			cells: [][]any{
				{"web", "nginx", "a.com,b.com,c.com + 2 more...", "1.1.1.1,h.example", "80, 443", age},
				{"bare", "<none>", "*", "", "80", age},
			},
		},
		{
			name: "events", resource: "events",
			objs: []runtime.Object{
				&corev1.Event{ObjectMeta: podMeta("p1.abc"), InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "p1", FieldPath: "spec.containers{c}"},
					Reason: "Pulled", Message: " Successfully pulled image \n", Source: corev1.EventSource{Component: "kubelet", Host: "n1"},
					FirstTimestamp: ago(10 * time.Minute), LastTimestamp: ago(3 * time.Minute), Count: 4, Type: "Normal"},
				&corev1.Event{ObjectMeta: podMeta("new.api"), InvolvedObject: corev1.ObjectReference{Kind: "Node"},
					Reason: "Started", Type: "Warning", EventTime: metav1.NewMicroTime(tableNow.Add(-time.Minute)), ReportingController: "ctrl", ReportingInstance: "ctrl-1"},
				&corev1.Event{ObjectMeta: podMeta("series"), InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Name: "web"}, Source: corev1.EventSource{Component: "dc"},
					FirstTimestamp: ago(time.Hour), Series: &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(tableNow.Add(-30 * time.Second))}},
			},
			columns: []columnSpec{{"Last Seen", "string", "", 0}, {"Type", "string", "", 0}, {"Reason", "string", "", 0}, {"Object", "string", "", 0}, {"Subobject", "string", "", 1},
				{"Source", "string", "", 1}, {"Message", "string", "", 0}, {"First Seen", "string", "", 1}, {"Count", "string", "", 1}, {"Name", "string", "name", 1}},
			cells: [][]any{
				{"3m", "Normal", "Pulled", "pod/p1", "spec.containers{c}", "kubelet, n1", "Successfully pulled image", "10m", 4.0, "p1.abc"},
				{"60s", "Warning", "Started", "node", "", "ctrl, ctrl-1", "", "60s", 1.0, "new.api"},
				{"30s", "", "", "deployment/web", "", "dc", "", "60m", 7.0, "series"},
			},
		},
		{
			name: "persistentvolumes", resource: "persistentvolumes",
			objs: []runtime.Object{
				&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1", CreationTimestamp: fxCreated}, Spec: corev1.PersistentVolumeSpec{
					Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany, corev1.ReadWriteOnce, corev1.ReadWriteOnce},
					ClaimRef:    &corev1.ObjectReference{Namespace: "ns", Name: "data"}, PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
					StorageClassName: "fast", VolumeMode: fxPtr(corev1.PersistentVolumeFilesystem), VolumeAttributesClassName: fxPtr("gold")},
					Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound}},
				&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv2", CreationTimestamp: fxCreated, DeletionTimestamp: fxPtr(ago(time.Minute)),
					Annotations: map[string]string{"volume.beta.kubernetes.io/storage-class": "slow"}}, Spec: corev1.PersistentVolumeSpec{StorageClassName: "fast"},
					Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased, Reason: "gone"}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Capacity", "string", "", 0}, {"Access Modes", "string", "", 0}, {"Reclaim Policy", "string", "", 0},
				{"Status", "string", "", 0}, {"Claim", "string", "", 0}, {"StorageClass", "string", "", 0}, {"VolumeAttributesClass", "string", "", 0}, {"Reason", "string", "", 0},
				{"Age", "string", "", 0}, {"VolumeMode", "string", "", 1}},
			cells: [][]any{
				{"pv1", "10Gi", "RWO,RWX", "Retain", "Bound", "ns/data", "fast", "gold", "", age, "Filesystem"},
				{"pv2", "0", "", "", "Terminating", "", "slow", "<unset>", "gone", age, "<unset>"},
			},
		},
		{
			name: "persistentvolumeclaims", resource: "persistentvolumeclaims",
			objs: []runtime.Object{
				&corev1.PersistentVolumeClaim{ObjectMeta: podMeta("claim"), Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1", StorageClassName: fxPtr("fast"), VolumeMode: fxPtr(corev1.PersistentVolumeBlock)},
					Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod, corev1.ReadWriteOnce},
						Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1500Mi")}}},
				&corev1.PersistentVolumeClaim{ObjectMeta: podMeta("pending"), Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Status", "string", "", 0}, {"Volume", "string", "", 0}, {"Capacity", "string", "", 0}, {"Access Modes", "string", "", 0},
				{"StorageClass", "string", "", 0}, {"VolumeAttributesClass", "string", "", 0}, {"Age", "string", "", 0}, {"VolumeMode", "string", "", 1}},
			cells: [][]any{
				{"claim", "Bound", "pv1", "1500Mi", "RWO,RWOP", "fast", "<unset>", age, "Block"},
				{"pending", "Pending", "", "", "", "", "<unset>", age, "<unset>"},
			},
		},
		{
			name: "replicationcontrollers", resource: "replicationcontrollers",
			objs: []runtime.Object{&corev1.ReplicationController{ObjectMeta: podMeta("rc"), Spec: corev1.ReplicationControllerSpec{Replicas: &three, Selector: map[string]string{"app": "rc", "b": "c"},
				Template: &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "x", Image: "y"}}}}},
				Status: corev1.ReplicationControllerStatus{Replicas: 2, ReadyReplicas: 1}}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Desired", "integer", "", 0}, {"Current", "integer", "", 0}, {"Ready", "integer", "", 0}, {"Age", "string", "", 0},
				{"Containers", "string", "", 1}, {"Images", "string", "", 1}, {"Selector", "string", "", 1}},
			cells: [][]any{{"rc", 3.0, 2.0, 1.0, age, "x", "y", "app=rc,b=c"}},
		},
		{
			name: "poddisruptionbudgets", group: "policy", resource: "poddisruptionbudgets",
			objs: []runtime.Object{
				&policyv1.PodDisruptionBudget{ObjectMeta: podMeta("pdb"), Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: fxPtr(intstr.FromString("50%"))},
					Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 2}},
				&policyv1.PodDisruptionBudget{ObjectMeta: podMeta("pdb2"), Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: fxPtr(intstr.FromInt32(1))}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Min Available", "string", "", 0}, {"Max Unavailable", "string", "", 0}, {"Allowed Disruptions", "integer", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"pdb", "50%", "N/A", 2.0, age}, {"pdb2", "N/A", "1", 0.0, age}},
		},
		{
			name: "networkpolicies", group: "networking.k8s.io", resource: "networkpolicies",
			objs: []runtime.Object{
				&networkingv1.NetworkPolicy{ObjectMeta: podMeta("deny"), Spec: networkingv1.NetworkPolicySpec{}},
				&networkingv1.NetworkPolicy{ObjectMeta: podMeta("web"), Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Pod-Selector", "string", "", 0}, {"Age", "string", "", 0}},
			cells:   [][]any{{"deny", "<none>", age}, {"web", "app=web", age}},
		},
		{
			name: "rolebindings", group: "rbac.authorization.k8s.io", resource: "rolebindings",
			objs: []runtime.Object{&rbacv1.RoleBinding{ObjectMeta: podMeta("rb"), RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "view"},
				Subjects: []rbacv1.Subject{{Kind: "User", Name: "alice"}, {Kind: "Group", Name: "devs"}, {Kind: "ServiceAccount", Namespace: "ns", Name: "sa"},
					{Kind: "User", Name: "bob"}, {Kind: "ServiceAccount", Namespace: "ns2", Name: "sb"}}}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Role", "string", "", 0}, {"Age", "string", "", 0}, {"Users", "string", "", 1}, {"Groups", "string", "", 1}, {"ServiceAccounts", "string", "", 1}},
			cells:   [][]any{{"rb", "ClusterRole/view", age, "alice, bob", "devs", "ns/sa, ns2/sb"}},
		},
		{
			name: "clusterrolebindings", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings",
			objs:    []runtime.Object{&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "crb", CreationTimestamp: fxCreated}, RoleRef: rbacv1.RoleRef{Kind: "ClusterRole", Name: "admin"}}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Role", "string", "", 0}, {"Age", "string", "", 0}, {"Users", "string", "", 1}, {"Groups", "string", "", 1}, {"ServiceAccounts", "string", "", 1}},
			cells:   [][]any{{"crb", "ClusterRole/admin", age, "", "", ""}},
		},
		{
			name: "endpoints", resource: "endpoints",
			objs: []runtime.Object{
				&corev1.Endpoints{ObjectMeta: podMeta("web"), Subsets: []corev1.EndpointSubset{
					{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.1"}, {IP: "fd00::2"}}, Ports: []corev1.EndpointPort{{Port: 80}, {Port: 443}}},
					{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.9"}}},
				}},
				&corev1.Endpoints{ObjectMeta: podMeta("headless"), Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.5"}}}}},
				&corev1.Endpoints{ObjectMeta: podMeta("empty")},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Endpoints", "string", "", 0}, {"Age", "string", "", 0}},
			cells: [][]any{
				{"web", "10.0.0.1:80,[fd00::2]:80,10.0.0.1:443 + 2 more...", age},
				{"headless", "10.0.0.5", age},
				{"empty", "<none>", age},
			},
		},
		{
			name: "endpointslices", group: "discovery.k8s.io", resource: "endpointslices",
			objs: []runtime.Object{
				&discoveryv1.EndpointSlice{ObjectMeta: podMeta("web-abc"), AddressType: discoveryv1.AddressTypeIPv4,
					Ports:     []discoveryv1.EndpointPort{{Port: fxPtr(int32(80))}, {Name: fxPtr("metrics")}, {}, {Port: fxPtr(int32(9))}},
					Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}, {Addresses: []string{"10.0.0.2", "10.0.0.3"}}}},
				&discoveryv1.EndpointSlice{ObjectMeta: podMeta("none"), AddressType: discoveryv1.AddressTypeIPv6},
			},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"AddressType", "string", "", 0}, {"Ports", "string", "", 0}, {"Endpoints", "string", "", 0}, {"Age", "string", "", 0}},
			cells: [][]any{
				{"web-abc", "IPv4", "80,metrics,* + 1 more...", "10.0.0.1,10.0.0.2,10.0.0.3", age},
				{"none", "IPv6", "<unset>", "<unset>", age},
			},
		},
		{
			// kube-apiserver's default table convertor.
			name: "roles (default convertor)", group: "rbac.authorization.k8s.io", resource: "roles",
			objs:    []runtime.Object{&rbacv1.Role{ObjectMeta: podMeta("reader")}},
			columns: []columnSpec{{"Name", "string", "name", 0}, {"Created At", "date", "", 0}},
			cells:   [][]any{{"reader", "2026-11-30T10:00:00Z"}},
		},
	}
}

// writeTable writes a Table of items as the proxy streams one.
func writeTable(t testing.TB, s *Schema, group, resource string, m ListMeta, items []fxItem, inc IncludeObjectPolicy) []byte {
	t.Helper()
	b := s.AppendTableHead(nil, group, resource, m)
	for i, it := range items {
		if i > 0 {
			b = AppendTableSep(b)
		}
		var err error
		if b, err = s.AppendTableRow(b, group, resource, it.obj, it.rv, inc, tableNow); err != nil {
			t.Fatalf("AppendTableRow(%d): %v", i, err)
		}
	}
	return AppendTableTail(b)
}

func checkTable(t *testing.T, got []byte, tc tableCase, m ListMeta) *metav1.Table {
	t.Helper()
	var tbl metav1.Table
	if err := json.Unmarshal(got, &tbl); err != nil {
		t.Fatalf("decode Table: %v\n%s", err, got)
	}
	// The framing is encoding/json's: re-encoding the decoded Table gives
	// the same bytes.
	if again, err := json.Marshal(&tbl); err != nil || !bytes.Equal(again, got) {
		t.Fatalf("Table is not encoding/json's encoding (%v):\ngot  %s\nwant %s", err, got, again)
	}
	if tbl.Kind != "Table" || tbl.APIVersion != "meta.k8s.io/v1" {
		t.Fatalf("Table typemeta = %+v", tbl.TypeMeta)
	}
	if want := fmt.Sprint(m.ResourceVersion); tbl.ResourceVersion != want || tbl.Continue != m.Continue {
		t.Fatalf("Table metadata = %+v, want rv %s continue %q", tbl.ListMeta, want, m.Continue)
	}
	var cols []columnSpec
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, columnSpec{c.Name, c.Type, c.Format, c.Priority})
		if c.Description == "" {
			t.Errorf("column %q has no description", c.Name)
		}
	}
	if diff := cmp.Diff(tc.columns, cols); diff != "" {
		t.Fatalf("columns differ (-want +got):\n%s", diff)
	}
	if len(tbl.Rows) != len(tc.cells) {
		t.Fatalf("got %d rows, want %d", len(tbl.Rows), len(tc.cells))
	}
	for i, r := range tbl.Rows {
		if diff := cmp.Diff(tc.cells[i], r.Cells); diff != "" {
			t.Errorf("row %d cells differ (-want +got):\n%s", i, diff)
		}
		if diff := cmp.Diff(tc.conditions[i], r.Conditions); diff != "" {
			t.Errorf("row %d conditions differ (-want +got):\n%s", i, diff)
		}
	}
	return &tbl
}

func TestTable(t *testing.T) {
	s := fxSchema(t)
	m := ListMeta{ResourceVersion: 77, Continue: "next"}
	for _, tc := range tableCases() {
		t.Run(tc.name, func(t *testing.T) {
			items := fxStore(t, tc.objs, 10)
			tbl := checkTable(t, writeTable(t, s, tc.group, tc.resource, m, items, IncludeMetadata), tc, m)
			dec := metadataCodecs(t).UniversalDeserializer()
			for i, r := range tbl.Rows {
				obj, _, err := dec.Decode(r.Object.Raw, nil, nil)
				if err != nil {
					t.Fatalf("row %d object: %v", i, err)
				}
				if diff := cmp.Diff(partialOf(t, items[i].want), obj); diff != "" {
					t.Fatalf("row %d object differs (-want +got):\n%s", i, diff)
				}
			}

			tbl = checkTable(t, writeTable(t, s, tc.group, tc.resource, m, items, IncludeNone), tc, m)
			for i, r := range tbl.Rows {
				if r.Object.Raw != nil {
					t.Fatalf("includeObject=None: row %d object = %s, want null", i, r.Object.Raw)
				}
			}

			tbl = checkTable(t, writeTable(t, s, tc.group, tc.resource, m, items, IncludeObject), tc, m)
			for i, r := range tbl.Rows {
				obj, _, err := fxJSON.Decode(r.Object.Raw, nil, nil)
				if err != nil {
					t.Fatalf("row %d object: %v", i, err)
				}
				want := items[i].want.DeepCopyObject()
				want.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
				if obj.GetObjectKind().GroupVersionKind().Kind == "" {
					t.Fatalf("row %d object has no kind", i)
				}
				if diff := cmp.Diff(want, obj); diff != "" {
					t.Fatalf("row %d object differs (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestTableCustomResource(t *testing.T) {
	s := fxSchema(t)
	items := fxStoreCustom(t, 2, 4)
	tc := tableCase{
		columns: []columnSpec{{"Name", "string", "name", 0}, {"Age", "date", "", 0}},
		cells:   [][]any{{"w-0", age}, {"w-1", age}},
	}
	m := ListMeta{ResourceVersion: 5}
	checkTable(t, writeTable(t, s, "example.com", "widgets", m, items, IncludeMetadata), tc, m)
	// An empty table.
	tc.cells = nil
	checkTable(t, writeTable(t, s, "example.com", "widgets", m, nil, IncludeMetadata), tc, m)
}

func TestParseIncludeObject(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IncludeObjectPolicy
		ok   bool
	}{{"", IncludeMetadata, true}, {"Metadata", IncludeMetadata, true}, {"None", IncludeNone, true}, {"Object", IncludeObject, true}, {"object", 0, false}} {
		if got, ok := ParseIncludeObject(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("ParseIncludeObject(%q) = %v, %v, want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestTableCustomColumns checks additionalPrinterColumns the way the CRD
// table convertor evaluates them: JSONPath on the unstructured object, cells
// typed by the column type, string columns printed by JSONPath.
func TestTableCustomColumns(t *testing.T) {
	s := fxSchema(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "creationTimestamp": "2026-11-30T10:00:00Z"},
		"spec":     map[string]any{"size": int64(3), "ratio": 1.5, "tags": []any{"a", "<b>"}, "when": "not a date", "mode": "fast"},
		"status":   map[string]any{"ready": true, "count": 2.0},
	}}
	stored, err := storagefmt.JSON(u)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := Unwrap(stored)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := NewCustomColumns([]PrinterColumn{
		{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
		{Name: "Ratio", Type: "number", JSONPath: ".spec.ratio", Description: "the ratio"},
		{Name: "Count", Type: "integer", JSONPath: ".status.count"},
		{Name: "Tags", Type: "string", JSONPath: ".spec.tags", Priority: 1},
		{Name: "Mode", Type: "string", JSONPath: ".spec.mode"},
		{Name: "Ready", Type: "boolean", JSONPath: ".status.ready"},
		{Name: "Missing", Type: "string", JSONPath: ".spec.nothing"},
		{Name: "Wrong", Type: "integer", JSONPath: ".spec.mode"},
		{Name: "When", Type: "date", JSONPath: ".spec.when"},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	})
	if err != nil {
		t.Fatal(err)
	}
	m := ListMeta{ResourceVersion: 8}
	b := AppendCustomTableHead(nil, cc, m)
	if b, err = s.AppendCustomTableRow(b, cc, obj, 8, IncludeObject, tableNow); err != nil {
		t.Fatal(err)
	}
	b = AppendTableTail(b)
	var tbl metav1.Table
	if err := json.Unmarshal(b, &tbl); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	wantCols := []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: metav1.ObjectMeta{}.SwaggerDoc()["name"]},
		{Name: "Size", Type: "integer", Description: "Custom resource definition column (in JSONPath format): .spec.size"},
		{Name: "Ratio", Type: "number", Description: "the ratio"},
		{Name: "Count", Type: "integer", Description: "Custom resource definition column (in JSONPath format): .status.count"},
		{Name: "Tags", Type: "string", Priority: 1, Description: "Custom resource definition column (in JSONPath format): .spec.tags"},
		{Name: "Mode", Type: "string", Description: "Custom resource definition column (in JSONPath format): .spec.mode"},
		{Name: "Ready", Type: "boolean", Description: "Custom resource definition column (in JSONPath format): .status.ready"},
		{Name: "Missing", Type: "string", Description: "Custom resource definition column (in JSONPath format): .spec.nothing"},
		{Name: "Wrong", Type: "integer", Description: "Custom resource definition column (in JSONPath format): .spec.mode"},
		{Name: "When", Type: "date", Description: "Custom resource definition column (in JSONPath format): .spec.when"},
		{Name: "Age", Type: "date", Description: "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp"},
	}
	if diff := cmp.Diff(wantCols, tbl.ColumnDefinitions); diff != "" {
		t.Fatalf("columns differ (-want +got):\n%s", diff)
	}
	// client-go's JSONPath prints a list as JSON (encoding/json, HTML-escaped)
	wantCells := []any{"w", 3.0, 1.5, 2.0, `["a","\u003cb\u003e"]`, "fast", true, nil, nil, "<invalid>", age}
	if len(tbl.Rows) != 1 {
		t.Fatalf("got %d rows", len(tbl.Rows))
	}
	if diff := cmp.Diff(wantCells, tbl.Rows[0].Cells); diff != "" {
		t.Fatalf("cells differ (-want +got):\n%s", diff)
	}
	if _, err := NewCustomColumns([]PrinterColumn{{Name: "Bad", Type: "string", JSONPath: ".spec[unclosed"}}); err == nil {
		t.Fatal("NewCustomColumns(bad JSONPath): want error")
	}
}

// TestTableWatch decodes a Table watch (kubectl get -w) with client-go's
// watch decoder: headers on the first event only, one row per event.
func TestTableWatch(t *testing.T) {
	s := fxSchema(t)
	items := fxStore(t, testConfigMaps(3), 20)
	var body []byte
	for i, it := range items {
		var err error
		if body, err = s.AppendTableWatchEvent(body, EventModified, "", "configmaps", nil, it.obj, it.rv, IncludeMetadata, tableNow, i == 0); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := NewCustomColumns(nil)
	if err != nil {
		t.Fatal(err)
	}
	cr := fxStoreCustom(t, 1, 30)[0]
	if body, err = s.AppendTableWatchEvent(body, EventAdded, "example.com", "widgets", cc, cr.obj, cr.rv, IncludeNone, tableNow, true); err != nil {
		t.Fatal(err)
	}
	codecs := metadataCodecs(t)
	info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaJSON)
	fr := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(body)))
	dec := restclientwatch.NewDecoder(streaming.NewDecoder(fr, info.StreamSerializer.Serializer), codecs.UniversalDeserializer())
	// apimachinery's JSON decoder reads integral numbers as int64
	wantCells := [][]any{{"cm-000", int64(0), age}, {"cm-001", int64(4), age}, {"cm-002", int64(3), age}, {"w-0", age}}
	for i := range wantCells {
		typ, obj, err := dec.Decode()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		tbl, ok := obj.(*metav1.Table)
		if !ok {
			t.Fatalf("event %d: %T, want *metav1.Table", i, obj)
		}
		if want := watch.Modified; i == 3 && typ != watch.Added || i < 3 && typ != want {
			t.Fatalf("event %d type %s", i, typ)
		}
		if hasHeaders := len(tbl.ColumnDefinitions) > 0; hasHeaders != (i == 0 || i == 3) {
			t.Fatalf("event %d: %d column definitions", i, len(tbl.ColumnDefinitions))
		}
		if len(tbl.Rows) != 1 {
			t.Fatalf("event %d: %d rows", i, len(tbl.Rows))
		}
		if diff := cmp.Diff(wantCells[i], tbl.Rows[0].Cells); diff != "" {
			t.Fatalf("event %d cells differ (-want +got):\n%s", i, diff)
		}
		if wantRV := fmt.Sprint(20 + i); i < 3 && tbl.ResourceVersion != wantRV {
			t.Fatalf("event %d table resourceVersion %q, want %q", i, tbl.ResourceVersion, wantRV)
		}
	}
	if _, _, err := dec.Decode(); err != io.EOF {
		t.Fatalf("after the events: %v, want EOF", err)
	}
}
