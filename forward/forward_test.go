package forward

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// The upstream in these tests is a real Go HTTPS server on loopback that
// authenticates lazyapi's front-proxy client certificate as
// kube-apiserver's request-header authenticator does (verified against
// the front-proxy CA, CommonName in the allowed names) and reports what
// it received; the front is a real fasthttp server calling Forward.

const frontProxyName = "front-proxy-client"

type upstream struct {
	srv     *httptest.Server
	handler atomic.Pointer[http.HandlerFunc]
	kubecfg string
}

// newUpstream starts the upstream and writes a kubeconfig naming it and a
// front-proxy client certificate.
func newUpstream(t *testing.T) *upstream {
	t.Helper()
	serverCA := testpki.NewCA(t, "server-ca")
	fpCA := testpki.NewCA(t, "front-proxy-ca")
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 || r.TLS.PeerCertificates[0].Subject.CommonName != frontProxyName {
			http.Error(w, "not the front proxy", http.StatusUnauthorized)
			return
		}
		(*u.handler.Load())(w, r)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(fpCA.Cert)
	sc := serverCA.Server(t)
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{sc.TLS()}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.set(func(w http.ResponseWriter, r *http.Request) {})
	client := fpCA.Client(t, frontProxyName)
	u.kubecfg = writeKubeconfig(t, u.srv.URL, serverCA.File, client.CertFile, client.KeyFile)
	return u
}

func (u *upstream) set(h http.HandlerFunc) { u.handler.Store(&h) }

