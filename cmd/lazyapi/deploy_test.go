package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// deployDir holds the manifests operators apply (docs/operating.md, "Deploying
// lazyapi").
const deployDir = "../../deploy"

// manifestFiles are the deploy/ files that hold Kubernetes objects; the
// kubeconfig, the dashboard and the alert rules are checked on their own.
var manifestFiles = []string{"static-pod.yaml", "static-pod-forward.yaml", "deployment.yaml", "rbac.yaml"}

// decodeManifests decodes every YAML document of file strictly (unknown
// or duplicate fields are errors) with client-go's scheme (decodeAll), and
// requires every kind to be one of the scheme's.
func decodeManifests(t *testing.T, file string) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, file))
	if err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, file, data)
	for i, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			t.Fatalf("%s: document %d is a %s, not a kind of client-go's scheme", file, i, u.GroupVersionKind())
		}
	}
	if len(objs) == 0 {
		t.Fatalf("%s: no objects", file)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

func TestDeployManifestsDecode(t *testing.T) {
	kinds := map[string]bool{}
	for _, f := range manifestFiles {
		for _, o := range decodeManifests(t, f) {
			gvk, _, err := scheme.Scheme.ObjectKinds(o)
			if err != nil {
				t.Fatal(err)
			}
			kinds[gvk[0].Kind] = true
		}
	}
	for _, k := range []string{"Pod", "Deployment", "Service", "PodDisruptionBudget", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		if !kinds[k] {
			t.Errorf("deploy/ has no %s", k)
		}
	}
}

// TestDeployStaticPod checks what the static Pod promises: host network,
// node-critical priority, non-root with a read-only root filesystem,
// probes on /livez and /readyz, and --memory-limit below the container's
// memory limit.
func TestDeployStaticPod(t *testing.T) {
	objs := decodeManifests(t, "static-pod.yaml")
	pod, ok := objs[0].(*corev1.Pod)
	if !ok || len(objs) != 1 {
		t.Fatalf("static-pod.yaml holds %d objects, the first a %T; want one Pod", len(objs), objs[0])
	}
	if !pod.Spec.HostNetwork {
		t.Error("static Pod: hostNetwork is not true")
	}
	if pod.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("static Pod: priorityClassName %q, want system-node-critical", pod.Spec.PriorityClassName)
	}
	checkPodSpec(t, "static Pod", &pod.Spec)
	args := containerArgs(pod.Spec.Containers[0])
	if !strings.HasPrefix(flagValue(args, "etcd-servers"), "https://127.0.0.1:2379") {
		t.Errorf("static Pod: --etcd-servers=%s does not start with the local member", flagValue(args, "etcd-servers"))
	}
	if got := flagValue(args, "etcd-preferred-server"); got != "https://127.0.0.1:2379" {
		t.Errorf("static Pod: --etcd-preferred-server=%q, want the local member https://127.0.0.1:2379", got)
	}
	// kube-apiserver's manifest (kubeadm) names these files.
	for flag, want := range map[string]string{
		"etcd-cafile":   "/etc/kubernetes/pki/etcd/ca.crt",
		"etcd-certfile": "/etc/kubernetes/pki/apiserver-etcd-client.crt",
		"etcd-keyfile":  "/etc/kubernetes/pki/apiserver-etcd-client.key",
	} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("static Pod: --%s=%s, want kube-apiserver's %s", flag, got, want)
		}
	}
}

func TestDeployDeployment(t *testing.T) {
	var dep *appsv1.Deployment
	for _, o := range decodeManifests(t, "deployment.yaml") {
		if d, ok := o.(*appsv1.Deployment); ok {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("deployment.yaml has no Deployment")
	}
	checkPodSpec(t, "Deployment", &dep.Spec.Template.Spec)
	if n := len(strings.Split(flagValue(containerArgs(dep.Spec.Template.Spec.Containers[0]), "etcd-servers"), ",")); n < 3 {
		t.Errorf("Deployment: --etcd-servers names %d members, want every member (3)", n)
	}
}

// checkPodSpec checks the properties both variants share.
func checkPodSpec(t *testing.T, what string, spec *corev1.PodSpec) {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", what, len(spec.Containers))
	}
	c := spec.Containers[0]
	psc, csc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: not runAsNonRoot with a non-zero runAsUser", what)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root filesystem is not read-only", what)
	}
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", what)
	}
	for probe, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		want := map[string]string{"liveness": "/livez", "readiness": "/readyz"}[probe]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s: %s probe is not an HTTP GET of %s", what, probe, want)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("%s: no CPU and memory requests", what)
	}
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() {
		t.Fatalf("%s: no memory limit", what)
	}
	args := containerArgs(c)
	ml, err := resource.ParseQuantity(flagValue(args, "memory-limit"))
	if err != nil || ml.IsZero() {
		t.Fatalf("%s: --memory-limit=%q is not a quantity: %v", what, flagValue(args, "memory-limit"), err)
	}
	// GOMEMLIMIT is soft: leave at least a tenth of the container's limit
	// for what the Go runtime does not count or cannot return in time.
	if ml.Value() > limit.Value()*9/10 {
		t.Errorf("%s: --memory-limit=%s is not below 90%% of the container's memory limit %s", what, ml.String(), limit.String())
	}
	checkFlagsAccepted(t, what, args)
}

