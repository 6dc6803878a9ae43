package proxy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/lazyapi/lazyapi/proxy"
)

// httpsClient is a net/http client of e's TLS listener; gzip asks for
// compressed responses (decoded by the transport, as client-go's).
func (e *tlsEnv) httpsClient(t testing.TB, gzip bool) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableCompression: !gzip}}
}

func getBody(t testing.TB, c *http.Client, url, accept string) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return b
}

// TestTLSCoalescedIdentical: responses over TLS, where each HTTP chunk's
// TLS records reach the socket in one write (proxy.CountWrites), are the
// bytes the plain listener sends: LISTs of config text (several 64 KiB
// chunks; items larger than the coalescing buffer), protobuf, gzip, a
// limit, a GET, a watch replay; client-go over TLS sees the same objects.
// No coalescing buffer stays taken and no goroutine is left once the
// responses are done.
func TestTLSCoalescedIdentical(t *testing.T) {
	e, base := startTLSEnv(t, true, nil)
	r := rand.New(rand.NewPCG(15, 4))
	var rev0 int64
	for i := range 150 {
		rv := base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i), Namespace: "ns"},
			Data: map[string]string{"app.conf": configText(r, 4<<10)}})
		if i == 0 {
			rev0 = rv - 1
		}
	}
	for i := range 3 {
		base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i), Namespace: "ns"},
			Data: map[string]string{"app.conf": configText(r, 600<<10)}})
	}
	inUse := func() float64 {
		v, err := metricValue(e.ms, "lazyapi_write_coalesce_buffer_bytes")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	goroutines := runtime.NumGoroutine()
	plain := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	secure, secureGzip := e.httpsClient(t, false), e.httpsClient(t, true)
	const pb = "application/vnd.kubernetes.protobuf"
	for _, c := range []struct{ path, accept string }{
		{"/api/v1/namespaces/ns/configmaps", "application/json"},
		{"/api/v1/namespaces/ns/configmaps", pb},
		{"/api/v1/namespaces/ns/configmaps?limit=40", "application/json"},
		{"/api/v1/configmaps", "application/json"},
		{"/api/v1/namespaces/ns/configmaps/big-1", "application/json"},
		{"/api/v1/namespaces/ns/configmaps/cm-007", "application/json"},
		{fmt.Sprintf("/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=1", rev0), "application/json"},
		{fmt.Sprintf("/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=1", rev0), pb + ";stream=watch"},
	} {
		want := getBody(t, plain, e.httpURL+c.path, c.accept)
		if len(want) < 1000 {
			t.Fatalf("GET %s (%s): %d bytes over plain HTTP, want the objects", c.path, c.accept, len(want))
		}
		for _, cl := range []struct {
			name string
			c    *http.Client
		}{{"TLS", secure}, {"TLS, gzip", secureGzip}} {
			if got := getBody(t, cl.c, e.httpsURL+c.path, c.accept); !bytes.Equal(got, want) {
				t.Errorf("GET %s (%s) over %s: %d bytes, not the %d bytes of plain HTTP", c.path, c.accept, cl.name, len(got), len(want))
			}
		}
	}
	cs := kubernetes.NewForConfigOrDie(e.config(nil))
	list, err := cs.CoreV1().ConfigMaps("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 153 {
		t.Fatalf("client-go LIST over TLS: %v items, %v; want 153", len(list.Items), err)
	}
	for _, cm := range list.Items {
		if n := len(cm.Data["app.conf"]); n != 4<<10 && n != 600<<10 {
			t.Fatalf("client-go LIST over TLS: %s has %d bytes of data", cm.Name, n)
		}
	}
	if v := inUse(); v != 0 {
		t.Errorf("coalescing buffers in use after the responses: %v bytes, want 0", v)
	}
	plain.CloseIdleConnections()
	secure.CloseIdleConnections()
	secureGzip.CloseIdleConnections()
	waitFor(t, "the goroutines of the responses to end", func() error {
		if n := runtime.NumGoroutine(); n > goroutines+4 {
			return fmt.Errorf("%d goroutines, %d before the requests", n, goroutines)
		}
		return nil
	})
}

