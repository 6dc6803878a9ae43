package authn_test

import (
	"crypto/x509"
	"fmt"
	"testing"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// BenchmarkAuthenticate: the per-request cost of each method. "x509/verify"
// is a chain verification per request (what kube-apiserver does), the
// baseline of "x509/cached" (lazyapi: once per certificate).
func BenchmarkAuthenticate(b *testing.B) {
	ca := testpki.NewCA(b, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tokens := authn.Tokens{}
	for i := range 1000 {
		tokens[fmt.Sprintf("token-%032d", i)] = &authn.User{Name: fmt.Sprint("user-", i), Method: "token"}
	}
	chain := []*x509.Certificate{ca.Client(b, "alice", "team").Cert}
	header := []byte("Bearer " + fmt.Sprintf("token-%032d", 500))

	b.Run("token", func(b *testing.B) {
		a := authn.New(authn.Config{Tokens: tokens})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.Authenticate(header, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("x509/cached", func(b *testing.B) {
		a := authn.New(authn.Config{ClientCAs: pool})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := a.Authenticate(nil, chain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("x509/verify", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
