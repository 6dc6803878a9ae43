package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/kmstest"
)

// TestEncryptionAgainstKubeAPIServer runs kube-apiserver v1.37 (built by
// bench/kube-apiserver.sh) and the lazyapi binary with the same
// EncryptionConfiguration on the same etcd: Secrets aesgcm (aescbc key1
// still read: Secrets written before a rotation are put into etcd
// directly by k8s.io/apiserver's transformer), ConfigMaps KMS v2 through a
// gRPC plugin on a Unix socket. kube-apiserver writes the objects; every
// GET and LIST, JSON and protobuf, of lazyapi equals kube-apiserver's
// (JSON semantically, protobuf as decoded objects; byte equality counted).
// Gated (needs the kube-apiserver build):
//
//	LAZYAPI_KUBEAPISERVER=1 go test ./e2e -run TestEncryptionAgainstKubeAPIServer -v
func TestEncryptionAgainstKubeAPIServer(t *testing.T) {
	script, _ := needKubeAPIServer(t)
	dir, err := os.MkdirTemp("", "kenc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop) // after kube-apiserver's (cleanups run last first)
	cfg, err := enctest.WriteFile(dir, "enc.yaml", enctest.Config(
		enctest.Rule{Resources: "secrets", Providers: []string{enctest.Provider("aesgcm", "", "k1"), enctest.Provider("aescbc", "", "key1"),
			enctest.Provider("secretbox", "", "k1"), enctest.Provider("identity", "")}},
		enctest.Rule{Resources: "configmaps", Providers: []string{enctest.Provider("kms", plugin.Endpoint(), "kmsv2"), enctest.Provider("identity", "")}}))
	if err != nil {
		t.Fatal(err)
	}
	old, err := enctest.WriteFile(dir, "old.yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: []string{enctest.Provider("aescbc", "", "key1")}}))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	kas := startKubeAPIServer(t, script, etcd.Endpoint, "--encryption-provider-config", cfg)
	kube := kas.do
	if code, b := kube("POST", "/api/v1/namespaces", "application/json", []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"enc"}}`)); code != 201 {
		t.Fatalf("create namespace: %d %s", code, b)
	}
	const nSecrets, nConfigMaps = 150, 100
	for i := range nSecrets {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s-%03d","labels":{"i":"%d"}},"type":"Opaque","data":{"password":"%s"}}`,
			i, i, "c2VjcmV0LQ==")
		if code, b := kube("POST", "/api/v1/namespaces/enc/secrets", "application/json", []byte(body)); code != 201 {
			t.Fatalf("create secret: %d %s", code, b)
		}
	}
	for i := range nConfigMaps {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c-%03d"},"data":{"k":"%s"}}`, i, strings.Repeat("v", i))
		if code, b := kube("POST", "/api/v1/namespaces/enc/configmaps", "application/json", []byte(body)); code != 201 {
			t.Fatalf("create configmap: %d %s", code, b)
		}
	}
	// Secrets from before the rotation (aescbc key1), written as
	// kube-apiserver wrote them then.
	w, err := enctest.NewWriter(old)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 5 {
		s := &corev1.Secret{}
		s.APIVersion, s.Kind = "v1", "Secret"
		s.Name, s.Namespace, s.UID = fmt.Sprintf("old-%d", i), "enc", "uid-old"
		s.Data = map[string][]byte{"k": []byte("old")}
		s.Type = corev1.SecretTypeOpaque // defaulted, as written through the API
		v, _ := storagefmt.Protobuf(s)
		k := storagefmt.Key("/registry", "secrets", "enc", s.Name)
		ev, err := w.Encrypt("secrets", k, v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Client.Put(context.Background(), k, string(ev)); err != nil {
			t.Fatal(err)
		}
	}
	// What kube-apiserver stored is encrypted.
	for key, prefix := range map[string]string{"/registry/secrets/enc/s-000": "k8s:enc:aesgcm:v1:k1:",
		"/registry/configmaps/enc/c-000": "k8s:enc:kms:v2:kmsv2:", "/registry/secrets/enc/old-0": "k8s:enc:aescbc:v1:key1:"} {
		r, err := etcd.Client.Get(context.Background(), key)
		if err != nil || len(r.Kvs) != 1 || !bytes.HasPrefix(r.Kvs[0].Value, []byte(prefix)) {
			t.Fatalf("etcd %s: %v, want a value starting %q", key, err, prefix)
		}
	}

	p := start(t, "--etcd-servers="+etcd.Endpoint, "--encryption-provider-config="+cfg)
	lazy := func(path, accept string) (int, []byte) { t.Helper(); return getAs(t, p.URL, path, accept) }
	const pb = "application/vnd.kubernetes.protobuf"
	var paths []string
	paths = append(paths, "/api/v1/namespaces/enc/secrets", "/api/v1/namespaces/enc/configmaps", "/api/v1/namespaces/enc/secrets?labelSelector=i%3D7",
		"/api/v1/namespaces/enc/secrets?limit=40", "/api/v1/namespaces/enc/configmaps?limit=30")
	for i := range nSecrets {
		paths = append(paths, fmt.Sprintf("/api/v1/namespaces/enc/secrets/s-%03d", i))
	}
	for i := range nConfigMaps {
		paths = append(paths, fmt.Sprintf("/api/v1/namespaces/enc/configmaps/c-%03d", i))
	}
	for i := range 5 {
		paths = append(paths, fmt.Sprintf("/api/v1/namespaces/enc/secrets/old-%d", i))
	}
	identicalJSON, identicalPB, n := 0, 0, 0
	firstDiff := ""
	for _, path := range paths {
		for _, accept := range []string{"application/json", pb} {
			kc, kb := kube("GET", path, accept, nil)
			lc, lb := lazy(path, accept)
			if kc != 200 || lc != 200 {
				t.Fatalf("GET %s (%s): kube-apiserver %d, lazyapi %d: %.300s", path, accept, kc, lc, lb)
			}
			n++
			if !bytes.Equal(kb, lb) && firstDiff == "" {
				firstDiff = fmt.Sprintf("%s (%s), %s", path, accept, firstDifference(kb, lb, 20, 40))
			}
			if bytes.Equal(kb, lb) {
				if accept == pb {
					identicalPB++
				} else {
					identicalJSON++
				}
				continue
			}
			if accept == pb {
				ko, _, err1 := scheme.Codecs.UniversalDeserializer().Decode(kb, nil, nil)
				lo, _, err2 := scheme.Codecs.UniversalDeserializer().Decode(lb, nil, nil)
				// A list's resourceVersion (and continue token) is the
				// revision it was read at: kube-apiserver writes leases
				// between the two reads.
				for _, o := range []runtime.Object{ko, lo} {
					if l, err := meta.ListAccessor(o); err == nil && o != nil {
						l.SetResourceVersion("")
						l.SetContinue("")
					}
				}
				if err1 != nil || err2 != nil || !apiequality.Semantic.DeepEqual(ko, lo) {
					t.Fatalf("GET %s (protobuf): lazyapi's answer differs from kube-apiserver's (%v %v)", path, err1, err2)
				}
				continue
			}
			var ko, lo map[string]any
			if json.Unmarshal(kb, &ko) != nil || json.Unmarshal(lb, &lo) != nil {
				t.Fatalf("GET %s: not JSON", path)
			}
			for _, o := range []map[string]any{ko, lo} {
				if m, ok := o["metadata"].(map[string]any); ok && strings.HasSuffix(o["kind"].(string), "List") {
					delete(m, "resourceVersion")
					delete(m, "continue")
				}
			}
			if !reflect.DeepEqual(ko, lo) {
				t.Fatalf("GET %s (JSON): lazyapi differs from kube-apiserver:\nkube %.600s\nlazy %.600s", path, kb, lb)
			}
		}
	}
	t.Logf("%d answers equal to kube-apiserver's; byte-identical: %d of %d JSON, %d of %d protobuf; plugin Decrypt calls %d",
		n, identicalJSON, n/2, identicalPB, n/2, plugin.DecryptCalls.Load())
	t.Logf("first byte difference: %s", firstDiff)

	sbox, err := enctest.WriteFile(dir, "sbox.yaml", enctest.Config(enctest.Rule{Resources: "secrets", Providers: []string{enctest.Provider("secretbox", "", "k1")}}))
	if err != nil {
		t.Fatal(err)
	}
	// LIST time, same etcd, same file: 10,000 Secrets per provider (aesgcm,
	// aescbc, secretbox, none: stored in plaintext, read through the identity
	// provider) and 10,000 ConfigMaps (KMS v2, none) written by
	// k8s.io/apiserver's transformers as kube-apiserver writes them;
	// medians of 5 consistent LISTs each, and each server's time over its
	// own time for the unencrypted LIST of the same resource and format.
	type bulk struct{ res, ns, provider, writer string }
	bulks := []bulk{{"secrets", "bulkplain", "none", ""}, {"secrets", "bulk", "aesgcm", cfg}, {"secrets", "bulkcbc", "aescbc", old},
		{"secrets", "bulksbox", "secretbox", sbox},
		{"configmaps", "bulkplain", "none", ""}, {"configmaps", "bulk", "kms v2", cfg}}
	base := map[string][2]time.Duration{}
	// Resident memory of each server around its LISTs of a row: before
	// (idle, its watch cache filled) and the peak during the warm-up LIST
	// and the 5 timed ones (VmHWM, reset first).
	var mem []string
	t.Logf("| LIST of 10,000 | provider | format | kube-apiserver | x none | lazyapi | x none | kube-apiserver / lazyapi |")
	t.Logf("|---|---|---|---|---|---|---|---|")
	for _, r := range bulks {
		var bw *enctest.Writer
		if r.writer != "" {
			if bw, err = enctest.NewWriter(r.writer); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 10000; i += 100 {
			var ops []clientv3.Op
			for j := i; j < i+100; j++ {
				var obj runtime.Object
				name := fmt.Sprintf("b-%05d", j)
				if r.res == "secrets" {
					obj = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name, UID: "u"}, Type: corev1.SecretTypeOpaque,
						Data: map[string][]byte{"tls.key": bytes.Repeat([]byte("k"), 1024)}}
				} else {
					obj = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: name, UID: "u"},
						Data: map[string]string{"k": strings.Repeat("v", 1024)}}
				}
				v, _ := storagefmt.Protobuf(obj)
				k := storagefmt.Key("/registry", r.res, r.ns, name)
				if bw != nil {
					if v, err = bw.Encrypt(r.res, k, v); err != nil {
						t.Fatal(err)
					}
				}
				ops = append(ops, clientv3.OpPut(k, string(v)))
			}
			if _, err := etcd.Client.Txn(context.Background()).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
		}
		if bw != nil {
			bw.Close()
		}
		path := "/api/v1/namespaces/" + r.ns + "/" + r.res
		for _, accept := range []string{"application/json", pb} {
			med := func(get func() int) time.Duration {
				get() // warm: the watch caches, the KMS DEK caches
				var ds []time.Duration
				for range 5 {
					start := time.Now()
					if code := get(); code != 200 {
						t.Fatalf("LIST %s: %d", path, code)
					}
					ds = append(ds, time.Since(start))
				}
				slices.Sort(ds)
				return ds[2]
			}
			var k, l time.Duration
			kBefore, kPeak := rssAround(kas.pid, func() { k = med(func() int { c, _ := kube("GET", path, accept, nil); return c }) })
			lBefore, lPeak := rssAround(p.cmd.Process.Pid, func() { l = med(func() int { c, _ := lazy(path, accept); return c }) })
			mem = append(mem, fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %d | %.2f |", r.res, r.provider,
				map[string]string{pb: "protobuf", "application/json": "JSON"}[accept], kBefore>>20, kPeak>>20, lBefore>>20, lPeak>>20,
				float64(kPeak)/float64(max(lPeak, 1))))
			bk := r.res + " " + accept
			if r.provider == "none" {
				base[bk] = [2]time.Duration{k, l}
			}
			b := base[bk]
			t.Logf("| %s | %s | %s | %v | %.2f | %v | %.2f | %.2f |", r.res, r.provider, map[string]string{pb: "protobuf"}[accept]+map[string]string{"application/json": "JSON"}[accept],
				k.Round(time.Millisecond), float64(k)/float64(b[0]), l.Round(time.Millisecond), float64(l)/float64(b[1]), float64(k)/float64(l))
		}
	}
	t.Logf("resident memory (MiB) around each row's LISTs:")
	t.Logf("| LIST of 10,000 | provider | format | kube-apiserver before | peak | lazyapi before | peak | kube-apiserver peak / lazyapi peak |")
	t.Logf("|---|---|---|---|---|---|---|---|")
	for _, m := range mem {
		t.Logf("%s", m)
	}
}

// rssAround returns the resident set of process pid before f and its peak
// during f (VmHWM, reset through /proc/pid/clear_refs first; where it
// cannot be reset the peak is the process's since its start). 0 when /proc
// cannot be read.
func rssAround(pid int, f func()) (before, peak int64) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	before = procStatus(pid, "VmRSS:")
	f()
	return before, procStatus(pid, "VmHWM:")
}
