package demo

import (
	"crypto/sha1"
	"fmt"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

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
