package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"testing"
)

// BenchmarkAuthn: a small authenticated request (GET /api/v1, discovery,
// no etcd read) over keep-alive connections, without an authenticator
// (baseline) and with a bearer token or a client certificate, over plain
// HTTP and TLS. The difference is authentication's cost per request.
//
//	go test ./proxy -run '^$' -bench BenchmarkAuthn -benchtime=200ms -count=3
func BenchmarkAuthn(b *testing.B) {
	off := startEnv(b)
	e, _ := startTLSEnv(b, false, nil)
	pool := x509.NewCertPool()
	pool.AddCert(e.ca.Cert)
	user := e.clientCA.Client(b, "bench", "g")
	client := func(cert bool) *http.Client {
		cfg := &tls.Config{RootCAs: pool}
		if cert {
			cfg.Certificates = []tls.Certificate{user.TLS()}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 4}}
	}
	run := func(b *testing.B, c *http.Client, url, token string) {
		b.ReportAllocs()
		for b.Loop() {
			req, _ := http.NewRequest("GET", url+"/api/v1", nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%d %v", resp.StatusCode, err)
			}
		}
	}
	b.Run("http/baseline-off", func(b *testing.B) { run(b, client(false), off.url, "") })
	b.Run("http/token", func(b *testing.B) { run(b, client(false), e.httpURL, "token-alice") })
	b.Run("tls/token", func(b *testing.B) { run(b, client(false), e.httpsURL, "token-alice") })
	b.Run("tls/x509", func(b *testing.B) { run(b, client(true), e.httpsURL, "") })
}
