package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// replaceFile writes src's content to dst through a rename, as kubelet's
// secret volumes and cert-manager swap certificate files.
func replaceFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// tlsGet GETs url on a new connection, trusting roots and presenting cert
// (nil: none); it returns the status code or the error.
func tlsGet(url string, roots *testpki.CA, cert *testpki.Cert) (int, error) {
	pool := x509.NewCertPool()
	pool.AddCert(roots.Cert)
	cfg := &tls.Config{RootCAs: pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{cert.TLS()}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body) //nolint:errcheck
	return resp.StatusCode, nil
}

// TestCertificateRotation replaces the serving certificate and key and the
// client CA bundle on disk while lazyapi runs: new clients succeed with the
// new ones, without a restart, and the old ones stop working.
func TestCertificateRotation(t *testing.T) {
	etcd := etcdtest.Start(t)
	servingCA1, servingCA2 := testpki.NewCA(t, "serving-ca-1"), testpki.NewCA(t, "serving-ca-2")
	clientCA1, clientCA2 := testpki.NewCA(t, "client-ca-1"), testpki.NewCA(t, "client-ca-2")
	// system:masters: RBAC (the default with an authenticator) allows them.
	alice, bob := clientCA1.Client(t, "alice", "system:masters"), clientCA2.Client(t, "bob", "system:masters")
	dir := t.TempDir()
	certFile, keyFile, clientCAFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "client-ca.crt")
	srv1 := servingCA1.Server(t)
	replaceFile(t, certFile, srv1.CertFile)
	replaceFile(t, keyFile, srv1.KeyFile)
	replaceFile(t, clientCAFile, clientCA1.File)

	port := freePort(t)
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+certFile, "--tls-private-key-file="+keyFile, "--client-ca-file="+clientCAFile)
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/api/v1/namespaces"

	if code, err := tlsGet(url, servingCA1, alice); err != nil || code != 200 {
		t.Fatalf("before rotation: alice = %d, %v; want 200", code, err)
	}
	if code, err := tlsGet(url, servingCA1, bob); err != nil || code != 401 {
		t.Fatalf("before rotation: bob (client CA 2) = %d, %v; want 401", code, err)
	}

	// Rotate everything: serving pair to CA 2, client CA to CA 2.
	srv2 := servingCA2.Server(t)
	rotated := time.Now()
	replaceFile(t, certFile, srv2.CertFile)
	replaceFile(t, keyFile, srv2.KeyFile)
	replaceFile(t, clientCAFile, clientCA2.File)
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, err := tlsGet(url, servingCA2, bob)
		if err == nil && code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after rotation: bob on serving CA 2 = %d, %v; want 200\nstderr:\n%s", code, err, p.stderr)
		}
		time.Sleep(100 * time.Millisecond) // polling for the reload to a deadline
	}
	t.Logf("new serving certificate and client CA in force %s after the files changed", time.Since(rotated).Round(time.Millisecond))
	if _, err := tlsGet(url, servingCA1, alice); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("after rotation: a client trusting only serving CA 1: %v; want a certificate verification error", err)
	}
	if code, err := tlsGet(url, servingCA2, alice); err != nil || code != 401 {
		t.Errorf("after rotation: alice (client CA 1, removed) = %d, %v; want 401", code, err)
	}
	select {
	case <-p.exited:
		t.Fatalf("lazyapi exited: %v", p.err)
	default:
	}
	for _, want := range []string{"reloaded --tls-cert-file/--tls-private-key-file", "reloaded --client-ca-file"} {
		if _, ok := p.stderr.wait(time.Now().Add(time.Second), func(l string) bool { return strings.Contains(l, want) }); !ok {
			t.Errorf("no %q log entry:\n%s", want, p.stderr)
		}
	}
	// A half-written rotation (a certificate without its key yet) keeps
	// serving the loaded pair and says so once.
	replaceFile(t, certFile, srv1.CertFile)
	if _, ok := p.stderr.wait(time.Now().Add(10*time.Second), func(l string) bool {
		return strings.Contains(l, "cannot reload --tls-cert-file/--tls-private-key-file")
	}); !ok {
		t.Errorf("no warning about the mismatched pair:\n%s", p.stderr)
	}
	if code, err := tlsGet(url, servingCA2, bob); err != nil || code != 200 {
		t.Errorf("with a mismatched pair on disk: bob = %d, %v; want 200 on the loaded pair", code, err)
	}
	if strings.Contains(p.stderr.String(), "PRIVATE KEY") {
		t.Errorf("a log entry holds key material:\n%s", p.stderr)
	}
}

