package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strconv"
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

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// startTLSEtcd starts an embedded etcd that serves clients over TLS and
// requires a client certificate signed by the CA.
func startTLSEtcd(t *testing.T, ca *testpki.CA, server *testpki.Cert) string {
	t.Helper()
	free := func() string { return "127.0.0.1:" + strconv.Itoa(freePort(t)) }
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
	cfg.ClientTLSInfo.CertFile = server.CertFile
	cfg.ClientTLSInfo.KeyFile = server.KeyFile
	cfg.ClientTLSInfo.TrustedCAFile = ca.File
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
	ca := testpki.NewCA(t, "test-ca")
	client := ca.Client(t, "lazyapi")
	endpoint := startTLSEtcd(t, ca, ca.Server(t))

	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{client.TLS()}},
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
		"--etcd-cafile="+ca.File, "--etcd-certfile="+client.CertFile, "--etcd-keyfile="+client.KeyFile)
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
	bad := run(t, "--etcd-servers="+endpoint, "--etcd-cafile="+ca.File)
	if code := exitCode(bad.waitExit(30 * time.Second)); code != 1 {
		t.Errorf("without a client certificate: exit %d, want 1", code)
	}
	oneLine(t, bad.stderr.String(), "--etcd-servers")
}
