package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The objects ../authn/testdata/sa-tokens.json's tokens are bound to,
// minted with kube-apiserver's own code by authz/testdata/rbacgen/sagen.
const (
	saIssuer = "https://kubernetes.default.svc.cluster.local"
	saNS     = "apps"
)

// TestServiceAccountE2E: tokens minted as kube-apiserver mints them
// (its key, issuer and audience; bound to a Pod with its UID) used by
// client-go informers and kubectl against the real binary: allowed where
// RBAC grants, 403 elsewhere, 401 once the Pod is deleted or recreated
// with a new UID, after expiry, for a wrong issuer, audience or key; a
// legacy token stops working when its Secret is deleted.
func TestServiceAccountE2E(t *testing.T) {
	s := newAuthnSetup(t)
	b, err := os.ReadFile("../authn/testdata/sa-tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var toks map[string]string
	if err := json.Unmarshal(b, &toks); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	putPB := func(key string, obj interface {
		metav1.Object
		runtime.Object
	}) {
		t.Helper()
		if _, err := s.etcd.Client.Put(ctx, key, string(mustProtobuf(t, obj))); err != nil {
			t.Fatal(err)
		}
	}
	meta := func(ns, name, uid string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}
	}
	putPB("/registry/serviceaccounts/apps/reader", &corev1.ServiceAccount{ObjectMeta: meta(saNS, "reader", "sa-uid-1")})
	putPB("/registry/pods/apps/reader-pod", &corev1.Pod{ObjectMeta: meta(saNS, "reader-pod", "pod-uid-1")})
	putPB("/registry/secrets/apps/reader-token", &corev1.Secret{ObjectMeta: meta(saNS, "reader-token", "secret-uid-1"),
		Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"token": []byte(toks["legacy"])}})
	putPB("/registry/minions/node-1", &corev1.Node{ObjectMeta: meta("", "node-1", "node-uid-1")})
	// The service account may read the ConfigMaps of "authn" (a
	// RoleBinding with a ServiceAccount subject), nothing else.
	putRBAC(t, s.etcd, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "authn", Name: "sa-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cm-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: saNS}}})

	url, p := s.startProcess(t, "--service-account-key-file=../authn/testdata/sa.key", "--service-account-issuer="+saIssuer)
	client := func(token string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(&rest.Config{Host: url, BearerToken: token,
			TLSClientConfig: rest.TLSClientConfig{CAFile: s.servingCA.File}})
	}

	// An informer on the token bound to the Pod.
	factory := informers.NewSharedInformerFactoryWithOptions(client(toks["pod"]), 0, informers.WithNamespace("authn"))
	inf := factory.Core().V1().ConfigMaps().Informer()
	added := make(chan string, 10)
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		added <- obj.(*corev1.ConfigMap).Name
	}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	putPB("/registry/configmaps/authn/four", &corev1.ConfigMap{ObjectMeta: meta("authn", "four", "cm-4")})
	for seen := map[string]bool{}; !seen["four"]; {
		select {
		case n := <-added:
			seen[n] = true
		case <-ctx.Done():
			t.Fatalf("the informer did not see ConfigMap four (saw %v)", seen)
		}
	}
	const forbidden = `secrets is forbidden: User "system:serviceaccount:apps:reader" cannot list resource "secrets" in API group "" in the namespace "authn"`
	if _, err := client(toks["pod"]).CoreV1().Secrets("authn").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || err.Error() != forbidden {
		t.Errorf("list secrets: %v; want %q", err, forbidden)
	}
	for _, name := range []string{"secret", "node", "two-audiences", "legacy"} {
		if l, err := client(toks[name]).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 4 {
			t.Errorf("token %s: %v", name, err)
		}
	}
	for _, name := range []string{"expired", "wrong-issuer", "wrong-audience", "wrong-key", "pod-other-uid"} {
		if _, err := client(toks[name]).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			t.Errorf("token %s: %v, want Unauthorized", name, err)
		}
	}

	needKubectl(t)
	ca := "--certificate-authority=" + s.servingCA.File
	out := mustKubectl(t, url, ca, "--token="+toks["pod"], "get", "configmaps", "-n", "authn", "-o", "name")
	if got := strings.Join(strings.Fields(out), " "); got != "configmap/four configmap/one configmap/three configmap/two" {
		t.Errorf("kubectl get configmaps = %q", out)
	}
	if _, stderr, err := kubectl(t, url, ca, "--token="+toks["pod"], "get", "secrets", "-n", "authn"); err == nil ||
		!strings.Contains(stderr, "Error from server (Forbidden): "+forbidden) {
		t.Errorf("kubectl get secrets: %v %q", err, stderr)
	}

	// 401 once the Pod is deleted (within the verified-token cache's
	// second), and still after it is recreated with a new UID.
	unauthorizedWithin := func(token string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for {
			_, err := client(token).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{})
			if apierrors.IsUnauthorized(err) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("still %v after %v; want Unauthorized", err, d)
			}
			time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
		}
	}
	if _, err := s.etcd.Client.Delete(ctx, "/registry/pods/apps/reader-pod"); err != nil {
		t.Fatal(err)
	}
	unauthorizedWithin(toks["pod"], 2*time.Second)
	putPB("/registry/pods/apps/reader-pod", &corev1.Pod{ObjectMeta: meta(saNS, "reader-pod", "pod-uid-2")})
	// Unauthorized for longer than the cache's second: the recreated
	// Pod was read and its UID refused.
	for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if _, err := client(toks["pod"]).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{}); !apierrors.IsUnauthorized(err) {
			t.Fatalf("Pod recreated with a new UID: %v; want Unauthorized", err)
		}
	}
	if _, stderr, err := kubectl(t, url, ca, "--token="+toks["pod"], "get", "configmaps", "-n", "authn"); err == nil ||
		!strings.Contains(stderr, "You must be logged in to the server") {
		t.Errorf("kubectl with the dead Pod's token: %v %q", err, stderr)
	}
	// The legacy token stops with its Secret.
	if _, err := s.etcd.Client.Delete(ctx, "/registry/secrets/apps/reader-token"); err != nil {
		t.Fatal(err)
	}
	unauthorizedWithin(toks["legacy"], 2*time.Second)

	for _, tok := range toks {
		if strings.Contains(p.stderr.String(), tok) {
			t.Fatal("the log shows a token")
		}
	}
}
