package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestForwardAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1): kube-apiserver
// v1.37.2 on the same etcd with --requestheader-* as kubeadm sets them
// (bench/kube-apiserver.sh --front-proxy), lazyapi with
// --upstream-kubeconfig: kubectl create, apply, label, delete through
// lazyapi only, kube-apiserver's audit log naming the user lazyapi
// authenticated (never its front-proxy certificate), and read-your-writes
// over many create-then-get and update-then-list cycles.
func TestForwardAgainstKubeAPIServer(t *testing.T) {
	script, _ := needKubeAPIServer(t)
	needKubectl(t)
	etcd := etcdtest.Start(t)
	k := startKubeAPIServer(t, script, etcd.Endpoint, "--front-proxy")
	kc := t.TempDir() + "/upstream.kubeconfig"
	writeFile(t, kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: kube, cluster: {server: \""+k.url+"\", insecure-skip-tls-verify: true}}]\n"+
		"users: [{name: u, user: {client-certificate: "+k.dir+"/front-proxy/client.crt, client-key: "+k.dir+"/front-proxy/client.key}}]\n"+
		"contexts: [{name: kube, context: {cluster: kube, user: u}}]\ncurrent-context: kube\n"))
	tokens := t.TempDir() + "/tokens.csv"
	writeFile(t, tokens, []byte("tok-alice,alice,uid-alice,\"dev\"\n"))
	port, err := bench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--upstream-kubeconfig="+kc, "--token-auth-file="+tokens,
		"--authorization-mode=AlwaysAllow", "--port="+strconv.Itoa(port), "--plain-port-tokens")
	as := func(args ...string) string { return mustKubectl(t, p.URL, append([]string{"--token", "tok-alice"}, args...)...) }

	as("create", "namespace", "fwd")
	as("create", "configmap", "cm1", "-n", "fwd", "--from-literal=a=b")
	manifest := t.TempDir() + "/cm.yaml"
	writeFile(t, manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm2, namespace: fwd}\ndata: {x: y}\n"))
	as("apply", "-f", manifest)
	as("apply", "--server-side", "-f", manifest)
	as("label", "configmap", "cm1", "-n", "fwd", "team=a")
	if got := as("get", "configmap", "cm1", "-n", "fwd", "-o", "jsonpath={.metadata.labels.team}"); got != "a" {
		t.Errorf("label through lazyapi then get: %q, want a", got)
	}
	as("delete", "configmap", "cm2", "-n", "fwd")
	if out, _, err := kubectl(t, p.URL, "--token", "tok-alice", "get", "configmap", "cm2", "-n", "fwd"); err == nil {
		t.Errorf("cm2 still there after delete through lazyapi: %s", out)
	}

	// kube-apiserver's audit log names alice for every write lazyapi
	// forwarded, never the front-proxy certificate's name.
	audit, err := os.ReadFile(k.dir + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	for line := range strings.Lines(string(audit)) {
		if !strings.Contains(line, `"namespace":"fwd"`) || !strings.Contains(line, `"stage":"ResponseComplete"`) {
			continue
		}
		if strings.Contains(line, `"verb":"create"`) || strings.Contains(line, `"verb":"patch"`) || strings.Contains(line, `"verb":"delete"`) {
			writes++
			if !strings.Contains(line, `"user":{"username":"alice","uid":"uid-alice","groups":["dev","system:authenticated"]`) {
				t.Errorf("audit event of a forwarded write not as alice: %s", line)
			}
		}
		if strings.Contains(line, "front-proxy-client") {
			t.Errorf("audit event names the front-proxy certificate: %s", line)
		}
	}
	if writes < 4 {
		t.Errorf("audit log has %d forwarded writes in namespace fwd, want at least 4", writes)
	}

	// Read your writes: a GET or LIST without resourceVersion through
	// lazyapi sees what a write through lazyapi returned.
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.URL, BearerToken: "tok-alice", QPS: -1})
	ctx := context.Background()
	misses, conflicts := 0, 0
	for i := range 200 {
		cm, err := cs.CoreV1().ConfigMaps("fwd").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ryw-%d", i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		got, err := cs.CoreV1().ConfigMaps("fwd").Get(ctx, cm.Name, metav1.GetOptions{})
		if err != nil || got.ResourceVersion != cm.ResourceVersion {
			misses++
			continue
		}
		got.Data = map[string]string{"i": strconv.Itoa(i)}
		upd, err := cs.CoreV1().ConfigMaps("fwd").Update(ctx, got, metav1.UpdateOptions{})
		if err != nil {
			conflicts++
			continue
		}
		l, err := cs.CoreV1().ConfigMaps("fwd").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + cm.Name})
		if err != nil || len(l.Items) != 1 || l.Items[0].ResourceVersion != upd.ResourceVersion {
			misses++
		}
	}
	if misses != 0 || conflicts != 0 {
		t.Errorf("read-your-writes over 200 cycles: %d misses, %d conflicts; want 0", misses, conflicts)
	}
}
