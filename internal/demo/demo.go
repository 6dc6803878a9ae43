// Package demo builds a small, realistic cluster's worth of objects and
// writes them into etcd exactly as kube-apiserver stores them.
//
// Built-in objects are protobuf in the k8s\x00 envelope; the
// CustomResourceDefinition is JSON at apiextensions.k8s.io/v1beta1 (what
// kube-apiserver's apiextensions storage writes: a JSON LegacyCodec with a
// v1beta1 encode versioner); custom resources are JSON.
package demo

import (
	"context"
	"crypto/sha1"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Names of the demo data, for tests and the printed hints.
const (
	// AppNamespace holds the Deployment, its ReplicaSet and Pods, the
	// Service and the custom resources.
	AppNamespace = "demo-app"
	// ConfigMapsGenerated is the number of generated ConfigMaps, spread over
	// TeamNamespaces and AppNamespace; every namespace also has its
	// kube-root-ca.crt ConfigMap.
	ConfigMapsGenerated = 1000

	CRDName     = "crontabs.stable.example.com"
	CRDGroup    = "stable.example.com"
	CRDVersion  = "v1"
	CRDPlural   = "crontabs"
	CRDKind     = "CronTab"
	CRDCount    = 20
	NodeName    = "demo-node-1"
	Deployment  = "web"
	ReplicaSet  = "web-5d8f7c9b6d"
	PodReplicas = 3
)

// TeamNamespaces hold most of the ConfigMaps and Secrets.
var TeamNamespaces = []string{"team-a", "team-b", "team-c"}

// Namespaces lists every demo namespace, system ones included.
var Namespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease", AppNamespace, "team-a", "team-b", "team-c"}

// Object is one demo object as stored in etcd.
type Object struct {
	// Resource is the plural resource, e.g. "configmaps", "crontabs".
	Resource  string
	Namespace string // empty for cluster-scoped objects
	Name      string
	Labels    map[string]string
	Key       string // full etcd key under the prefix
	Value     []byte // stored bytes
}

// Objects returns the demo objects under prefix (e.g. "/registry"), with
// creation times before now. The result is the same for the same now.
func Objects(prefix string, now time.Time) ([]Object, error) {
	b := &builder{prefix: prefix, now: now.UTC().Truncate(time.Second)}
	b.namespaces()
	b.node()
	b.nodeLease()
	b.configMaps()
	b.secrets()
	b.serviceAccounts()
	b.services()
	b.workload()
	b.crd()
	b.customResources()
	if b.err != nil {
		return nil, b.err
	}
	return b.out, nil
}

// Empty reports whether etcd has no key under prefix.
func Empty(ctx context.Context, cli *clientv3.Client, prefix string) (bool, error) {
	resp, err := cli.Get(ctx, strings.TrimSuffix(prefix, "/")+"/", clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("cannot read etcd prefix %q: %w", prefix, err)
	}
	return len(resp.Kvs) == 0, nil
}

// Seed writes the demo objects under prefix, one put per object (so each has
// its own resourceVersion, as through the API), namespaces and the CRD first.
// It overwrites existing keys; callers check Empty first. It returns the
// number of objects written.
func Seed(ctx context.Context, cli *clientv3.Client, prefix string, now time.Time) (int, error) {
	objs, err := Objects(prefix, now)
	if err != nil {
		return 0, err
	}
	first, rest := objs[:0:0], objs[:0:0]
	for _, o := range objs {
		if o.Resource == "namespaces" || o.Resource == "customresourcedefinitions" {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	if err := put(ctx, cli, first); err != nil {
		return 0, err
	}
	if err := put(ctx, cli, rest); err != nil {
		return 0, err
	}
	return len(objs), nil
}

// put writes objs with a few concurrent workers.
func put(ctx context.Context, cli *clientv3.Client, objs []Object) error {
	const workers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan Object)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range next {
				if _, err := cli.Put(ctx, o.Key, string(o.Value)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("cannot write %q: %w", o.Key, err)
					}
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for _, o := range objs {
		select {
		case next <- o:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

type builder struct {
	prefix string
	now    time.Time
	out    []Object
	err    error
}

// uid returns a stable UUID-shaped id for a key.
func uid(key string) types.UID {
	h := sha1.Sum([]byte(key))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

func (b *builder) ago(d time.Duration) metav1.Time { return metav1.NewTime(b.now.Add(-d)) }

// meta fills the object metadata kube-apiserver sets on create.
func (b *builder) meta(resourcePrefix, ns, name string, age time.Duration, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         ns,
		UID:               uid(storagefmt.Key(b.prefix, resourcePrefix, ns, name)),
		CreationTimestamp: b.ago(age),
		Labels:            labels,
	}
}

// managed returns a managedFields entry like the one kubectl apply leaves.
func (b *builder) managed(manager, apiVersion string, age time.Duration, fields string) []metav1.ManagedFieldsEntry {
	t := b.ago(age)
	return []metav1.ManagedFieldsEntry{{
		Manager:    manager,
		Operation:  metav1.ManagedFieldsOperationUpdate,
		APIVersion: apiVersion,
		Time:       &t,
		FieldsType: "FieldsV1",
		FieldsV1:   &metav1.FieldsV1{Raw: []byte(fields)},
	}}
}

// add encodes obj (protobuf for built-ins, JSON for *unstructured) and
// appends it.
func (b *builder) add(resource, resourcePrefix string, obj runtime.Object, m metav1.Object) {
	if b.err != nil {
		return
	}
	var (
		val []byte
		err error
	)
	if _, ok := obj.(*unstructured.Unstructured); ok {
		val, err = storagefmt.JSON(obj)
	} else {
		val, err = storagefmt.Protobuf(obj)
	}
	if err != nil {
		b.err = fmt.Errorf("cannot encode demo %s %s/%s: %w", resource, m.GetNamespace(), m.GetName(), err)
		return
	}
	b.out = append(b.out, Object{
		Resource:  resource,
		Namespace: m.GetNamespace(),
		Name:      m.GetName(),
		Labels:    m.GetLabels(),
		Key:       storagefmt.Key(b.prefix, resourcePrefix, m.GetNamespace(), m.GetName()),
		Value:     val,
	})
}

const day = 24 * time.Hour

func (b *builder) namespaces() {
	for i, ns := range Namespaces {
		age := 30 * day
		if i >= 4 {
			age = time.Duration(20-i) * day
		}
		o := &corev1.Namespace{
			ObjectMeta: b.meta("namespaces", "", ns, age, map[string]string{"kubernetes.io/metadata.name": ns}),
			Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		}
		o.ManagedFields = b.managed("kube-apiserver", "v1", age, `{"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/metadata.name":{}}}}`)
		b.add("namespaces", "namespaces", o, o)
	}
}

func (b *builder) node() {
	age := 30 * day
	o := &corev1.Node{
		ObjectMeta: b.meta("minions", "", NodeName, age, map[string]string{
			"beta.kubernetes.io/arch":          "amd64",
			"beta.kubernetes.io/os":            "linux",
			"kubernetes.io/arch":               "amd64",
			"kubernetes.io/hostname":           NodeName,
			"kubernetes.io/os":                 "linux",
			"node.kubernetes.io/instance-type": "standard-4",
		}),
		Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}, ProviderID: "demo://" + NodeName},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("16393180Ki"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("101445540Ki"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("16290780Ki"),
				corev1.ResourcePods:             resource.MustParse("110"),
				corev1.ResourceEphemeralStorage: resource.MustParse("93492209510"),
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: b.ago(time.Minute), LastTransitionTime: b.ago(age), Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: b.ago(time.Minute), LastTransitionTime: b.ago(age), Reason: "KubeletHasNoDiskPressure", Message: "kubelet has no disk pressure"},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: b.ago(time.Minute), LastTransitionTime: b.ago(age), Reason: "KubeletHasSufficientPID", Message: "kubelet has sufficient PID available"},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: b.ago(time.Minute), LastTransitionTime: b.ago(age - time.Minute), Reason: "KubeletReady", Message: "kubelet is posting ready status"},
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "10.0.0.10"},
				{Type: corev1.NodeHostName, Address: NodeName},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               "4f7c1d8e2a9b4c3d8e7f6a5b4c3d2e1f",
				SystemUUID:              "4f7c1d8e-2a9b-4c3d-8e7f-6a5b4c3d2e1f",
				BootID:                  "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
				KernelVersion:           "6.8.0-45-generic",
				OSImage:                 "Debian GNU/Linux 12 (bookworm)",
				ContainerRuntimeVersion: "containerd://2.1.4",
				KubeletVersion:          "v1.37.2",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
			Images: []corev1.ContainerImage{
				{Names: []string{"docker.io/library/nginx@sha256:2d194184b067db3598771b4cf326cfe6ad5051937ba1132b8b7d4b0184e0d0a6", "docker.io/library/nginx:1.27"}, SizeBytes: 72955450},
				{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 320368},
			},
		},
	}
	b.add("nodes", "minions", o, o)
}

// configMaps spreads ConfigMapsGenerated ConfigMaps over the team and app
// namespaces, with labels app, env and team, and adds kube-root-ca.crt to
// every namespace.
// nodeLease writes the kubelet's heartbeat Lease of the node (kubectl
// describe node shows it; Churn renews it).
func (b *builder) nodeLease() {
	o := &coordinationv1.Lease{
		ObjectMeta: b.meta("leases", "kube-node-lease", NodeName, 30*day, nil),
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr(NodeName),
			LeaseDurationSeconds: ptr(int32(40)),
			RenewTime:            &metav1.MicroTime{Time: b.now.Add(-5 * time.Second)},
		},
	}
	o.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: NodeName, UID: uid(storagefmt.Key(b.prefix, "minions", "", NodeName))}}
	o.ManagedFields = b.managed("kubelet", "coordination.k8s.io/v1", 30*day, `{"f:metadata":{"f:ownerReferences":{}},"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`)
	b.add("leases", "leases", o, o)
}

