package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// authnSetup is an etcd with ConfigMaps in namespace "authn", a serving
// CA and certificate, a client CA and a token file.
type authnSetup struct {
	etcd                *etcdtest.Server
	servingCA, clientCA *testpki.CA
	serving             *testpki.Cert
	tokenFile           string
}

func newAuthnSetup(t *testing.T) *authnSetup {
	t.Helper()
	s := &authnSetup{etcd: etcdtest.Start(t), servingCA: testpki.NewCA(t, "serving-ca"), clientCA: testpki.NewCA(t, "client-ca")}
	s.serving = s.servingCA.Server(t)
	s.tokenFile = filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(s.tokenFile, []byte("token-reader,reader,uid-1,\"readers,ops\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"one", "two", "three"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "authn"}, Data: map[string]string{"k": name}}
		if _, err := s.etcd.Client.Put(ctx, "/registry/configmaps/authn/"+name, string(mustProtobuf(t, cm))); err != nil {
			t.Fatal(err)
		}
	}
	// --authorization-mode defaults to RBAC: discovery for everyone, the
	// ConfigMaps of "authn" for the group readers and anonymous users.
	putRBAC(t, s.etcd, discoveryRBAC()...)
	putRBAC(t, s.etcd, readerRBAC("authn", group("readers"), group("system:unauthenticated"))...)
	return s
}

// start runs lazyapi with HTTPS and both authenticators and returns the
// https URL.
func (s *authnSetup) start(t *testing.T, extra ...string) string {
	url, _ := s.startProcess(t, extra...)
	return url
}

func (s *authnSetup) startProcess(t *testing.T, extra ...string) (string, *process) {
	t.Helper()
	port := freePort(t)
	args := append([]string{"--etcd-servers=" + s.etcd.Endpoint, "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + s.serving.CertFile, "--tls-private-key-file=" + s.serving.KeyFile,
		"--client-ca-file=" + s.clientCA.File, "--token-auth-file=" + s.tokenFile}, extra...)
	p := start(t, args...)
	want := "https://127.0.0.1:" + strconv.Itoa(port)
	if line, ok := p.stderr.wait(time.Now().Add(time.Second), func(l string) bool {
		return strings.Contains(l, `"secureURL":"`+want+`"`)
	}); !ok {
		t.Fatalf("no serving entry with secureURL %s:\n%s", want, p.stderr)
	} else if !strings.Contains(line, `"authentication":["x509","token (1 tokens)"`) {
		t.Errorf("serving entry does not list the authenticators: %s", line)
	}
	return want, p
}

func TestAuthnTLSClientGo(t *testing.T) {
	s := newAuthnSetup(t)
	url, p := s.startProcess(t, "--log-level=debug")
	user := s.clientCA.Client(t, "cert-user", "readers")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := func(mod func(*rest.Config)) kubernetes.Interface {
		c := &rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAFile: s.servingCA.File}}
		if mod != nil {
			mod(c)
		}
		return kubernetes.NewForConfigOrDie(c)
	}
	for name, mod := range map[string]func(*rest.Config){
		"client certificate": func(c *rest.Config) { c.CertFile, c.KeyFile = user.CertFile, user.KeyFile },
		"bearer token":       func(c *rest.Config) { c.BearerToken = "token-reader" },
	} {
		list, err := cfg(mod).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 3 {
			t.Errorf("%s: list = %v, %v; want 3 ConfigMaps", name, list, err)
		}
		w, err := cfg(mod).CoreV1().ConfigMaps("authn").Watch(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			t.Errorf("%s: watch: %v", name, err)
			continue
		}
		if ev := <-w.ResultChan(); ev.Object == nil || ev.Type != "ADDED" {
			t.Errorf("%s: first watch event = %v", name, ev)
		}
		w.Stop()
	}
	for name, mod := range map[string]func(*rest.Config){
		"no credentials": nil,
		"wrong token":    func(c *rest.Config) { c.BearerToken = "token-nobody" },
		"certificate of another CA": func(c *rest.Config) {
			o := testpki.NewCA(t, "other").Client(t, "mallory")
			c.CertFile, c.KeyFile = o.CertFile, o.KeyFile
		},
	} {
		_, err := cfg(mod).CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: list error = %v, want Unauthorized", name, err)
		}
	}

	// A refused request is logged at debug level, without its token.
	if _, ok := p.stderr.wait(time.Now().Add(5*time.Second), func(l string) bool {
		return strings.Contains(l, "cannot authenticate request")
	}); !ok {
		t.Errorf("no debug entry for a refused request:\n%s", p.stderr)
	}
	if strings.Contains(p.stderr.String(), "token-nobody") {
		t.Errorf("the log shows a token:\n%s", p.stderr)
	}

	// kubectl against https with --certificate-authority.
	needKubectl(t)
	ca := "--certificate-authority=" + s.servingCA.File
	for name, args := range map[string][]string{
		"--token":              {ca, "--token=token-reader"},
		"--client-certificate": {ca, "--client-certificate=" + user.CertFile, "--client-key=" + user.KeyFile},
	} {
		out := mustKubectl(t, url, append(args, "get", "configmaps", "-n", "authn", "-o", "name")...)
		if got := strings.Fields(out); strings.Join(got, " ") != "configmap/one configmap/three configmap/two" {
			t.Errorf("kubectl %s get configmaps = %q", name, out)
		}
	}
	// kubectl's discovery reads the 401 with Raw(), so it prints client-go's
	// generic 401 message, as it does against kube-apiserver.
	_, stderr, err := kubectl(t, url, ca, "--token=wrong", "get", "configmaps", "-n", "authn")
	if err == nil || !strings.Contains(stderr, "You must be logged in to the server") {
		t.Errorf("kubectl with a wrong token: err %v, stderr %q; want \"You must be logged in to the server\"", err, stderr)
	}
	out, stderr, err := kubectl(t, url, ca, "--token=wrong", "get", "--raw", "/api/v1/namespaces/authn/configmaps")
	if err == nil || !strings.Contains(stderr, "Unauthorized") {
		t.Errorf("kubectl get --raw with a wrong token: %q, err %v, stderr %q; want Unauthorized", out, err, stderr)
	}
}

