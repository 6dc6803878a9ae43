package main

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testpki"
)

// TestTLSFlags: --tls-min-version and --tls-cipher-suites take
// kube-apiserver's names, a real TLS client below the version or with no
// allowed suite is refused, and a bad value is an error naming the flag.
func TestTLSFlags(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	tlsArgs := []string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	// handshake serves one TLS handshake with c's serving configuration
	// and returns the client's error.
	handshake := func(t *testing.T, c *config, client *tls.Config) error {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			tc := tls.Server(conn, c.serving.servingTLS)
			tc.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
			if tc.Handshake() == nil {
				tc.Write([]byte("x")) //nolint:errcheck
			}
		}()
		client.RootCAs, client.ServerName = pool, "localhost"
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	parse := func(t *testing.T, extra ...string) *config {
		t.Helper()
		c, err := parseFlags(append(append([]string{}, tlsArgs...), extra...))
		if err != nil {
			t.Fatalf("parseFlags(%s) = %v", strings.Join(extra, " "), err)
		}
		return c
	}

	t.Run("default", func(t *testing.T) {
		c := parse(t)
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); err == nil {
			t.Error("TLS 1.1 client: handshake succeeded, want refused (default minimum TLS 1.2)")
		}
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12}); err != nil {
			t.Errorf("TLS 1.2 client: %v", err)
		}
	})
	t.Run("min version 1.3", func(t *testing.T) {
		c := parse(t, "--tls-min-version=VersionTLS13")
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
			t.Error("TLS 1.2 client: handshake succeeded, want refused with --tls-min-version=VersionTLS13")
		}
		if err := handshake(t, c, &tls.Config{MinVersion: tls.VersionTLS13}); err != nil {
			t.Errorf("TLS 1.3 client: %v", err)
		}
	})
	t.Run("cipher suites", func(t *testing.T) {
		// testpki keys are ECDSA.
		c := parse(t, "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305}}); err == nil {
			t.Error("TLS 1.2 client without the allowed suite: handshake succeeded, want refused")
		}
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}); err != nil {
			t.Errorf("TLS 1.2 client with the allowed suite: %v", err)
		}
		// kube-apiserver's legacy name is accepted too.
		c = parse(t, "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, TLS_RSA_WITH_RC4_128_SHA")
		if got := c.serving.insecureSuites(); len(got) != 1 || got[0] != "TLS_RSA_WITH_RC4_128_SHA" {
			t.Errorf("insecureSuites = %v, want the RC4 suite", got)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{append(tlsArgs[:3:3], "--tls-min-version=TLS13"), `invalid --tls-min-version "TLS13"`},
			{append(tlsArgs[:3:3], "--tls-min-version=VersionTLS14"), `invalid --tls-min-version "VersionTLS14"`},
			{append(tlsArgs[:3:3], "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,NOPE"), "invalid --tls-cipher-suites: Cipher suite NOPE not supported"},
			{[]string{"--tls-min-version=VersionTLS13"}, "--tls-min-version needs --secure-port"},
			{[]string{"--tls-cipher-suites=TLS_AES_128_GCM_SHA256"}, "--tls-cipher-suites needs --secure-port"},
		} {
			_, err := parseFlags(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%s) = %v, want an error with %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if _, ok := err.(usageError); err != nil && !ok {
				t.Errorf("parseFlags(%s): %T is not a usage error (exit status 2)", strings.Join(tt.args, " "), err)
			}
		}
	})
}