// TestTLSStalledClientAborted: a TLS client that requests a large LIST
// and reads nothing is still ended by the write guard about
// --write-timeout after it stopped (the stream's coalesced writes block on
// its socket under the guard's deadline), its coalescing buffer is given
// back, and another client is served meanwhile.
func TestTLSStalledClientAborted(t *testing.T) {
	e, base := startTLSEnv(t, true, nil, func(c *proxy.Config) { c.WriteTimeout = time.Second })
	r := rand.New(rand.NewPCG(15, 5))
	for i := range 12 {
		base.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%02d", i), Namespace: "ns"},
			Data: map[string]string{"app.conf": configText(r, 900<<10)}})
	}
	const stalled = `lazyapi_streams_aborted_total{reason="write_stalled"}`
	before, _ := metricValue(e.ms, stalled)
	raw, err := net.Dial("tcp", strings.TrimPrefix(e.httpsURL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	_ = raw.(*net.TCPConn).SetReadBuffer(64 << 10)
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Cert)
	tc := tls.Client(raw, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	fmt.Fprintf(tc, "GET /api/v1/namespaces/ns/configmaps HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n")
	// The clock starts when the body's writing begins (the LIST holds its
	// connection's coalescing buffer from its first write to its end),
	// not when the request is sent: before that the server reads and
	// encodes the first pages (up to 4.6 s under -race beside other race
	// processes on 2 cores). From then the stream fills the sockets'
	// buffers (the client read 4 MiB, 0.25-1 s of encoding under that
	// load), then the guard ends it 3/4 to 1 × --write-timeout after the
	// last byte the socket took: 1.0-2.0 s in all. A guard at the default
	// write timeout (10 s) would end it at 7.5 s or later; without the
	// guard only the request timeout (a minute) would, counted as
	// request_timeout (waitFor fails at 20 s).
	sent := time.Now()
	var writing time.Time
	waitFor(t, "the stalled TLS stream to be aborted", func() error {
		if writing.IsZero() {
			if v, _ := metricValue(e.ms, "lazyapi_write_coalesce_buffer_bytes"); v > 0 {
				writing = time.Now()
			}
		}
		if v, _ := metricValue(e.ms, stalled); v <= before {
			return fmt.Errorf("%s = %v", stalled, v)
		}
		return nil
	})
	if writing.IsZero() {
		t.Fatalf("aborted %s after the request without its coalescing buffer seen in use", time.Since(sent).Round(time.Millisecond))
	}
	t.Logf("the stalled stream was aborted %s after its writing began, %s after the request",
		time.Since(writing).Round(time.Millisecond), time.Since(sent).Round(time.Millisecond))
	if d := time.Since(writing); d > 4*time.Second {
		t.Errorf("the stalled stream was aborted %s after its writing began (%s after the request), want about --write-timeout (1 s)",
			d.Round(time.Millisecond), time.Since(sent).Round(time.Millisecond))
	}
	waitFor(t, "the coalescing buffer to be given back", func() error {
		if v, _ := metricValue(e.ms, "lazyapi_write_coalesce_buffer_bytes"); v != 0 {
			return fmt.Errorf("%v bytes in use", v)
		}
		return nil
	})
	// The server closed the connection: the client reads what the
	// socket buffers held, then the end.
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, tc)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the aborted connection is still open after %d bytes", n)
	}
	if n >= 9<<20 {
		t.Errorf("the stalled client read %d bytes: the whole LIST, want it cut short", n)
	}
	got := getBody(t, e.httpsClient(t, false), e.httpsURL+"/api/v1/namespaces/ns/configmaps/big-03", "application/json")
	if len(got) < 900<<10 {
		t.Errorf("another client's GET over TLS: %d bytes", len(got))
	}
}
