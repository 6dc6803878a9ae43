package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, as PEM files in dir.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T, dir string) pki {
	t.Helper()
	caKey := mustKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key := mustKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := issue(2, "etcd", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cliDER, cliKey := issue(3, "lazyapi", x509.ExtKeyUsageClientAuth, nil)
	p := pki{
		ca:         filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "server.crt"), serverKey: filepath.Join(dir, "server.key"),
		clientCert: filepath.Join(dir, "client.crt"), clientKey: filepath.Join(dir, "client.key"),
	}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	writePEM(t, p.serverCert, "CERTIFICATE", srvDER)
	writePEM(t, p.clientCert, "CERTIFICATE", cliDER)
	writeKey(t, p.serverKey, srvKey)
	writeKey(t, p.clientKey, cliKey)
	return p
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, k *ecdsa.PrivateKey) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}

// startTLSEtcd starts an embedded etcd that serves clients over TLS and
// requires a client certificate signed by the CA.
func startTLSEtcd(t *testing.T, p pki) string {
	t.Helper()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu := url.URL{Scheme: "https", Host: free()}
	pu := url.URL{Scheme: "http", Host: free()}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.ClientTLSInfo.CertFile = p.serverCert
	cfg.ClientTLSInfo.KeyFile = p.serverKey
	cfg.ClientTLSInfo.TrustedCAFile = p.ca
	cfg.ClientTLSInfo.ClientCertAuth = true
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("cannot start TLS etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("TLS etcd not ready within 30s")
	}
	return cu.String()
}

// TestEtcdTLSAndPrefix runs lazyapi against an etcd that requires client
// certificates, with a non-default --etcd-prefix.
func TestEtcdTLSAndPrefix(t *testing.T) {
	p := newPKI(t, t.TempDir())
	endpoint := startTLSEtcd(t, p)

	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(p.ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	putAt := func(prefix, name string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tls", UID: types.UID("uid-" + name)}}
		val := mustProtobuf(t, cm)
		if _, err := cli.Put(ctx, prefix+"/configmaps/tls/"+name, string(val)); err != nil {
			t.Fatal(err)
		}
	}
	putAt("/custom/prefix", "under-custom")
	putAt("/registry", "under-registry")

	srv := start(t, "--etcd-servers="+endpoint, "--etcd-prefix=/custom/prefix",
		"--etcd-cafile="+p.ca, "--etcd-certfile="+p.clientCert, "--etcd-keyfile="+p.clientKey)
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: srv.URL})
	list, err := cs.CoreV1().ConfigMaps("tls").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list over TLS etcd: %v", err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "under-custom" {
		t.Errorf("list with --etcd-prefix=/custom/prefix = %v, want only under-custom", list.Items)
	}

	// Without a client certificate etcd refuses the connection: lazyapi
	// says so in one line and exits 1.
	bad := run(t, "--etcd-servers="+endpoint, "--etcd-cafile="+p.ca)
	if code := exitCode(bad.waitExit(30 * time.Second)); code != 1 {
		t.Errorf("without a client certificate: exit %d, want 1", code)
	}
	oneLine(t, bad.stderr.String(), "--etcd-servers")
}
