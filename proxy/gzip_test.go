package proxy_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/proxy"
)

// rawEncoded does a GET with the given Accept-Encoding, without Go's
// transparent decompression, and returns the status, headers and the body
// as sent.
func rawEncoded(t testing.TB, url, accept, acceptEncoding string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, body
}

func gunzip(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("gzip.NewReader: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

// TestGzipDifferential: every GET and LIST (cached and from etcd, JSON,
// protobuf, Table, YAML, streamed and whole, with a selector that leaves a
// small answer of a large range) asked for with Accept-Encoding: gzip
// decodes to the bytes of the same request without it; it is compressed
// exactly when the answer is larger than 128 KiB, with Vary:
// Accept-Encoding, as kube-apiserver; watches never are.
func TestGzipDifferential(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	seedConfigMaps(t, e, "big", 300, 2000)  // ~700 KB of JSON, several etcd pages: streamed
	seedConfigMaps(t, e, "mid", 60, 2300)   // ~150 KB: just above the threshold
	seedConfigMaps(t, e, "small", 40, 2000) // ~90 KB: below
	rev := e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "one", Name: "large"},
		Data: map[string]string{"payload": strings.Repeat("config.line = 1\n", 12000)}}) // ~200 KB object
	tw.waitCached(t, rev)
	paths := []string{
		"/api/v1/namespaces/big/configmaps", "/api/v1/namespaces/big/configmaps?resourceVersion=0",
		"/api/v1/namespaces/mid/configmaps", "/api/v1/namespaces/mid/configmaps?resourceVersion=0",
		"/api/v1/namespaces/small/configmaps", "/api/v1/namespaces/big/configmaps?limit=100",
		"/api/v1/namespaces/big/configmaps?labelSelector=i%3D7", "/api/v1/configmaps?labelSelector=parity%3Dodd",
		"/api/v1/namespaces/one/configmaps/large", "/api/v1/namespaces/one/configmaps/large?resourceVersion=0",
		"/api/v1/namespaces/big/configmaps/cm-00001",
	}
	accepts := []string{"application/json", "application/vnd.kubernetes.protobuf", kubectlTableAccept, "application/yaml",
		"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"}
	compressed := 0
	for _, srv := range []*env{tw.cached, tw.etcd} {
		for _, p := range paths {
			for _, acc := range accepts {
				if strings.Contains(acc, "PartialObjectMetadataList") && strings.Contains(p, "/configmaps/") {
					continue
				}
				code, h, plain := rawEncoded(t, srv.url+p, acc, "")
				if code != 200 {
					t.Fatalf("GET %s (%s): %d %.200s", p, acc, code, plain)
				}
				if h.Get("Content-Encoding") != "" {
					t.Fatalf("GET %s without Accept-Encoding: Content-Encoding %q", p, h.Get("Content-Encoding"))
				}
				code, h, body := rawEncoded(t, srv.url+p, acc, "deflate, gzip")
				if code != 200 {
					t.Fatalf("GET %s (%s, gzip): %d", p, acc, code)
				}
				want := len(plain) > 128<<10
				if got := h.Get("Content-Encoding") == "gzip"; got != want {
					t.Fatalf("GET %s (%s): %d bytes, Content-Encoding %q, want gzip=%v", p, acc, len(plain), h.Get("Content-Encoding"), want)
				}
				if want {
					compressed++
					if h.Get("Vary") != "Accept-Encoding" {
						t.Errorf("GET %s: Vary %q", p, h.Get("Vary"))
					}
					if len(body) >= len(plain) {
						t.Errorf("GET %s (%s): gzip %d bytes >= %d", p, acc, len(body), len(plain))
					}
					body = gunzip(t, body)
				}
				if !bytes.Equal(body, plain) {
					t.Fatalf("GET %s (%s): gzip body decodes to %d bytes that differ from the %d plain ones", p, acc, len(body), len(plain))
				}
			}
		}
	}
	if compressed < 20 {
		t.Errorf("only %d compressed answers", compressed)
	}
	// Accept-Encoding as kube-apiserver reads it: a token that is exactly
	// "gzip" after trimming spaces.
	for ae, want := range map[string]bool{"gzip": true, " gzip ,br": true, "br, gzip": true, "deflate": false,
		"gzip;q=1": false, "x-gzip": false, "": false} {
		_, h, _ := rawEncoded(t, e.url+"/api/v1/namespaces/big/configmaps", "application/json", ae)
		if got := h.Get("Content-Encoding") == "gzip"; got != want {
			t.Errorf("Accept-Encoding %q: compressed %v, want %v", ae, got, want)
		}
	}
	// Never a watch.
	req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/big/configmaps?watch=true&resourceVersion=0", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := (&http.Client{Transport: tr}).Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("watch: Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	resp.Body.Close()
}

