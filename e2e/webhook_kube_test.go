package e2e

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// TestWebhookAgainstKubeAPIServer runs kube-apiserver v1.37.2 (built by
// bench/kube-apiserver.sh) and the lazyapi binary with
// --authorization-mode=Webhook and the token webhook, both against the
// same HTTPS review server, and sends both the same requests: the
// SubjectAccessReviews each sends (the attributes: verbs, names from
// fieldSelector=metadata.name, selectors, subresources, non-resource
// paths, impersonation) and the 403 Statuses must be equal. Gated (needs
// the kube-apiserver build):
//
//	LAZYAPI_KUBEAPISERVER=1 go test ./e2e -run TestWebhookAgainstKubeAPIServer -v
func TestWebhookAgainstKubeAPIServer(t *testing.T) {
	_, bin := needKubeAPIServer(t)
	etcd := etcdtest.Start(t)
	rs := reviewtest.Start(t)
	rs.Authenticate = func(token string) (authenticationv1.UserInfo, bool, string) {
		if token == aliceToken {
			return authenticationv1.UserInfo{Username: "alice", UID: "alice-uid", Groups: []string{"oidc:devs"},
				Extra: map[string]authenticationv1.ExtraValue{"scopes": {"read"}}}, true, ""
		}
		return authenticationv1.UserInfo{}, false, ""
	}
	rs.Authorize = func(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		if ra := spec.ResourceAttributes; ra != nil && ra.Verb == "impersonate" {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		}
		return authorizationv1.SubjectAccessReviewStatus{Reason: "no rule for " + spec.User}
	}
	dir := t.TempDir()
	authnCfg := rs.Kubeconfig(t, dir, "authn", reviewtest.TokenReviewPath)
	authzCfg := rs.Kubeconfig(t, dir, "authz", reviewtest.SubjectAccessReviewPath)
	webhookFlags := []string{
		"--authentication-token-webhook-config-file=" + authnCfg, "--authentication-token-webhook-version=v1",
		"--authorization-mode=Webhook", "--authorization-webhook-config-file=" + authzCfg, "--authorization-webhook-version=v1",
		"--authorization-webhook-cache-authorized-ttl=0", "--authorization-webhook-cache-unauthorized-ttl=0",
	}

	// kube-apiserver, as bench/kube-apiserver.sh starts it, with the
	// webhooks instead of AlwaysAllow.
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	writeFile(t, filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	writeFile(t, filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	writeFile(t, filepath.Join(dir, "tokens.csv"), []byte("masters-token,admin,admin-uid,system:masters\n"))
	kport := freePort(t)
	klog, err := os.Create(filepath.Join(dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer klog.Close()
	cmd := exec.Command(bin, append([]string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kport), "--cert-dir=" + filepath.Join(dir, "certs"),
		"--etcd-servers=" + etcd.Endpoint, "--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(dir, "sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--endpoint-reconciler-type=none", "--enable-priority-and-fairness=false", "--profiling=false", "--v=0"}, webhookFlags...)...)
	cmd.Stdout, cmd.Stderr = klog, klog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // loopback test servers
	kube := "https://127.0.0.1:" + strconv.Itoa(kport)
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequest("GET", kube+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer masters-token")
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(klog.Name())
			t.Fatalf("kube-apiserver not ready in 90 s:\n%s", b)
		}
		time.Sleep(200 * time.Millisecond) // polling kube-apiserver's readiness to a deadline
	}

	ca := testpki.NewCA(t, "serving")
	srv := ca.Server(t)
	lport := freePort(t)
	p := start(t, append([]string{"--etcd-servers=" + etcd.Endpoint, "--secure-port=" + strconv.Itoa(lport),
		"--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}, webhookFlags...)...)
	lazy := "https://127.0.0.1:" + strconv.Itoa(lport)
	if _, ok := p.stderr.wait(time.Now().Add(10*time.Second), func(l string) bool { return strings.Contains(l, `"secureURL":"`+lazy+`"`) }); !ok {
		t.Fatalf("lazyapi did not start:\n%s", p.stderr)
	}

	type request struct {
		path    string
		headers map[string]string
	}
	imp := map[string]string{"Impersonate-User": "bob", "Impersonate-Group": "g1"}
	cases := []request{
		{"/api/v1/namespaces/ns1/configmaps/cm", nil},
		{"/api/v1/namespaces/ns1/configmaps", nil},
		{"/api/v1/namespaces/ns1/configmaps?fieldSelector=metadata.name%3Dcm", nil},
		{"/api/v1/namespaces/ns1/configmaps?fieldSelector=metadata.name%3Dcm,metadata.namespace!%3Dx&labelSelector=app+in+(a,b),!gone", nil},
		{"/api/v1/namespaces/ns1/configmaps?fieldSelector=metadata.name%3D", nil},
		{"/api/v1/configmaps?watch=true&labelSelector=app%3Dweb", nil},
		{"/api/v1/namespaces/ns1/configmaps?watch=0&labelSelector=app", nil},
		{"/api/v1/watch/namespaces/ns1/configmaps?labelSelector=app%3Dweb", nil},
		{"/api/v1/watch/namespaces/ns1/configmaps/cm", nil},
		{"/api/v1/namespaces/ns1/pods/p/status", nil},
		{"/api/v1/namespaces/ns1/pods/p/log", nil},
		{"/apis/apps/v1/namespaces/ns1/deployments/d/scale", nil},
		{"/api/v1/nodes/n1", nil},
		{"/api/v1/namespaces/ns1", nil},
		{"/api/v1/namespaces/ns1/status", nil},
		{"/apis/rbac.authorization.k8s.io/v1/clusterroles?limit=5", nil},
		{"/apis/example.com/v1/namespaces/ns1/widgets/w", nil},
		{"/metrics", nil},
		{"/api", nil},
		{"/apis", nil},
		{"/apis/apps/v1", nil},
		{"/openapi/v2", nil},
		{"/openapi/v3/api/v1", nil},
		{"/api/v1/namespaces/ns1/secrets", imp},
		{"/api/v1/namespaces/ns1/secrets", map[string]string{"Impersonate-User": "system:serviceaccount:ns1:sa"}},
	}
	constrained := 0 // kube-apiserver's constrained impersonation reviews of the current case
	do := func(base string, c request) (int, metav1.Status, []authorizationv1.SubjectAccessReviewSpec) {
		t.Helper()
		_, seq := rs.SubjectAccessReviewsSince(0)
		req, err := http.NewRequest("GET", base+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+aliceToken)
		req.Header.Set("Accept", "application/json")
		for k, v := range c.headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s%s: %v", base, c.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st metav1.Status
		_ = json.Unmarshal(b, &st)
		specs, _ := rs.SubjectAccessReviewsSince(seq)
		var mine []authorizationv1.SubjectAccessReviewSpec
		for _, s := range specs {
			if ra := s.ResourceAttributes; ra != nil && strings.HasPrefix(ra.Verb, "impersonate-on:") {
				// kube-apiserver 1.37's constrained impersonation
				// (KEP 5284, beta, on) asks first whether the
				// requestor may impersonate for this verb and
				// resource, then falls back to the legacy checks;
				// lazyapi asks the same (proxy/impersonate.go).
				constrained++
			}
			if s.User == "alice" || s.User == "bob" || strings.HasPrefix(s.User, "system:serviceaccount:") {
				mine = append(mine, s)
			}
		}
		return resp.StatusCode, st, mine
	}
	same, constrainedTotal := 0, 0
	for _, c := range cases {
		constrained = 0
		kc, kst, kspecs := do(kube, c)
		lc, lst, lspecs := do(lazy, c)
		ok := true
		if kc != lc || !reflect.DeepEqual(kst, lst) {
			ok = false
			t.Errorf("%s %v: kube-apiserver %d %+v\nlazyapi %d %+v", c.path, c.headers, kc, kst, lc, lst)
		}
		if kj, lj := mustJSONString(t, kspecs), mustJSONString(t, lspecs); kj != lj {
			ok = false
			t.Errorf("%s %v: SubjectAccessReviews differ\nkube-apiserver %s\nlazyapi        %s", c.path, c.headers, kj, lj)
		}
		if ok {
			same++
		}
		constrainedTotal += constrained
	}
	t.Logf("constrained impersonation reviews (impersonate-on:*), both servers: %d", constrainedTotal)
	t.Logf("%d of %d requests: same SubjectAccessReviews and answers as kube-apiserver", same, len(cases))
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustJSONString(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
