package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// TestTLSFlagsE2E runs the binary with --tls-min-version=VersionTLS13: a
// real TLS 1.2 client is refused at the handshake, a TLS 1.3 client is
// served; with --tls-cipher-suites a TLS 1.2 client offering only other
// suites is refused (issue 23, finding 10).
func TestTLSFlagsE2E(t *testing.T) {
	etcd, _ := seededEtcd(t)
	ca := testpki.NewCA(t, "serving")
	srv := ca.Server(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	get := func(url string, cfg *tls.Config) error {
		cfg.RootCAs = pool
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		resp, err := hc.Get(url + "/livez")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		if resp.StatusCode != 200 {
			t.Errorf("GET %s/livez = %d", url, resp.StatusCode)
		}
		return nil
	}
	for _, tt := range []struct {
		flag       string
		refused    *tls.Config
		served     *tls.Config
		refusedMsg string
	}{
		{"--tls-min-version=VersionTLS13", &tls.Config{MaxVersion: tls.VersionTLS12}, &tls.Config{MinVersion: tls.VersionTLS13}, "protocol version"},
		{"--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
			&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}},
			&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}, "handshake failure"},
	} {
		port := freePort(t)
		p := start(t, "--etcd-servers="+etcd.Endpoint, "--secure-port="+strconv.Itoa(port),
			"--tls-cert-file="+srv.CertFile, "--tls-private-key-file="+srv.KeyFile, tt.flag)
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		if err := get(url, tt.refused); err == nil || !strings.Contains(err.Error(), tt.refusedMsg) {
			t.Errorf("%s: a client outside it: %v, want a refused handshake (%s)", tt.flag, err, tt.refusedMsg)
		}
		if err := get(url, tt.served); err != nil {
			t.Errorf("%s: a client within it: %v", tt.flag, err)
		}
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
}