// containerArgs returns the lazyapi flags of c: its command after the
// binary, then its args.
func containerArgs(c corev1.Container) []string {
	var args []string
	if len(c.Command) > 0 {
		args = append(args, c.Command[1:]...)
	}
	return append(args, c.Args...)
}

// flagValue returns the value of --name=value in args ("" when absent).
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// checkFlagsAccepted parses args with lazyapi's own flag parsing, with the
// files they name replaced by real ones of the right kind, so that every
// flag, value and combination in a manifest is one lazyapi starts with.
func checkFlagsAccepted(t *testing.T, what string, args []string) {
	t.Helper()
	ca := testpki.NewCA(t, "deploy-test-ca")
	serving, etcdClient := ca.Server(t), ca.Client(t, "lazyapi")
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("token1,reader,uid1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"etcd-cafile":          ca.File,
		"etcd-certfile":        etcdClient.CertFile,
		"etcd-keyfile":         etcdClient.KeyFile,
		"tls-cert-file":        serving.CertFile,
		"tls-private-key-file": serving.KeyFile,
		"client-ca-file":       ca.File,
		"token-auth-file":      tokens,
		// An EC private key file holds the public key too.
		"service-account-key-file": serving.KeyFile,
		"upstream-kubeconfig":      upstreamKubeconfig(t),
	}
	local := make([]string, len(args))
	for i, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if f, ok := files[name]; ok {
			a = "--" + name + "=" + f
		}
		local[i] = a
	}
	c, err := parseFlags(local)
	if err != nil {
		t.Errorf("%s: lazyapi refuses its flags: %v\nflags: %s", what, err, strings.Join(args, " "))
		return
	}
	// Credentials sent to a plain port travel in clear text (issue 23).
	if c.Serving.port != 0 {
		t.Errorf("%s: serves plain HTTP on --port %d (bound to --bind-address %s): want --port=0", what, c.Serving.port, c.Serving.bindAddress)
	}
	if c.Serving.securePort == 0 {
		t.Errorf("%s: no --secure-port", what)
	}
}

// TestDeployKubeconfig decodes the example kubeconfig strictly and checks it
// with clientcmd as kubectl loads it.
func TestDeployKubeconfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "kubeconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v1 clientcmdv1.Config
	if err := yaml.UnmarshalStrict(data, &v1); err != nil {
		t.Fatalf("kubeconfig.yaml does not decode strictly: %v", err)
	}
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatalf("clientcmd.Load(kubeconfig.yaml) = %v", err)
	}
	// The in-cluster entries name files of a Pod: point them at real ones.
	ca := testpki.NewCA(t, "deploy-test-ca")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("a-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		if c.CertificateAuthority != "" {
			c.CertificateAuthority = ca.File
		}
	}
	for _, u := range cfg.AuthInfos {
		if u.TokenFile != "" {
			u.TokenFile = token
		}
	}
	if err := clientcmd.Validate(*cfg); err != nil {
		t.Fatalf("kubeconfig.yaml is not valid: %v", err)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatalf("kubeconfig.yaml gives no client config: %v", err)
	}
	if !strings.HasPrefix(rc.Host, "https://") {
		t.Errorf("kubeconfig.yaml server %q is not https", rc.Host)
	}
	// A controller that writes (forwarding): its own context and user,
	// a client certificate.
	ctx, ok := cfg.Contexts["lazyapi-controller"]
	if !ok {
		t.Fatal("kubeconfig.yaml has no lazyapi-controller context")
	}
	rc, err = clientcmd.NewNonInteractiveClientConfig(*cfg, "lazyapi-controller", nil, nil).ClientConfig()
	if err != nil {
		t.Fatalf("lazyapi-controller: %v", err)
	}
	if ctx.AuthInfo == "reader" || len(rc.CertData) == 0 || rc.Host != cfg.Clusters["lazyapi"].Server {
		t.Errorf("lazyapi-controller: user %q, client certificate %d bytes, server %q", ctx.AuthInfo, len(rc.CertData), rc.Host)
	}
}
