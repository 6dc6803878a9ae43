package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
	"github.com/lazyapi/lazyapi/proxy"
)

// The upstream of these tests is a real Go HTTPS server on loopback that
// accepts only lazyapi's front-proxy client certificate and records what
// it was sent; lazyapi serves with its header gate, authentication and a
// real etcd (startTLSEnv).

type seen struct {
	method, uri string
	header      http.Header
	body        string
}

type recordingUpstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []seen // protected by mu
}

func (u *recordingUpstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.got)
}

// startUpstream starts the upstream; handle answers after the request
// (its body read) is recorded.
func startUpstream(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body []byte)) (*recordingUpstream, *forward.Forwarder) {
	t.Helper()
	serverCA, fpCA := testpki.NewCA(t, "upstream-ca"), testpki.NewCA(t, "front-proxy-ca")
	u := &recordingUpstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != "front-proxy-client" {
			http.Error(w, "not the front proxy", 401)
			return
		}
		var body []byte
		if r.Header.Get("Upgrade") == "" {
			body, _ = io.ReadAll(r.Body)
		}
		u.mu.Lock()
		u.got = append(u.got, seen{r.Method, r.URL.RequestURI(), r.Header.Clone(), string(body)})
		u.mu.Unlock()
		handle(w, r, body)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(fpCA.Cert)
	sc := serverCA.Server(t)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{sc.TLS()}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	roots := x509.NewCertPool()
	roots.AddCert(serverCA.Cert)
	upURL, _ := url.Parse(u.srv.URL)
	f, err := forward.New(forward.Config{Upstream: upURL, DialTimeout: time.Second,
		TLS: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{fpCA.Client(t, "front-proxy-client").TLS()}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return u, f
}

func TestForwardThroughProxy(t *testing.T) {
	logGone := make(chan struct{}, 1)
	up, f := startUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		switch {
		case r.Header.Get("Upgrade") != "":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
			brw.Flush()
			buf := make([]byte, 64)
			for {
				n, err := brw.Read(buf)
				if err != nil {
					return
				}
				c.Write([]byte(strings.ToUpper(string(buf[:n]))))
			}
		case r.Method == "POST":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			var cm corev1.ConfigMap
			json.Unmarshal(body, &cm)
			cm.ResourceVersion = "42"
			json.NewEncoder(w).Encode(&cm)
		case strings.HasSuffix(r.URL.Path, "/log"):
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "line\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // a quiet logs -f
			logGone <- struct{}{}
		case r.URL.Path == "/apis":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}],"preferredVersion":{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"kind":"PodMetricsList","apiVersion":"metrics.k8s.io/v1beta1","items":[]}`)
		}
	})
	te, _ := startTLSEnv(t, false, nil, func(c *proxy.Config) { c.Forward = f })
	alice := kubernetes.NewForConfigOrDie(te.config(func(c *rest.Config) {
		c.BearerToken = "token-alice"
		c.ContentType = "application/json"
	}))
	ctx := context.Background()

	// A write is forwarded as alice, with the caller's body and query.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns"}, Data: map[string]string{"k": strings.Repeat("v", 100<<10)}}
	got, err := alice.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{FieldManager: "test", DryRun: []string{"All"}})
	if err != nil {
		t.Fatalf("create through lazyapi: %v", err)
	}
	if got.ResourceVersion != "42" || got.Data["k"] != cm.Data["k"] {
		t.Fatalf("create answered rv %q, %d bytes of data: not the upstream's answer", got.ResourceVersion, len(got.Data["k"]))
	}
	reqs := up.requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.method != "POST" || r.uri != "/api/v1/namespaces/ns/configmaps?dryRun=All&fieldManager=test" {
		t.Errorf("upstream got %s %s", r.method, r.uri)
	}
	if r.header.Get("X-Remote-User") != "alice" || !slices.Equal(r.header.Values("X-Remote-Group"), []string{"dev", "ops", "system:authenticated"}) ||
		r.header.Get("X-Remote-Uid") != "uid-a" || r.header.Get("Authorization") != "" {
		t.Errorf("upstream identity headers %v, want alice's and no Authorization", r.header)
	}

	// Reads of stored resources are served here, not forwarded.
	if _, err := alice.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if n := len(up.requests()); n != 1 {
		t.Errorf("a LIST of configmaps was forwarded (%d upstream requests)", n)
	}

	// An aggregated group is forwarded; a client's own X-Remote-User
	// never reaches it; its Impersonate-User does, beside X-Remote-User
	// alice, for kube-apiserver to check (as it would sent directly).
	req, _ := http.NewRequest("GET", te.httpsURL+"/apis/metrics.k8s.io/v1beta1/pods", nil)
	req.Header.Set("Authorization", "Bearer token-alice")
	req.Header.Set("X-Remote-User", "system:admin")
	req.Header.Set("X-Remote-Group", "system:masters")
	req.Header.Set("Impersonate-User", "bob")
	resp, err := tlsClient(te).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "PodMetricsList") {
		t.Fatalf("aggregated read: %d %s", resp.StatusCode, b)
	}
	r = up.requests()[1]
	if !slices.Equal(r.header.Values("X-Remote-User"), []string{"alice"}) || slices.Contains(r.header.Values("X-Remote-Group"), "system:masters") {
		t.Errorf("forged identity headers reached the upstream: %v", r.header)
	}
	if got := r.header.Values("Impersonate-User"); !slices.Equal(got, []string{"bob"}) {
		t.Errorf("upstream got Impersonate-User %q, want the caller's [bob]", got)
	}

	// An unauthenticated request is refused here, never forwarded.
	req, _ = http.NewRequest("POST", te.httpsURL+"/api/v1/namespaces/ns/configmaps", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer wrong")
	resp, err = tlsClient(te).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || len(up.requests()) != 2 {
		t.Errorf("bad token: %d, %d upstream requests; want 401 and nothing forwarded", resp.StatusCode, len(up.requests()))
	}

	// A chunked body goes through the gate as it comes.
	c := dialTLS(t, te)
	body := `{"metadata":{"name":"chunked"}}`
	fmt.Fprintf(c, "POST /api/v1/namespaces/ns/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-alice\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	c.Close()
	if last := up.requests()[2]; resp.StatusCode != 201 || last.body != body {
		t.Errorf("chunked create: %d, upstream body %q", resp.StatusCode, last.body)
	}

	// An upgrade is spliced, the bytes sent right after the request's
	// header (held by the gate) included.
	c = dialTLS(t, te)
	fmt.Fprintf(c, "POST /api/v1/namespaces/ns/pods/p/exec?command=ls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-alice\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nearly")
	br := bufio.NewReader(c)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "EARLY" {
		t.Fatalf("early bytes came back as %q, %v", buf, err)
	}
	c.Write([]byte("later"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "LATER" {
		t.Fatalf("spliced bytes came back as %q, %v", buf, err)
	}
	c.Close()
	if got := up.requests()[3]; got.header.Get("X-Remote-User") != "alice" || got.header.Get("Authorization") != "" {
		t.Errorf("upgrade forwarded with %v", got.header)
	}

	// A quiet stream ends upstream when its client leaves (its seat, its
	// upstream connection let go), not at its next write.
	req, _ = http.NewRequest("GET", te.httpsURL+"/api/v1/namespaces/ns/pods/p/log?follow=true", nil)
	req.Header.Set("Authorization", "Bearer token-alice")
	lc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsClient(te).Transport.(*http.Transport).TLSClientConfig}}
	resp, err = lc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "line\n" {
		t.Fatalf("logs -f: %q, %v", line, err)
	}
	resp.Body.Close()
	lc.CloseIdleConnections()
	select {
	case <-logGone:
	case <-time.After(10 * time.Second):
		t.Errorf("a quiet logs -f was still held upstream 10 s after its client left")
	}
	up.mu.Lock()
	up.got = slices.DeleteFunc(up.got, func(r seen) bool { return strings.HasSuffix(r.uri, "follow=true") })
	up.mu.Unlock()

	// The documents of the whole server are kube-apiserver's (its
	// aggregated groups listed), asked as alice.
	getAPIs := func() string {
		req, _ := http.NewRequest("GET", te.httpsURL+"/apis", nil)
		req.Header.Set("Authorization", "Bearer token-alice")
		resp, err := tlsClient(te).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Errorf("/apis: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	if b := getAPIs(); !strings.Contains(b, `"metrics.k8s.io"`) || len(up.requests()) != 5 || up.requests()[4].header.Get("X-Remote-User") != "alice" {
		t.Errorf("/apis with forwarding: %s; want kube-apiserver's, asked as alice", b)
	}

	// kube-apiserver down: forwarded requests get 503 naming it, reads
	// are served, /readyz stays ready and /readyz/kube-apiserver is not,
	// and discovery is lazyapi's own.
	up.srv.Close()
	if b := getAPIs(); strings.Contains(b, `"metrics.k8s.io"`) || !strings.Contains(b, `"apps"`) {
		t.Errorf("/apis with kube-apiserver down: %s; want lazyapi's own groups", b)
	}
	_, err = alice.CoreV1().ConfigMaps("ns").Create(ctx, cm, metav1.CreateOptions{})
	if se, ok := err.(interface{ Status() metav1.Status }); !ok || se.Status().Code != 503 || se.Status().Reason != metav1.StatusReasonServiceUnavailable ||
		!strings.Contains(se.Status().Message, "kube-apiserver at "+up.srv.URL) {
		t.Errorf("create with kube-apiserver down: %v, want a 503 Status naming it", err)
	}
	if _, err := alice.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list with kube-apiserver down: %v", err)
	}
	for path, want := range map[string]int{"/readyz": 200, "/readyz/kube-apiserver": 500} {
		resp, err := tlsClient(te).Get(te.httpsURL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s with kube-apiserver down: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func tlsClient(te *tlsEnv) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(te.ca.Cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func dialTLS(t *testing.T, te *tlsEnv) net.Conn {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(te.ca.Cert)
	c, err := tls.Dial("tcp", strings.TrimPrefix(te.httpsURL, "https://"), &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestForwardDiscoveryUpstreamHung: kube-apiserver stops answering on the
// connection lazyapi holds to it (a hung or stopped process): /apis, which
// lazyapi asks kube-apiserver first, is answered with lazyapi's own groups
// within the connect bound (1 s here), not after kube-apiserver's
// request timeout or never; a forwarded write just after gets 503 naming
// it at once.
func TestForwardDiscoveryUpstreamHung(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var hung sync.Mutex // held: the upstream answers nothing
	up, f := startUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if !hung.TryLock() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		hung.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"metrics.k8s.io","versions":[{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}],"preferredVersion":{"groupVersion":"metrics.k8s.io/v1beta1","version":"v1beta1"}}]}`)
	})
	te, _ := startTLSEnv(t, false, nil, func(c *proxy.Config) { c.Forward = f })
	hc := tlsClient(te)
	get := func(method, path string) (int, string, time.Duration) {
		start := time.Now()
		req, _ := http.NewRequest(method, te.httpsURL+path, strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`))
		req.Header.Set("Authorization", "Bearer token-alice")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	if code, b, _ := get("GET", "/apis"); code != 200 || !strings.Contains(b, `"metrics.k8s.io"`) {
		t.Fatalf("/apis before the upstream hung: %d %s", code, b)
	}
	hung.Lock()
	code, b, took := get("GET", "/apis")
	if code != 200 || strings.Contains(b, `"metrics.k8s.io"`) || !strings.Contains(b, `"apps"`) || took > 3*time.Second {
		t.Errorf("/apis with kube-apiserver hung: %d in %v: %.200s; want lazyapi's own groups within the connect bound", code, took, b)
	}
	code, b, took = get("POST", "/api/v1/namespaces/ns/configmaps")
	if code != 503 || took > time.Second || !strings.Contains(b, "kube-apiserver at "+up.srv.URL) {
		t.Errorf("create just after: %d in %v: %s; want 503 naming kube-apiserver at once", code, took, b)
	}
}