func TestAuthnAnonymousE2E(t *testing.T) {
	s := newAuthnSetup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, anonymous := range []bool{false, true} {
		url := s.start(t, "--anonymous-auth="+strconv.FormatBool(anonymous))
		cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: url, TLSClientConfig: rest.TLSClientConfig{CAFile: s.servingCA.File}})
		list, err := cs.CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{})
		if anonymous && (err != nil || len(list.Items) != 3) {
			t.Errorf("--anonymous-auth=true, no credentials: %v, %v; want 3 ConfigMaps", list, err)
		}
		if !anonymous && !apierrors.IsUnauthorized(err) {
			t.Errorf("--anonymous-auth=false, no credentials: %v; want Unauthorized", err)
		}
		// /version as kube-apiserver: 401 without credentials when
		// anonymous requests are off, open to all when they are on.
		_, err = cs.Discovery().ServerVersion()
		if anonymous && err != nil {
			t.Errorf("--anonymous-auth=true: /version: %v; want it open", err)
		}
		if !anonymous && !apierrors.IsUnauthorized(err) {
			t.Errorf("--anonymous-auth=false: /version: %v; want Unauthorized", err)
		}
	}
}

func TestAuthnBadFlagsExit(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(bad, []byte("t1,alice,1\nt2,bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := testpki.NewCA(t, "ca").Server(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--secure-port=6443", "--tls-cert-file=" + filepath.Join(dir, "missing.crt"), "--tls-private-key-file=" + srv.KeyFile}, "--tls-cert-file"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.CertFile}, "--tls-cert-file/--tls-private-key-file"},
		{[]string{"--token-auth-file=" + bad}, "--token-auth-file: cannot parse token file " + bad + ": line 2"},
		{[]string{"--client-ca-file=" + srv.CertFile}, "--client-ca-file: needs --secure-port"},
	} {
		p := run(t, tt.args...)
		if code := exitCode(p.waitExit(30 * time.Second)); code != 2 {
			t.Errorf("lazyapi %q: exit %d, want 2", tt.args, code)
		}
		oneLine(t, p.stderr.String(), tt.want)
	}
}
