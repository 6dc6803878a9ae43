package encryption_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/kmstest"
)

// FuzzDecrypt: any stored value — truncated or corrupted ciphertexts of
// every provider, KMS v2 envelopes included — decrypts or fails with a
// *DecryptError (which the proxy answers as a 500 Status); never a panic.
// The seeds are real values of each provider written by k8s.io/apiserver,
// and their truncations.
func FuzzDecrypt(f *testing.F) {
	dir, err := os.MkdirTemp("", "fz")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(plugin.Stop)
	providers := []string{enctest.Provider("aescbc", "", "k1"), enctest.Provider("aesgcm", "", "k1"),
		enctest.Provider("secretbox", "", "k1"), enctest.Provider("kms", plugin.Endpoint(), "fuzzkms"), enctest.Provider("identity", "")}
	read, err := enctest.WriteFile(dir, "read.yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: providers}))
	if err != nil {
		f.Fatal(err)
	}
	tr, err := encryption.New(encryption.Config{File: read})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(tr.Close)
	const key = "/registry/secrets/ns/s"
	for i, p := range providers[:4] {
		wf, err := enctest.WriteFile(dir, "w.yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: []string{p}}))
		if err != nil {
			f.Fatal(err)
		}
		w, err := enctest.NewWriter(wf)
		if err != nil {
			f.Fatal(err)
		}
		v, err := w.Encrypt("secrets", key, []byte("k8s\x00plaintext value"))
		w.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
		for _, n := range []int{len(v) - 1, len(v) / 2, 30, 24, 20, 9} {
			if n < len(v) {
				f.Add(v[:n])
			}
		}
		c := append([]byte(nil), v...)
		c[len(c)-1-i] ^= 0x55
		f.Add(c)
	}
	f.Add([]byte("k8s:enc:"))
	f.Add([]byte("k8s:enc:kms:v2:fuzzkms:"))
	f.Add([]byte("k8s:enc:kms:v2:fuzzkms:\x0a\x03abc\x12\x00"))
	f.Add([]byte("k8s:enc:nope:v1:k:"))
	f.Fuzz(func(t *testing.T, v []byte) {
		out, err := tr.Decrypt(context.Background(), "secrets", []byte(key), v)
		if err != nil {
			var de *encryption.DecryptError
			if !errors.As(err, &de) || de.Resource != "secrets" || de.Key != key {
				t.Fatalf("Decrypt(%q) = %v, want a *DecryptError", v, err)
			}
			return
		}
		if out == nil {
			t.Fatalf("Decrypt(%q) = nil, nil", v)
		}
		encryption.ParsePrefix(v)
	})
}