func writeKubeconfig(t *testing.T, server, ca, cert, key string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upstream.kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kube
  cluster: {server: %q, certificate-authority: %q}
users:
- name: lazyapi
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: kube
  context: {cluster: kube, user: lazyapi}
current-context: kube
`, server, ca, cert, key)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

var alice = Identity{Name: "alice", UID: "uid-1", Groups: []string{"dev", "system:authenticated"},
	Extra: map[string][]string{"scopes": {"a", "b"}, "acme.com/project": {"x"}}}

// newFront starts a fasthttp server forwarding every request as alice
// (or as the user the test-client header names, for fairness tests) and
// returns its address and forwarder.
func newFront(t *testing.T, kubecfg string, tune func(*Config)) (string, *Forwarder) {
	t.Helper()
	up, tc, err := LoadKubeconfig(kubecfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Upstream: up, TLS: tc, DialTimeout: time.Second, WriteTimeout: 2 * time.Second}
	if tune != nil {
		tune(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	srv := &fasthttp.Server{
		StreamRequestBody: true,
		Handler: func(rc *fasthttp.RequestCtx) {
			client := string(rc.Request.Header.Peek("Test-Client"))
			if client == "" {
				client = "alice"
			}
			r := &Request{Identity: alice, Client: client, ClientIP: "127.0.0.1",
				Verb: "create", LongRunning: rc.QueryArgs().Has("watch") || rc.QueryArgs().Has("follow")}
			if rc.QueryArgs().Has("headerTimeout") {
				r.HeaderTimeout = time.Duration(rc.QueryArgs().GetUintOrZero("headerTimeout")) * time.Second
			}
			if n := rc.Request.Header.ContentLength(); n != 0 {
				r.Body, r.ContentLength = rc.RequestBodyStream(), int64(n)
			}
			conn := rc.Conn()
			r.Hangup = func(cancel func()) {
				go func() {
					var b [1]byte
					for {
						if _, err := conn.Read(b[:]); err != nil {
							cancel()
							return
						}
					}
				}()
			}
			if e := f.Forward(rc, r); e != nil {
				rc.SetStatusCode(e.Code)
				if e.RetryAfter > 0 {
					rc.Response.Header.Set("Retry-After", fmt.Sprint(e.RetryAfter))
				}
				rc.SetBodyString(e.Reason + ": " + e.Message)
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String(), f
}

func TestForwardIdentity(t *testing.T) {
	u := newUpstream(t)
	got := make(chan *http.Request, 1)
	var gotBody string
	u.set(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		got <- r
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Audit-Id", "abc")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"kind":"ConfigMap"}`)
	})
	front, _ := newFront(t, u.kubecfg, nil)
	const query = "?fieldManager=kubectl&dryRun=All&fieldValidation=Strict&x=%2Fa%20b&x=2"
	req, _ := http.NewRequest("PATCH", front+"/api/v1/namespaces/ns/configmaps/cm"+query, strings.NewReader("data: {a: b}"))
	req.Header.Set("Content-Type", "application/apply-patch+yaml")
	// Every identity header a caller could try, and a hop-by-hop one
	// named by Connection.
	req.Header.Set("X-Remote-User", "admin")
	req.Header.Add("X-Remote-Group", "system:masters")
	req.Header.Set("x-remote-extra-scopes", "all")
	req.Header.Set("X-Remote-Uid", "0")
	req.Header.Set("Impersonate-User", "root")
	req.Header.Set("Impersonate-Group", "system:masters")
	req.Header.Set("Authorization", "Bearer caller-token")
	req.Header.Set("Connection", "X-Secret")
	req.Header.Set("X-Secret", "1")
	req.Header.Set("X-Forwarded-For", "10.0.0.9")
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || string(body) != `{"kind":"ConfigMap"}` || resp.Header.Get("Audit-Id") != "abc" ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("response %d %q %v, want 201 with upstream's body and headers", resp.StatusCode, body, resp.Header)
	}
	r := <-got
	if r.Method != "PATCH" || r.URL.RequestURI() != "/api/v1/namespaces/ns/configmaps/cm"+query {
		t.Errorf("upstream got %s %s, want PATCH with the request URI unchanged", r.Method, r.URL.RequestURI())
	}
	if gotBody != "data: {a: b}" || r.Header.Get("Content-Type") != "application/apply-patch+yaml" {
		t.Errorf("upstream body %q type %q", gotBody, r.Header.Get("Content-Type"))
	}
	want := map[string][]string{
		"X-Remote-User":                     {"alice"},
		"X-Remote-Uid":                      {"uid-1"},
		"X-Remote-Group":                    {"dev", "system:authenticated"},
		"X-Remote-Extra-Scopes":             {"a", "b"},
		"X-Remote-Extra-Acme.com%2fproject": {"x"},
		"X-Forwarded-For":                   {"10.0.0.9, 127.0.0.1"},
		"Accept":                            {"application/json"},
	}
	for k, v := range want {
		if !slices.Equal(r.Header[k], v) {
			t.Errorf("upstream header %s = %q, want %q", k, r.Header[k], v)
		}
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "X-Remote-") {
			if _, ok := want[k]; !ok {
				t.Errorf("upstream got caller's header %s: %q", k, r.Header[k])
			}
		}
		if k == "Authorization" || k == "X-Secret" {
			t.Errorf("upstream got %s: %q", k, r.Header[k])
		}
	}
	// Impersonation is kube-apiserver's to check, against X-Remote-User.
	if r.Header.Get("Impersonate-User") != "root" || r.Header.Get("Impersonate-Group") != "system:masters" {
		t.Errorf("upstream got Impersonate-User %q, Impersonate-Group %q; want the caller's", r.Header.Get("Impersonate-User"), r.Header.Get("Impersonate-Group"))
	}
}

func TestLoadKubeconfigRefusesTokens(t *testing.T) {
	u := newUpstream(t)
	p := filepath.Join(t.TempDir(), "token.kubeconfig")
	os.WriteFile(p, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: k, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: k, context: {cluster: k, user: u}}]
