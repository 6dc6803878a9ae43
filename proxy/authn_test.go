package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
)

// tlsEnv is a proxy serving TLS (client certificates requested, as
// kube-apiserver) and plain HTTP, with an Authenticator.
type tlsEnv struct {
	ca, clientCA *testpki.CA
	httpsURL     string
	httpURL      string
	ms           *metrics.Set
}

func startTLSEnv(t testing.TB, anonymous bool, lim *ratelimit.Limiter, opts ...envOption) (*tlsEnv, *env) {
	t.Helper()
	e := &tlsEnv{ca: testpki.NewCA(t, "serving-ca"), clientCA: testpki.NewCA(t, "client-ca"), ms: metrics.NewSet()}
	etcd := etcdtest.Start(t)
	table := resource.NewBuiltin()
	pool := x509.NewCertPool()
	pool.AddCert(e.clientCA.Cert)
	tokens, err := authn.ParseTokens([]byte("token-alice,alice,uid-a,\"dev,ops\"\ntoken-bob,bob,uid-b\n"), "tokens.csv")
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{
		Client: etcd.Client, Resources: table, Metrics: e.ms, Limiter: lim,
		Authenticator: authn.New(authn.Config{ClientCAs: pool, Tokens: tokens, Anonymous: anonymous}),
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serving := e.ca.Server(t)
	tlsCfg := &tls.Config{
		Certificates: []tls.Certificate{serving.TLS()}, ClientAuth: tls.RequestClientCert, ClientCAs: pool,
		MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"},
	}
	var served []chan error
	for _, secure := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if secure {
			e.httpsURL = "https://" + ln.Addr().String()
			// As lazyapi serves (cmd/lazyapi): counted and coalesced
			// under TLS.
			ln = tls.NewListener(proxy.CountWrites(ln), tlsCfg)
		} else {
			e.httpURL = "http://" + ln.Addr().String()
		}
		ch := make(chan error, 1)
		served = append(served, ch)
		go func() { ch <- srv.Serve(ln) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		for _, ch := range served {
			if err := <-ch; err != nil {
				t.Errorf("Serve after Shutdown = %v", err)
			}
		}
	})
	return e, &env{etcd: etcd, cli: etcd.Client, table: table, srv: srv, ms: e.ms}
}

// config returns a client-go config for the HTTPS listener trusting the
// serving CA.
func (e *tlsEnv) config(mod func(*rest.Config)) *rest.Config {
	c := &rest.Config{Host: e.httpsURL, QPS: -1, TLSClientConfig: rest.TLSClientConfig{CAFile: e.ca.File}}
	if mod != nil {
		mod(c)
	}
	return c
}

func TestAuthnClientGo(t *testing.T) {
	e, base := startTLSEnv(t, false, nil)
	for _, name := range []string{"a", "b"} {
		base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}})
	}
	alice := e.clientCA.Client(t, "alice-cert", "team")
	ctx := context.Background()
	ok := []struct {
		name string
		mod  func(*rest.Config)
	}{
		{"client certificate", func(c *rest.Config) { c.CertFile, c.KeyFile = alice.CertFile, alice.KeyFile }},
		{"bearer token", func(c *rest.Config) { c.BearerToken = "token-alice" }},
		{"bearer token, protobuf", func(c *rest.Config) {
			c.BearerToken = "token-bob"
			c.ContentType = "application/vnd.kubernetes.protobuf"
		}},
		{"bearer token over plain HTTP", func(c *rest.Config) {
			c.Host, c.TLSClientConfig = e.httpURL, rest.TLSClientConfig{}
			c.BearerToken = "token-bob"
		}},
	}
	for _, tt := range ok {
		cs := kubernetes.NewForConfigOrDie(e.config(tt.mod))
		list, err := cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 2 {
			t.Errorf("%s: list = %v, %v; want 2 items", tt.name, list, err)
		}
	}

	other := testpki.NewCA(t, "other-ca").Client(t, "mallory")
	bad := []struct {
		name string
		mod  func(*rest.Config)
	}{
		{"no credentials", nil},
		{"no credentials over plain HTTP", func(c *rest.Config) { c.Host, c.TLSClientConfig = e.httpURL, rest.TLSClientConfig{} }},
		{"wrong token", func(c *rest.Config) { c.BearerToken = "token-mallory" }},
		{"wrong token, protobuf", func(c *rest.Config) {
			c.BearerToken = "token-mallory"
			c.ContentType = "application/vnd.kubernetes.protobuf"
		}},
		{"certificate of another CA", func(c *rest.Config) { c.CertFile, c.KeyFile = other.CertFile, other.KeyFile }},
		{"expired certificate", func(c *rest.Config) {
			old := e.clientCA.Expired(t, "old")
			c.CertFile, c.KeyFile = old.CertFile, old.KeyFile
		}},
	}
	for _, tt := range bad {
		cs := kubernetes.NewForConfigOrDie(e.config(tt.mod))
		_, err := cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: list error = %v, want Unauthorized", tt.name, err)
		}
		_, err = cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: watch error = %v, want Unauthorized", tt.name, err)
		}
	}
	for _, m := range []string{`{method="x509"}`, `{method="token"}`} {
		if v, err := metricValue(e.ms, "lazyapi_authenticated_requests_total"+m); err != nil || v < 1 {
			t.Errorf("lazyapi_authenticated_requests_total%s = %v, %v", m, v, err)
		}
	}
	if v, err := metricValue(e.ms, "lazyapi_authentication_failures_total"); err != nil || v != float64(2*len(bad)) {
		t.Errorf("lazyapi_authentication_failures_total = %v, %v; want %d", v, err, 2*len(bad))
	}
}