// TestGzipClientGo: client-go's default transport asks for gzip and
// decodes it; the objects it gets are those of a client that disables
// compression, JSON and protobuf; --enable-response-compression=false
// (Config.DisableCompression) sends nothing compressed.
func TestGzipClientGo(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	rev := seedConfigMaps(t, e, "big", 300, 2000)
	tw.waitCached(t, rev)
	for _, cfg := range []*rest.Config{e.jsonCfg, e.protCfg} {
		plainCfg := rest.CopyConfig(cfg)
		plainCfg.DisableCompression = true
		gz := kubernetes.NewForConfigOrDie(cfg)
		plain := kubernetes.NewForConfigOrDie(plainCfg)
		for _, rv := range []string{"", "0"} {
			a, err := gz.CoreV1().ConfigMaps("big").List(context.Background(), metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			b, err := plain.CoreV1().ConfigMaps("big").List(context.Background(), metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				t.Fatal(err)
			}
			if len(a.Items) != 300 || !reflect.DeepEqual(a, b) {
				t.Fatalf("%s rv=%q: gzip list (%d items) differs from plain (%d items)", cfg.ContentType, rv, len(a.Items), len(b.Items))
			}
		}
	}
	// Compression is counted on the server side: the client-go LISTs above
	// were compressed.
	_, h, _ := rawEncoded(t, e.url+"/api/v1/namespaces/big/configmaps", "", "gzip")
	if h.Get("Content-Encoding") != "gzip" {
		t.Fatalf("LIST of 700 KB with Accept-Encoding: gzip: Content-Encoding %q", h.Get("Content-Encoding"))
	}
	off := startEnv(t, func(c *proxy.Config) { c.Client = e.cli; c.DisableCompression = true })
	_, h, _ = rawEncoded(t, off.url+"/api/v1/namespaces/big/configmaps", "", "gzip")
	if h.Get("Content-Encoding") != "" {
		t.Fatalf("DisableCompression: Content-Encoding %q", h.Get("Content-Encoding"))
	}
}

// TestGzipAbandoned: a client that reads the start of a compressed LIST
// and hangs up ends the request (its writer goroutine stops and the request
// is recorded).
func TestGzipAbandoned(t *testing.T) {
	e := startEnv(t)
	// ~12 MB of JSON that compresses to ~6 MB: more than the socket
	// buffers hold.
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 600 {
		b := make([]byte, 10000)
		for j := range b {
			b[j] = byte(rnd.Uint32())
		}
		e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: fmt.Sprintf("cm-%04d", i)},
			Data: map[string]string{"payload": hex.EncodeToString(b)}})
	}
	count := func() float64 {
		v, _ := metricValue(e.ms, `lazyapi_apiserver_request_total{verb="LIST",resource="configmaps",code="200",format="json"}`)
		return v
	}
	before := count()
	req, _ := http.NewRequest("GET", e.url+"/api/v1/namespaces/big/configmaps", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	tr := &http.Transport{DisableCompression: true, ReadBufferSize: 4096}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	tr.CloseIdleConnections()
	waitFor(t, "abandoned LIST recorded", func() error {
		if got := count(); got <= before {
			return fmt.Errorf("list requests recorded %v, want > %v", got, before)
		}
		return nil
	})
}
