// Package testpki makes certificate authorities and certificates for tests:
// a CA, server certificates for loopback and client certificates with a
// CommonName and Organizations, as crypto/x509 values and PEM files.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

var serial atomic.Int64

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// File is the CA certificate as a PEM file.
	File string
}

// Cert is an issued certificate with its key.
type Cert struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertFile and KeyFile are PEM files of the certificate and its key.
	CertFile, KeyFile string
}

// TLS returns the certificate for a tls.Config.
func (c *Cert) TLS() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
}

// NewCA creates a CA named cn valid for an hour around now, with its
// certificate written to a file in t.TempDir().
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Cert: cert, Key: key, File: filepath.Join(t.TempDir(), "ca.crt")}
	writePEM(t, ca.File, "CERTIFICATE", der)
	return ca
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "lazyapi"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}, time.Hour)
}

// Client issues a client certificate for user cn in groups orgs.
func (ca *CA) Client(t testing.TB, cn string, orgs ...string) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, time.Hour)
}

// Expired issues a client certificate for cn that expired a minute ago.
func (ca *CA) Expired(t testing.TB, cn string) *Cert {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, -time.Minute)
}

// Issue signs tmpl (Subject, usages and names set by the caller) valid
// from an hour ago until now+validFor.
func (ca *CA) Issue(t testing.TB, tmpl *x509.Certificate, validFor time.Duration) *Cert {
	t.Helper()
	return ca.issue(t, tmpl, validFor)
}

func (ca *CA) issue(t testing.TB, tmpl *x509.Certificate, validFor time.Duration) *Cert {
	key := newKey(t)
	tmpl.SerialNumber = big.NewInt(serial.Add(1))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(validFor)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c := &Cert{Cert: cert, Key: key, CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	writePEM(t, c.CertFile, "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, c.KeyFile, "EC PRIVATE KEY", kder)
	return c
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