func (b *builder) configMaps() {
	nss := append(append([]string(nil), TeamNamespaces...), AppNamespace)
	envs := []string{"prod", "staging", "dev"}
	for i := range ConfigMapsGenerated {
		ns := nss[i%len(nss)]
		app := fmt.Sprintf("svc-%02d", i%20)
		env := envs[i%len(envs)]
		name := fmt.Sprintf("%s-%s-config-%04d", app, env, i)
		age := time.Duration(i%29+1)*day + time.Duration(i)*time.Minute
		data := map[string]string{
			"LOG_LEVEL":   []string{"info", "debug", "warn"}[i%3],
			"LISTEN_ADDR": fmt.Sprintf(":%d", 8000+i%100),
			"application.properties": fmt.Sprintf(
				"server.port=%d\nspring.application.name=%s\nmanagement.endpoints.web.exposure.include=health,info,prometheus\nfeature.flag.%d=%t\n",
				8000+i%100, app, i, i%2 == 0),
		}
		if i%10 == 0 {
			// Some larger values, like real config bundles.
			data["rules.yaml"] = strings.Repeat(fmt.Sprintf("- alert: HighErrorRate%d\n  expr: rate(http_requests_total{code=~\"5..\",app=%q}[5m]) > 0.05\n  for: 10m\n", i, app), 20)
		}
		labels := map[string]string{"app": app, "env": env, "team": ns, "app.kubernetes.io/managed-by": "kubectl"}
		o := &corev1.ConfigMap{
			ObjectMeta: b.meta("configmaps", ns, name, age, labels),
			Data:       data,
		}
		o.Annotations = map[string]string{"demo.lazyapi.io/owner": ns + "@example.com"}
		o.ManagedFields = b.managed("kubectl-client-side-apply", "v1", age,
			`{"f:data":{".":{},"f:LISTEN_ADDR":{},"f:LOG_LEVEL":{},"f:application.properties":{}},"f:metadata":{"f:annotations":{".":{},"f:demo.lazyapi.io/owner":{}},"f:labels":{".":{},"f:app":{},"f:env":{},"f:team":{}}}}`)
		b.add("configmaps", "configmaps", o, o)
	}
	for _, ns := range Namespaces {
		o := &corev1.ConfigMap{
			ObjectMeta: b.meta("configmaps", ns, "kube-root-ca.crt", 30*day, nil),
			Data:       map[string]string{"ca.crt": demoCA},
		}
		o.Annotations = map[string]string{"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}
		o.ManagedFields = b.managed("kube-controller-manager", "v1", 30*day, `{"f:data":{".":{},"f:ca.crt":{}},"f:metadata":{"f:annotations":{".":{},"f:kubernetes.io/description":{}}}}`)
		b.add("configmaps", "configmaps", o, o)
	}
}

func (b *builder) secrets() {
	for i, ns := range append(append([]string(nil), TeamNamespaces...), AppNamespace) {
		db := &corev1.Secret{
			ObjectMeta: b.meta("secrets", ns, "db-credentials", time.Duration(10+i)*day, map[string]string{"app": "db"}),
			Type:       corev1.SecretTypeOpaque,
			Data: map[string][]byte{
				"username": []byte("app_" + strings.ReplaceAll(ns, "-", "_")),
				"password": []byte(fmt.Sprintf("s3cr3t-%x", sha1.Sum([]byte(ns)))),
			},
		}
		b.add("secrets", "secrets", db, db)
		tok := &corev1.Secret{
			ObjectMeta: b.meta("secrets", ns, "api-token", time.Duration(5+i)*day, map[string]string{"app": "gateway"}),
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{"token": []byte(fmt.Sprintf("tok-%x", sha1.Sum([]byte("token"+ns))))},
		}
		b.add("secrets", "secrets", tok, tok)
	}
	tls := &corev1.Secret{
		ObjectMeta: b.meta("secrets", AppNamespace, "web-tls", 7*day, map[string]string{"app": Deployment}),
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: []byte(demoCA), corev1.TLSPrivateKeyKey: []byte("-----BEGIN PRIVATE KEY-----\nZGVtbyBrZXksIG5vdCBhIHJlYWwgb25l\n-----END PRIVATE KEY-----\n")},
	}
	b.add("secrets", "secrets", tls, tls)
	pull := &corev1.Secret{
		ObjectMeta: b.meta("secrets", AppNamespace, "registry-pull", 7*day, nil),
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"registry.example.com":{"auth":"ZGVtbzpkZW1v"}}}`)},
	}
	b.add("secrets", "secrets", pull, pull)
}

func (b *builder) serviceAccounts() {
	for _, ns := range Namespaces {
		o := &corev1.ServiceAccount{ObjectMeta: b.meta("serviceaccounts", ns, "default", 30*day, nil)}
		b.add("serviceaccounts", "serviceaccounts", o, o)
	}
}

func (b *builder) services() {
	single := corev1.IPFamilyPolicySingleStack
	cluster := corev1.ServiceInternalTrafficPolicyCluster
	k := &corev1.Service{
		ObjectMeta: b.meta("services/specs", "default", "kubernetes", 30*day, map[string]string{"component": "apiserver", "provider": "kubernetes"}),
		Spec: corev1.ServiceSpec{
			Ports:                 []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443, TargetPort: intstr.FromInt32(6443)}},
			ClusterIP:             "10.96.0.1",
			ClusterIPs:            []string{"10.96.0.1"},
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        &single,
			InternalTrafficPolicy: &cluster,
		},
	}
	b.add("services", "services/specs", k, k)
	web := &corev1.Service{
		ObjectMeta: b.meta("services/specs", AppNamespace, Deployment, 7*day, map[string]string{"app": Deployment}),
		Spec: corev1.ServiceSpec{
			Ports:                 []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
			Selector:              map[string]string{"app": Deployment},
			ClusterIP:             "10.96.12.34",
			ClusterIPs:            []string{"10.96.12.34"},
			Type:                  corev1.ServiceTypeClusterIP,
			SessionAffinity:       corev1.ServiceAffinityNone,
			IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
			IPFamilyPolicy:        &single,
			InternalTrafficPolicy: &cluster,
		},
	}
	b.add("services", "services/specs", web, web)
}

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

// crd writes the CronTab CustomResourceDefinition as kube-apiserver stores
// it: JSON, apiextensions.k8s.io/v1beta1, with the schema and printer
// columns hoisted to spec.validation and spec.additionalPrinterColumns (the
// v1 -> v1beta1 conversion does that when every version shares them).
func (b *builder) crd() {
	age := 14 * day
	created := b.ago(age).UTC().Format(time.RFC3339)
	names := map[string]any{
		"plural":     CRDPlural,
		"singular":   "crontab",
		"shortNames": []any{"ct"},
		"kind":       CRDKind,
		"listKind":   CRDKind + "List",
		"categories": []any{"all"},
	}
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"spec": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"cronSpec": map[string]any{"type": "string"},
					"image":    map[string]any{"type": "string"},
					"replicas": map[string]any{"type": "integer"},
				},
			},
			"status": map[string]any{
				"type":       "object",
				"properties": map[string]any{"lastScheduleTime": map[string]any{"type": "string", "format": "date-time"}},
			},
		},
	}
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1beta1",
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name":              CRDName,
			"uid":               string(uid(storagefmt.Key(b.prefix, "apiextensions.k8s.io/customresourcedefinitions", "", CRDName))),
			"generation":        int64(1),
			"creationTimestamp": created,
		},
		"spec": map[string]any{
			"group":   CRDGroup,
			"version": CRDVersion,
			"names":   names,
			"scope":   "Namespaced",
			"validation": map[string]any{
				"openAPIV3Schema": schema,
			},
			"subresources": map[string]any{"status": map[string]any{}},
			"versions": []any{
				map[string]any{"name": CRDVersion, "served": true, "storage": true},
			},
			"additionalPrinterColumns": []any{
				map[string]any{"name": "Spec", "type": "string", "JSONPath": ".spec.cronSpec"},
				map[string]any{"name": "Replicas", "type": "integer", "JSONPath": ".spec.replicas"},
				map[string]any{"name": "Age", "type": "date", "JSONPath": ".metadata.creationTimestamp"},
			},
			"conversion":            map[string]any{"strategy": "None"},
			"preserveUnknownFields": false,
		},
		"status": map[string]any{
			"conditions": []any{
				map[string]any{"type": "NamesAccepted", "status": "True", "lastTransitionTime": created, "reason": "NoConflicts", "message": "no conflicts found"},
				map[string]any{"type": "Established", "status": "True", "lastTransitionTime": created, "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
			},
			"acceptedNames":  names,
			"storedVersions": []any{CRDVersion},
		},
	}}
	b.add("customresourcedefinitions", "apiextensions.k8s.io/customresourcedefinitions", o, o)
}

func (b *builder) customResources() {
	specs := []string{"*/5 * * * *", "0 * * * *", "30 2 * * *", "0 0 * * 0"}
	for i := range CRDCount {
		name := fmt.Sprintf("backup-%02d", i)
		age := time.Duration(i+1) * time.Hour
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": CRDGroup + "/" + CRDVersion,
			"kind":       CRDKind,
			"metadata": map[string]any{
				"name":              name,
				"namespace":         AppNamespace,
				"uid":               string(uid(storagefmt.Key(b.prefix, CRDGroup+"/"+CRDPlural, AppNamespace, name))),
				"generation":        int64(1),
				"creationTimestamp": b.ago(age).UTC().Format(time.RFC3339),
				"labels":            map[string]any{"app": "backup", "tier": []string{"gold", "silver"}[i%2]},
			},
			"spec": map[string]any{
				"cronSpec": specs[i%len(specs)],
				"image":    "registry.example.com/backup:1.4." + fmt.Sprint(i%3),
				"replicas": int64(i%3 + 1),
			},
			"status": map[string]any{"lastScheduleTime": b.ago(5 * time.Minute).UTC().Format(time.RFC3339)},
		}}
		b.add(CRDPlural, CRDGroup+"/"+CRDPlural, o, o)
	}
}

// Count returns how many objs have the resource and, if ns is not empty,
// that namespace.
func Count(objs []Object, resource, ns string) int {
	n := 0
	for _, o := range objs {
		if o.Resource == resource && (ns == "" || o.Namespace == ns) {
			n++
		}
	}
	return n
}

// Names returns the sorted names of objs with the resource in ns ("" = all).
func Names(objs []Object, resource, ns string) []string {
	var out []string
	for _, o := range objs {
		if o.Resource == resource && (ns == "" || o.Namespace == ns) {
			out = append(out, o.Name)
		}
	}
	sort.Strings(out)
	return out
}

func ptr[T any](v T) *T { return &v }

// demoCA is a self-signed CA certificate that only looks the part.
const demoCA = `-----BEGIN CERTIFICATE-----
MIIDBTCCAe2gAwIBAgIIJ0y4QzdDKWcwDQYJKoZIhvcNAQELBQAwFTETMBEGA1UE
AxMKa3ViZXJuZXRlczAeFw0yNjExMDIxMjAwMDBaFw0zNjEwMzExMjA1MDBaMBUx
EzARBgNVBAMTCmt1YmVybmV0ZXMwggEiMA0GCSqGSIb3DQEBAQUAA4IBDwAwggEK
AoIBAQDdemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDem
oDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoD
emoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemoDemo
AgMBAAGjWTBXMA4GA1UdDwEB/wQEAwICpDAPBgNVHRMBAf8EBTADAQH/MB0GA1Ud
DgQWBBTdemoDemoDemoDemoDemoDemoDemoDemowFQYDVR0RBA4wDIIKa3ViZXJu
ZXRlczANBgkqhkiG9w0BAQsFAAOCAQEAdemoDemoDemoDemoDemoDemoDemoDemoDe
-----END CERTIFICATE-----
`