// TestAuthnStatus: the 401 body is kube-apiserver's Status, in the
// negotiated format; health and /version stay open; discovery and
// /metrics need credentials.
func TestAuthnStatus(t *testing.T) {
	e, _ := startTLSEnv(t, false, nil)
	get := func(path, accept, token string) (int, string, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", e.httpURL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	code, ct, body := get("/api/v1/namespaces/ns/configmaps", "application/json", "wrong")
	want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`
	if code != 401 || ct != "application/json" || strings.TrimSpace(string(body)) != want {
		t.Errorf("wrong token: %d %s %s\nwant 401 application/json %s", code, ct, body, want)
	}
	code, ct, body = get("/api/v1/namespaces/ns/configmaps", "application/vnd.kubernetes.protobuf", "")
	if code != 401 || ct != "application/vnd.kubernetes.protobuf" || !strings.HasPrefix(string(body), "k8s\x00") {
		t.Errorf("protobuf, no credentials: %d %s %q", code, ct, body)
	}
	code, ct, body = get("/api/v1/namespaces/ns/configmaps", "application/yaml", "")
	if code != 401 || ct != "application/yaml" || !strings.Contains(string(body), "reason: Unauthorized") {
		t.Errorf("yaml, no credentials: %d %s %q", code, ct, body)
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz/etcd"} {
		if code, _, body := get(p, "", ""); code != 200 {
			t.Errorf("GET %s without credentials = %d %s, want 200", p, code, body)
		}
	}
	// /version too, as kube-apiserver with --anonymous-auth=false.
	for _, p := range []string{"/api", "/apis", "/api/v1", "/metrics", "/openapi/v2", "/nothing", "/version"} {
		if code, _, _ := get(p, "", ""); code != 401 {
			t.Errorf("GET %s without credentials = %d, want 401", p, code)
		}
		if code, _, _ := get(p, "", "token-alice"); code == 401 {
			t.Errorf("GET %s with a token = 401", p)
		}
	}
	var st metav1.Status
	_, _, body = get("/api/v1/pods", "", "")
	if err := json.Unmarshal(body, &st); err != nil || st.Code != 401 || st.Reason != metav1.StatusReasonUnauthorized {
		t.Errorf("Status = %+v, %v", st, err)
	}
}

// TestAuthnAnonymous: with anonymous requests allowed, a request without
// credentials is served, a wrong token still is not.
func TestAuthnAnonymous(t *testing.T) {
	e, base := startTLSEnv(t, true, nil)
	base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}})
	ctx := context.Background()
	list, err := kubernetes.NewForConfigOrDie(e.config(nil)).CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Errorf("anonymous list = %v, %v", list, err)
	}
	_, err = kubernetes.NewForConfigOrDie(e.config(func(c *rest.Config) { c.BearerToken = "nope" })).
		CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("wrong token with anonymous on: %v, want Unauthorized", err)
	}
	if v, err := metricValue(e.ms, `lazyapi_authenticated_requests_total{method="anonymous"}`); err != nil || v < 1 {
		t.Errorf(`lazyapi_authenticated_requests_total{method="anonymous"} = %v, %v`, v, err)
	}
}

// TestAuthnFairnessKey: the rate limiter buckets authenticated requests
// per user, not per address: with a per-client burst of 1, alice's second
// GET is refused while bob's first, from the same address, is served;
// anonymous requests share the address's bucket.
func TestAuthnFairnessKey(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	cfg.PerClientQPS, cfg.PerClientBurst = 0.001, 1
	cfg.MaxInflightBytes = 1 << 30
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, base := startTLSEnv(t, true, lim)
	base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}})
	// Plain HTTP requests: client-go would wait for Retry-After and retry.
	as := func(token string) int {
		req, _ := http.NewRequest("GET", e.httpURL+"/api/v1/namespaces/ns/configmaps/a", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	steps := []struct {
		token   string
		want429 bool
	}{
		{"token-alice", false}, {"token-alice", true}, {"token-bob", false}, {"", false}, {"", true}, {"token-bob", true},
	}
	for i, s := range steps {
		code := as(s.token)
		if got := code == http.StatusTooManyRequests; got != s.want429 || (!got && code != 200) {
			t.Errorf("step %d (token %q): status %d, want 429 = %v", i, s.token, code, s.want429)
		}
	}
}
