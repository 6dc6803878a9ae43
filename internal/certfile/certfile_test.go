package certfile_test

import (
	"crypto/tls"
	"os"
	"testing"

	"github.com/lazyapi/lazyapi/internal/certfile"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

func copyFile(t *testing.T, dst, src string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	// Write a new file and rename it over dst, as kubelet's secret volumes
	// and cert-manager swap files.
	if err := os.WriteFile(dst+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dst+".tmp", dst); err != nil {
		t.Fatal(err)
	}
}

// handshake dials a TLS server serving with srvCfg and returns the client's
// error (nil when the handshake and the client's verification succeed).
func handshake(t *testing.T, srvCfg, cliCfg *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.(*tls.Conn).Handshake() //nolint:errcheck // the client reports
		c.Close()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cliCfg)
	if err != nil {
		return err
	}
	return c.Close()
}

// TestReloadServingAndCAs: a key pair and a CA bundle replaced on disk are
// in force after the next Check; a broken replacement keeps the old ones.
func TestReloadServingAndCAs(t *testing.T) {
	ca1, ca2 := testpki.NewCA(t, "ca-1"), testpki.NewCA(t, "ca-2")
	srv1, srv2 := ca1.Server(t), ca2.Server(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := dir+"/tls.crt", dir+"/tls.key", dir+"/ca.crt"
	copyFile(t, certFile, srv1.CertFile)
	copyFile(t, keyFile, srv1.KeyFile)
	copyFile(t, caFile, ca1.File)

	kp, err := certfile.LoadKeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cas, err := certfile.LoadCAs(caFile)
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	r := &certfile.Reloader{}
	r.AddKeyPair("serving", kp, func() { changes++ })
	r.AddCAs("ca", cas, func() { changes++ })
	srvCfg := &tls.Config{GetCertificate: kp.GetCertificate}
	cliCfg := &tls.Config{ServerName: "127.0.0.1", InsecureSkipVerify: true, VerifyConnection: cas.VerifyServer()}

	if err := handshake(t, srvCfg, cliCfg); err != nil {
		t.Fatalf("before rotation: %v", err)
	}
	if n := r.Check(); n != 0 || changes != 0 {
		t.Fatalf("Check without a change = %d (%d callbacks), want 0", n, changes)
	}
	// Only the serving pair rotates to CA 2: the client, still on CA 1,
	// must refuse it (VerifyConnection really verifies).
	copyFile(t, certFile, srv2.CertFile)
	copyFile(t, keyFile, srv2.KeyFile)
	if n := r.Check(); n != 1 {
		t.Fatalf("Check after a key pair rotation = %d, want 1", n)
	}
	if err := handshake(t, srvCfg, cliCfg); err == nil {
		t.Fatal("a server certificate of a CA not in the bundle was accepted")
	}
	// The bundle follows: accepted again.
	copyFile(t, caFile, ca2.File)
	if n := r.Check(); n != 1 || changes != 2 {
		t.Fatalf("Check after a CA rotation = %d (%d callbacks), want 1 (2)", n, changes)
	}
	if err := handshake(t, srvCfg, cliCfg); err != nil {
		t.Fatalf("after rotating both: %v", err)
	}
	// A wrong name is refused.
	bad := cliCfg.Clone()
	bad.ServerName = "not-this-server.example"
	if err := handshake(t, srvCfg, bad); err == nil {
		t.Error("a certificate for another name was accepted")
	}
	// Half a rotation (a certificate whose key is not there yet) and a
	// garbage CA file keep what is loaded.
	copyFile(t, certFile, srv1.CertFile)
	if err := os.WriteFile(caFile, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n := r.Check(); n != 0 {
		t.Fatalf("Check after broken files = %d, want 0", n)
	}
	if err := handshake(t, srvCfg, cliCfg); err != nil {
		t.Fatalf("after broken files: %v (the loaded pair and bundle must stay)", err)
	}
	// The rotation completes.
	copyFile(t, keyFile, srv1.KeyFile)
	copyFile(t, caFile, ca1.File)
	if n := r.Check(); n != 2 {
		t.Fatalf("Check after the rotation completed = %d, want 2", n)
	}
	if err := handshake(t, srvCfg, cliCfg); err != nil {
		t.Fatalf("back on CA 1: %v", err)
	}
	if _, err := certfile.LoadKeyPair(certFile, dir+"/missing.key"); err == nil {
		t.Error("LoadKeyPair with a missing key succeeded")
	}
}