// tlsEtcd is an embedded etcd serving clients over TLS with client
// certificates required, restartable on the same ports and data with other
// certificates.
type tlsEtcd struct {
	dir      string
	cu, pu   url.URL
	e        *embed.Etcd
	Endpoint string
}

func (te *tlsEtcd) start(t *testing.T, ca *testpki.CA, server *testpki.Cert) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = te.dir
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{te.cu}, []url.URL{te.cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{te.pu}, []url.URL{te.pu}
	cfg.InitialCluster = cfg.Name + "=" + te.pu.String()
	cfg.ClientTLSInfo.CertFile = server.CertFile
	cfg.ClientTLSInfo.KeyFile = server.KeyFile
	cfg.ClientTLSInfo.TrustedCAFile = ca.File
	cfg.ClientTLSInfo.ClientCertAuth = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("cannot start TLS etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("TLS etcd not ready within 30s")
	}
	te.e = e
}

func (te *tlsEtcd) stop() {
	if te.e != nil {
		te.e.Close()
		te.e = nil
	}
}

// TestEtcdCertificateRotation moves etcd to a new CA, server and client
// certificates while lazyapi runs: lazyapi's --etcd-cafile, --etcd-certfile
// and --etcd-keyfile are replaced on disk, etcd restarts with the new ones,
// and lazyapi reconnects with them, without a restart. A CA that did not
// sign etcd's certificate is refused.
func TestEtcdCertificateRotation(t *testing.T) {
	ca1, ca2 := testpki.NewCA(t, "etcd-ca-1"), testpki.NewCA(t, "etcd-ca-2")
	te := &tlsEtcd{dir: t.TempDir(),
		cu: url.URL{Scheme: "https", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))},
		pu: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(t))}}
	te.Endpoint = te.cu.String()
	te.start(t, ca1, ca1.Server(t))
	t.Cleanup(te.stop)

	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "etcd-client.crt"), filepath.Join(dir, "etcd-client.key")
	c1 := ca1.Client(t, "lazyapi")
	replaceFile(t, caFile, ca1.File)
	replaceFile(t, certFile, c1.CertFile)
	replaceFile(t, keyFile, c1.KeyFile)

	// A CA that did not sign etcd's serving certificate: refused.
	bad := run(t, "--etcd-servers="+te.Endpoint, "--etcd-cafile="+ca2.File, "--etcd-certfile="+certFile, "--etcd-keyfile="+keyFile)
	if code := exitCode(bad.waitExit(30 * time.Second)); code != 1 {
		t.Errorf("with an etcd CA that did not sign etcd's certificate: exit %d, want 1", code)
	}

	p := start(t, "--etcd-servers="+te.Endpoint, "--etcd-cafile="+caFile, "--etcd-certfile="+certFile, "--etcd-keyfile="+keyFile)
	if code, body := rawGet(t, p.URL+"/api/v1/configmaps"); code != 200 {
		t.Fatalf("before rotation: LIST = %d: %s", code, body)
	}
	// Rotate: lazyapi's files first (as a certificate manager would), then
	// etcd restarts trusting and serving only CA 2.
	c2 := ca2.Client(t, "lazyapi")
	replaceFile(t, caFile, ca2.File)
	replaceFile(t, certFile, c2.CertFile)
	replaceFile(t, keyFile, c2.KeyFile)
	for _, want := range []string{"reloaded --etcd-certfile/--etcd-keyfile", "reloaded --etcd-cafile"} {
		if _, ok := p.stderr.wait(time.Now().Add(10*time.Second), func(l string) bool { return strings.Contains(l, want) }); !ok {
			t.Fatalf("no %q log entry:\n%s", want, p.stderr)
		}
	}
	te.stop()
	te.start(t, ca2, ca2.Server(t))
	rotated := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := rawGet(t, p.URL+"/api/v1/configmaps")
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after etcd moved to CA 2: LIST = %d\nstderr:\n%s", code, p.stderr)
		}
		time.Sleep(100 * time.Millisecond) // polling for the reconnect to a deadline
	}
	t.Logf("lazyapi read etcd with the rotated certificates %s after etcd restarted", time.Since(rotated).Round(time.Millisecond))
}
