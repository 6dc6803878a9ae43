package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/enctest"
	"github.com/lazyapi/lazyapi/internal/kmstest"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// BenchmarkEncryptedEtcdList: LISTs of encrypted Secrets served from etcd
// (no watch cache), the reads whose size pass decrypts values (a selector
// with limit; a protobuf LIST over 2 MiB), per provider, against the same
// LIST of Secrets stored unencrypted (provider=none, identity), with the
// process CPU per LIST (cpu-ns/op: lazyapi and the embedded etcd, which
// serves both of lazyapi's passes over the range). 5,000 Secrets of ~1.2
// KiB per provider, labelled parity=even|odd:
//
//	go test ./proxy -run '^$' -bench BenchmarkEncryptedEtcdList -benchtime 20x
func BenchmarkEncryptedEtcdList(b *testing.B) {
	dir, err := os.MkdirTemp("", "kmse")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plugin.Stop)
	providers := map[string]string{
		"none": enctest.Provider("identity", ""), "aesgcm": enctest.Provider("aesgcm", "", "k1"),
		"kms": enctest.Provider("kms", plugin.Endpoint(), "benchkms")}
	order := []string{"none", "aesgcm", "kms"}
	readCfg, err := enctest.WriteFile(dir, "read.yaml", enctest.Config(enctest.Rule{Resources: "secrets",
		Providers: []string{providers["aesgcm"], providers["kms"], providers["none"]}}))
	if err != nil {
		b.Fatal(err)
	}
	tr := newEncryption(b, readCfg)
	e := startEnv(b, withEncryption(b, tr, false, false))
	const n = 5000
	for _, p := range order {
		f, _ := enctest.WriteFile(dir, p+".yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: []string{providers[p]}}))
		w, err := enctest.NewWriter(f)
		if err != nil {
			b.Fatal(err)
		}
		kvs := make([][2]string, 0, n)
		for j := range n {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: p, Name: fmt.Sprintf("s-%05d", j), UID: "u",
				Labels: map[string]string{"parity": []string{"even", "odd"}[j%2]}}, Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{"tls.key": []byte(strings.Repeat("k", 1024))}}
			v, _ := storagefmt.Protobuf(s)
			k := storagefmt.Key("/registry", "secrets", p, s.Name)
			ev, err := w.Encrypt("secrets", k, v)
			if err != nil {
				b.Fatal(err)
			}
			kvs = append(kvs, [2]string{k, string(ev)})
		}
		e.putMany(b, kvs)
		w.Close()
	}
	get := func(b *testing.B, url, accept string) int64 {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Accept", accept)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		nb, err := io.Copy(io.Discard, resp.Body)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("GET %s %s: %d %v", url, accept, resp.StatusCode, err)
		}
		return nb
	}
	for _, c := range []struct{ name, accept, query string }{
		{"json-limit500-selector", "application/json", "?limit=500&labelSelector=parity%3Dodd"},
		{"table-limit500-selector", kubectlTableAccept, "?limit=500&labelSelector=parity%3Dodd"},
		{"yaml-limit500-selector", "application/yaml", "?limit=500&labelSelector=parity%3Dodd"},
		{"protobuf-all", "application/vnd.kubernetes.protobuf", ""},
	} {
		for _, p := range order {
			url := e.url + "/api/v1/namespaces/" + p + "/secrets" + c.query
			get(b, url, c.accept) // the KMS DEK seed cached
			b.Run("list="+c.name+"/provider="+p, func(b *testing.B) {
				var nb int64
				cpu0 := processCPU()
				for b.Loop() {
					nb = get(b, url, c.accept)
				}
				reportCPU(b, cpu0)
				b.SetBytes(nb)
			})
		}
	}
}
