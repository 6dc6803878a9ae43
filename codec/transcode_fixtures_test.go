package codec

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Fixtures shared by benchmarks and allocation tests: realistic objects in
// kube-apiserver's storage format.

func fixtureMeta(name string) metav1.ObjectMeta {
	created := metav1.NewTime(time.Date(2026, 11, 30, 10, 20, 30, 0, time.UTC))
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         "production",
		UID:               "3f1c2a9e-8d7b-4c55-a0e1-2b9f6d4c8e71",
		Generation:        3,
		CreationTimestamp: created,
		Labels:            map[string]string{"app.kubernetes.io/name": "checkout", "app.kubernetes.io/part-of": "shop", "tier": "backend"},
		Annotations:       map[string]string{"deployment.kubernetes.io/revision": "7", "example.com/owner": "team-payments <payments@example.com>"},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: &created, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app.kubernetes.io/name":{},"f:tier":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}`)},
		}},
	}
}

func fixtureConfigMap() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: fixtureMeta("app-config"), Data: map[string]string{}}
	line := strings.Repeat("key=value; some configuration text ", 30)[:1023] + "\n"
	for i := 0; i < 10; i++ {
		cm.Data["config-"+string(rune('a'+i))+".properties"] = line
	}
	return cm
}

func fixtureSecret() *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: fixtureMeta("app-secret"), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for i := 0; i < 10; i++ {
		v := make([]byte, 1024)
		for j := range v {
			v[j] = byte(i*31 + j*7)
		}
		s.Data["secret-"+string(rune('a'+i))] = v
	}
	return s
}

func fixtureContainer(name, image string) corev1.Container {
	return corev1.Container{
		Name: name, Image: image, Command: []string{"/bin/server"}, Args: []string{"--port=8080", "--log-level=info"},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
		Env: []corev1.EnvVar{
			{Name: "GOMAXPROCS", Value: "2"},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
			{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP}},
			InitialDelaySeconds: 10, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
			TimeoutSeconds: 1, PeriodSeconds: 5, SuccessThreshold: 1, FailureThreshold: 3},
		TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		ImagePullPolicy: corev1.PullIfNotPresent,
		SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
	}
}

func fixturePod() *corev1.Pod {
	t := metav1.NewTime(time.Date(2026, 11, 30, 10, 20, 35, 0, time.UTC))
	p := &corev1.Pod{ObjectMeta: fixtureMeta("checkout-7d9f8b6c5-x2k4p")}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "checkout-7d9f8b6c5", UID: "a1b2c3d4-0000-4000-8000-000000000001", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	p.Spec = corev1.PodSpec{
		Containers:                    []corev1.Container{fixtureContainer("app", "registry.example.com/shop/checkout:1.42.0"), fixtureContainer("sidecar", "registry.example.com/infra/proxy:2.3.1")},
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: ptr.To(int64(30)),
		DNSPolicy:                     corev1.DNSClusterFirst,
		ServiceAccountName:            "checkout",
		NodeName:                      "node-17.example.internal",
		SecurityContext:               &corev1.PodSecurityContext{FSGroup: ptr.To(int64(2000))},
		SchedulerName:                 "default-scheduler",
		Tolerations: []corev1.Toleration{
			{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
			{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
		},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, DefaultMode: ptr.To(int32(420))}}},
			{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Gi"))}}},
			{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{DefaultMode: ptr.To(int32(420)), Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To(int64(3607)), Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}},
		},
		PriorityClassName:  "high",
		Priority:           ptr.To(int32(1000)),
		EnableServiceLinks: ptr.To(true),
		PreemptionPolicy:   ptr.To(corev1.PreemptLowerPriority),
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: t},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: t},
		},
		HostIP: "10.0.3.17", HostIPs: []corev1.HostIP{{IP: "10.0.3.17"}},
		PodIP: "10.244.7.33", PodIPs: []corev1.PodIP{{IP: "10.244.7.33"}},
		StartTime: &t,
		QOSClass:  corev1.PodQOSBurstable,
	}
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Ready: true, Started: ptr.To(true), Image: c.Image, ImageID: "registry.example.com/x@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			ContainerID: "containerd://4f5e6d7c8b9a", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		})
	}
	return p
}

type fixture struct {
	name   string
	obj    runtime.Object
	stored []byte
}

func fixtures(t testing.TB) []fixture {
	fs := []fixture{{name: "ConfigMap", obj: fixtureConfigMap()}, {name: "Secret", obj: fixtureSecret()}, {name: "Pod", obj: fixturePod()}}
	for i := range fs {
		b, err := storagefmt.Protobuf(fs[i].obj)
		if err != nil {
			t.Fatal(err)
		}
		fs[i].stored = b
	}
	return fs
}

// TestFixturesMatchOracle keeps the benchmark inputs honest: AppendJSON on
// them is byte-identical to apimachinery.
func TestFixturesMatchOracle(t *testing.T) {
	s := DefaultSchema()
	for _, f := range fixtures(t) {
		o, err := Unwrap(f.stored)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := oracleJSONOf(t, f.stored, schema.FromAPIVersionAndKind(o.APIVersion, o.Kind), 12345)
		got, err := s.AppendJSON(nil, o, 12345, JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: AppendJSON differs from apimachinery: %s\n got %s\nwant %s", f.name, jsonDiff(got, want), got, want)
		}
	}
}

// TestConcurrentUse shares one Schema between goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	s := DefaultSchema()
	fs := fixtures(t)
	want := make([][]byte, len(fs))
	for i, f := range fs {
		o, _ := Unwrap(f.stored)
		want[i], _ = s.AppendJSON(nil, o, 77, JSONOptions{})
	}
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			var buf []byte
			var m Meta
			for it := 0; it < 50; it++ {
				for i, f := range fs {
					o, err := Unwrap(f.stored)
					if err == nil {
						buf, err = s.AppendJSON(buf[:0], o, 77, JSONOptions{})
					}
					if err == nil {
						err = s.PeekMeta(o, &m)
					}
					if err == nil && string(buf) != string(want[i]) {
						err = fmt.Errorf("%s: concurrent AppendJSON differs", f.name)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