current-context: k
`, u.srv.URL)), 0o600)
	if _, _, err := LoadKubeconfig(p); err == nil || !strings.Contains(err.Error(), "front-proxy client certificate") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("LoadKubeconfig(token) = %v, want a refusal naming the client certificate, not the token", err)
	}
}

// TestForwardStreamsBothWays: a chunk of the request body reaches the
// upstream before the caller sends the next, and a line of the response
// reaches the caller before the upstream writes the next: nothing is
// buffered whole. (The body is sent before the response is streamed, as
// kube-apiserver's handlers read a whole body before they answer.)
func TestForwardStreamsBothWays(t *testing.T) {
	u := newUpstream(t)
	gotChunk := make(chan string)
	next := make(chan struct{})
	u.set(func(w http.ResponseWriter, r *http.Request) {
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("upstream read: %v", err)
				return
			}
			gotChunk <- line
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := 0; i < 3; i++ {
			<-next
			fmt.Fprintf(w, "log %d\n", i)
			w.(http.Flusher).Flush()
		}
	})
	front, _ := newFront(t, u.kubecfg, nil)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", front+"/api/v1/namespaces/ns/pods/p/log?follow=true", pr)
	req.ContentLength = -1
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- resp
	}()
	for i := 0; i < 3; i++ {
		fmt.Fprintf(pw, "chunk %d\n", i)
		select {
		case line := <-gotChunk:
			if want := fmt.Sprintf("chunk %d\n", i); line != want {
				t.Fatalf("upstream got %q, want %q", line, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("chunk %d did not reach the upstream before the next was sent", i)
		}
	}
	pw.Close()
	resp := <-done
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		next <- struct{}{}
		line, err := br.ReadString('\n')
		if want := fmt.Sprintf("log %d\n", i); line != want || err != nil {
			t.Fatalf("log line %d = %q, %v; want %q", i, line, err, want)
		}
	}
}

// TestForwardUpgrade: an upgrade answered 101 is spliced both ways until
// the caller closes; the upstream sees the close.
func TestForwardUpgrade(t *testing.T) {
	u := newUpstream(t)
	closed := make(chan error, 1)
	u.set(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "SPDY/3.1" || r.Header.Get("X-Remote-User") != "alice" {
			http.Error(w, "want an SPDY upgrade as alice", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v5.channel.k8s.io\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 64)
		for {
			n, err := brw.Read(buf)
			if err != nil {
				closed <- err
				return
			}
			c.Write([]byte(strings.ToUpper(string(buf[:n]))))
		}
	})
	front, f := newFront(t, u.kubecfg, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(front, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /api/v1/namespaces/ns/pods/p/exec?command=sh HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v5.channel.k8s.io\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 101 || resp.Header.Get("X-Stream-Protocol-Version") != "v5.channel.k8s.io" {
		t.Fatalf("upgrade answered %d %v, want 101 with the upstream's headers", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"ping", "exec ls"} {
		c.Write([]byte(msg))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != strings.ToUpper(msg) {
			t.Fatalf("spliced %q back as %q, %v", msg, buf, err)
		}
	}
	if got := f.streams.inUse(); got != 1 {
		t.Errorf("stream seats in use = %d, want 1", got)
	}
	c.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream did not see the caller's close")
	}
	waitFor(t, func() bool { return f.streams.inUse() == 0 }, "stream seat released")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestForwardUpstreamDown: a refused connection and a server that never
// answers the TLS handshake both get 503 with Retry-After within the
// connect bound, never a hang.
func TestForwardUpstreamDown(t *testing.T) {
	u := newUpstream(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	refused, _ := net.Listen("tcp", "127.0.0.1:0")
	refusedAddr := refused.Addr().String()
	refused.Close()
	for name, addr := range map[string]string{"silent": silent.Addr().String(), "refused": refusedAddr} {
		t.Run(name, func(t *testing.T) {
			cfg := strings.Replace(mustRead(t, u.kubecfg), strings.TrimPrefix(u.srv.URL, "https://"), addr, 1)
			p := filepath.Join(t.TempDir(), "k")
			os.WriteFile(p, []byte(cfg), 0o600)
			front, f := newFront(t, p, nil)
			start := time.Now()
			resp, err := http.Post(front+"/api/v1/namespaces/ns/configmaps", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || took > 3*time.Second ||
				!strings.Contains(string(body), "kube-apiserver at https://"+addr+" is unavailable") {
				t.Fatalf("answered %d (Retry-After %q) in %v: %s; want 503 naming the upstream within the connect bound",
					resp.StatusCode, resp.Header.Get("Retry-After"), took, body)
			}
			if f.short.inUse() != 0 {
				t.Errorf("seats in use after 503: %d", f.short.inUse())
			}
			if err := f.Check(context.Background()); err == nil {
				t.Error("Check of a down upstream = nil")
			}
		})
	}
}

func mustRead(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestForwardSeats: a client holds at most its share of a class; the
// class holds at most its seats; 429 with Retry-After beyond; seats come
// back when streams end, also when the caller hangs up on a stream.
func TestForwardSeats(t *testing.T) {
	u := newUpstream(t)
	hold := make(chan struct{})
	var ended atomic.Int32
	u.set(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		defer ended.Add(1)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-hold:
				return
			case <-r.Context().Done():
				return
			case <-tick.C:
				if _, err := io.WriteString(w, "{}\n"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	})
	front, f := newFront(t, u.kubecfg, func(c *Config) { c.MaxStreams = 4; c.ClientShare = 0.5 })
	open := func(client string) (*http.Response, int) {
		req, _ := http.NewRequest("GET", front+"/apis/metrics.k8s.io/v1beta1/pods?watch=true", nil)
		req.Header.Set("Test-Client", client)
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, resp.StatusCode
	}
	var held []*http.Response
	for _, c := range []string{"a", "a", "b", "b"} {
		resp, code := open(c)
		if code != 200 {
			t.Fatalf("stream of %s: %d, want 200", c, code)
		}
		held = append(held, resp)
	}
	if resp, code := open("a"); code != 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third stream of a: %d, want 429 with Retry-After (client share)", code)
	}
	if _, code := open("c"); code != 429 {
		t.Fatalf("stream of c with every seat held: %d, want 429", code)
	}
	// The caller hangs up: the stream ends upstream and its seat comes back.
	held[0].Body.Close()
	waitFor(t, func() bool { return f.streams.inUse() == 3 && ended.Load() == 1 }, "a hung-up stream's seat and upstream request end")
	resp, code := open("c")
	if code != 200 {
		t.Fatalf("stream of c after a seat came back: %d", code)
	}
	held = append(held, resp)
	close(hold)
	for _, r := range held {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	waitFor(t, func() bool { return f.streams.inUse() == 0 }, "every seat released")
}

// TestForwardUpstreamHangs: kube-apiserver stops answering on a
// connection lazyapi already holds (a hung or stopped process: the
// connection stays open, no response comes). A request with a header
// bound (Request.HeaderTimeout: lazyapi's discovery and OpenAPI, which it
// can answer itself) gets 503 naming the upstream within it; every other
// request within Config.ResponseHeaderTimeout (kube-apiserver's own
// request timeout and a margin), 504; then, while the upstream stays
// silent, the next requests get 503 at once (never a hang). Check reports
// it down within healthWait.
func TestForwardUpstreamHangs(t *testing.T) {
	u := newUpstream(t)
	release := make(chan struct{})
	defer close(release)
	var hung atomic.Bool
	u.set(func(w http.ResponseWriter, r *http.Request) {
		if hung.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		if r.URL.Path == "/readyz" {
			return // 200
		}
		w.WriteHeader(201)
	})
	front, f := newFront(t, u.kubecfg, func(c *Config) { c.ResponseHeaderTimeout = 2 * time.Second })
	if err := f.Check(context.Background()); err != nil {
		t.Fatalf("Check of an upstream that answers: %v", err)
	}
	post := func(path string) (int, string, time.Duration) {
		start := time.Now()
		resp, err := http.Post(front+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After") + " " + string(body), time.Since(start)
	}
	if code, body, _ := post("/api/v1/namespaces/ns/configmaps"); code != 201 {
		t.Fatalf("answered %d %s before the upstream hung", code, body)
	}
	hung.Store(true)
	// The check waits healthWait, not for the upstream (a kubelet probe
	// of /readyz must not).
	time.Sleep(healthTTL)
	start := time.Now()
	if err := f.Check(context.Background()); err == nil || time.Since(start) > healthWait+500*time.Millisecond {
		t.Errorf("Check of a hung upstream: %v after %v; want an error after at most %v", err, time.Since(start), healthWait)
	}
	for _, c := range []struct {
		path string
		code int
		max  time.Duration
	}{
		{"/api/v1/namespaces/ns/configmaps?headerTimeout=1", 503, 1500 * time.Millisecond},
		{"/api/v1/namespaces/ns/configmaps", 504, 3 * time.Second},
	} {
		time.Sleep(downHold) // past the fail-fast window of the previous one
		code, body, took := post(c.path)
		if code != c.code || took > c.max || !strings.HasPrefix(body, "1 ") || !strings.Contains(body, "kube-apiserver at https://") {
			t.Errorf("POST %s to a hung upstream: %d in %v: %s; want %d with Retry-After naming the upstream within %v", c.path, code, took, body, c.code, c.max)
		}
		if code, body, took := post(c.path); code != 503 || took > 500*time.Millisecond {
			t.Errorf("POST %s just after: %d in %v: %s; want 503 at once", c.path, code, took, body)
		}
	}
	if f.short.inUse() != 0 {
		t.Errorf("seats in use: %d", f.short.inUse())
	}
}
