package encryption_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/kmstest"
)

// BenchmarkDecrypt is the cost of decrypting one stored Secret of ~1.2 KiB
// per provider (KMS v2: DEK seed cached, as for every value after the
// first).
//
//	go test ./encryption -run '^$' -bench BenchmarkDecrypt -benchtime=200ms -count=5
func BenchmarkDecrypt(b *testing.B) {
	dir, err := os.MkdirTemp("", "kmsbd")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		b.Fatal(err)
	}
	defer plugin.Stop()
	providers := map[string]string{"identity": enctest.Provider("identity", ""), "aescbc": enctest.Provider("aescbc", "", "k1"),
		"aesgcm": enctest.Provider("aesgcm", "", "k1"), "secretbox": enctest.Provider("secretbox", "", "k1"),
		"kms": enctest.Provider("kms", plugin.Endpoint(), "benchdecrypt")}
	var all []string
	for _, p := range []string{"aescbc", "aesgcm", "secretbox", "kms", "identity"} {
		all = append(all, providers[p])
	}
	read, _ := enctest.WriteFile(dir, "read.yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: all}))
	tr, err := encryption.New(encryption.Config{File: read})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	plain := []byte("k8s\x00" + strings.Repeat("s", 1200))
	key := []byte("/registry/secrets/ns/name")
	for _, p := range []string{"identity", "aescbc", "aesgcm", "secretbox", "kms"} {
		f, _ := enctest.WriteFile(dir, p+".yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: []string{providers[p]}}))
		w, err := enctest.NewWriter(f)
		if err != nil {
			b.Fatal(err)
		}
		v, err := w.Encrypt("secrets", string(key), plain)
		w.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, err := tr.Decrypt(context.Background(), "secrets", key, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
