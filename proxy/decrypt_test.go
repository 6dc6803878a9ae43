package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	lcache "github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/kmstest"
	"github.com/lazyapi/lazyapi/proxy"
)

// encRules is the configuration lazyapi reads in these tests: a rotation
// (aescbc key2 first, key1 still listed), aesgcm, secretbox and identity,
// for Secrets, every core resource ("*.": ConfigMaps) and a custom
// resource group ("*.example.com").
func encRules(first ...string) []enctest.Rule {
	ps := first
	if len(ps) == 0 {
		ps = []string{enctest.Provider("aescbc", "", "key2", "key1"), enctest.Provider("aesgcm", "", "k1"),
			enctest.Provider("secretbox", "", "k1"), enctest.Provider("identity", "")}
	}
	return []enctest.Rule{{Resources: "secrets", Providers: ps}, {Resources: "*.", Providers: ps},
		{Resources: "*.example.com", Providers: ps}}
}

// encRulesKMS is encRules with a KMS v2 provider (the plugin at endpoint)
// before identity.
// (KMS provider names are unique per configuration: one per rule.)
func encRulesKMS(endpoint string) []enctest.Rule {
	rs := kmsRules(endpoint)
	for i := range rs {
		rs[i].Providers = append([]string{enctest.Provider("aescbc", "", "key2", "key1"), enctest.Provider("aesgcm", "", "k1"),
			enctest.Provider("secretbox", "", "k1")}, append(rs[i].Providers, enctest.Provider("identity", ""))...)
	}
	return rs
}

// kmsRules are encRules' three rules with only a KMS v2 provider each.
func kmsRules(endpoint string) []enctest.Rule {
	rs := encRules("x")
	for i := range rs {
		rs[i].Providers = []string{enctest.Provider("kms", endpoint, fmt.Sprintf("twinkms%d", i))}
	}
	return rs
}

// encWriters are kube-apiserver configurations over time: each writes with
// its first provider (aescbc key1 before the rotation, key2 after, aesgcm,
// secretbox, KMS v2 through the plugin at kmsEndpoint, identity).
func encWriters(t testing.TB, dir, kmsEndpoint string) []*enctest.Writer {
	t.Helper()
	var ws []*enctest.Writer
	for i, p := range []string{enctest.Provider("aescbc", "", "key1"), enctest.Provider("aescbc", "", "key2", "key1"),
		enctest.Provider("aesgcm", "", "k1"), enctest.Provider("secretbox", "", "k1"), "kms", enctest.Provider("identity", "")} {
		rules := encRules(p)
		if p == "kms" {
			rules = kmsRules(kmsEndpoint)
		}
		f, err := enctest.WriteFile(dir, fmt.Sprintf("writer%d.yaml", i), enctest.Config(rules...))
		if err != nil {
			t.Fatal(err)
		}
		w, err := enctest.NewWriter(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		ws = append(ws, w)
	}
	return ws
}

func newEncryption(t testing.TB, file string) *encryption.Transformers {
	t.Helper()
	tr, err := encryption.New(encryption.Config{File: file})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// withEncryption serves with tr; cached adds a watch cache (hold: holding
// decrypted values).
func withEncryption(t testing.TB, tr *encryption.Transformers, cached, hold bool) envOption {
	return func(cfg *proxy.Config) {
		cfg.Encryption = tr
		if !cached {
			return
		}
		c, err := lcache.New(lcache.Config{Client: cfg.Client, MemoryBytes: 1 << 30, Metrics: cfg.Metrics,
			ProgressInterval: 100 * time.Millisecond, Decrypt: tr.Decrypt, HoldDecrypted: hold})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache, cfg.CacheDecrypted = c, hold
	}
}

func widgetCRD() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com", "uid": "u1"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "additionalPrinterColumns": []any{
				map[string]any{"name": "Color", "type": "string", "jsonPath": ".spec.color"}}}},
		},
		"status": map[string]any{
			"conditions":    []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
		},
	}}
}

// encObject is one object written to both etcds.
type encObject struct {
	resource, key string
	plain         []byte
}

// encObjects returns n Secrets, n ConfigMaps (two namespaces) and n
// Widgets with labels, in kube-apiserver's storage formats.
func encObjects(t testing.TB, n int) []encObject {
	t.Helper()
	var out []encObject
	ts := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for i := range n {
		ns := []string{"a", "b"}[i%2]
		labels := map[string]string{"parity": []string{"even", "odd"}[i%2], "tier": []string{"web", "db", "cache"}[i%3]}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%03d", i), UID: types.UID(fmt.Sprintf("uid-s-%d", i)),
			Labels: labels, CreationTimestamp: ts}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"password": []byte(fmt.Sprintf("hunter%d", i))}}
		c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("c-%03d", i), UID: types.UID(fmt.Sprintf("uid-c-%d", i)),
			Labels: labels, CreationTimestamp: ts}, Data: map[string]string{"k": strings.Repeat("v", i)}}
		w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"namespace": ns, "name": fmt.Sprintf("w-%03d", i), "uid": fmt.Sprintf("uid-w-%d", i),
				"labels": map[string]any{"parity": labels["parity"], "tier": labels["tier"]}, "creationTimestamp": "2026-01-02T03:04:05Z"},
			"spec": map[string]any{"color": fmt.Sprintf("c%d", i)}}}
		for _, o := range []struct {
			res, prefix, name string
			obj               runtime.Object
			json              bool
		}{{"secrets", "secrets", s.Name, s, false}, {"configmaps", "configmaps", c.Name, c, false}, {"widgets.example.com", "example.com/widgets", w.GetName(), w, true}} {
			var v []byte
			var err error
			if o.json {
				v, err = storagefmt.JSON(o.obj)
			} else {
				v, err = storagefmt.Protobuf(o.obj)
			}
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, encObject{resource: o.res, key: storagefmt.Key("/registry", o.prefix, ns, o.name), plain: v})
		}
	}
	return out
}

// encTwins: etcd "plain" holds the objects as stored without encryption,
// etcd "enc" the same objects encrypted by kube-apiserver's transformers,
// written in the same order (same revisions). lazyapi on plain is the
// reference (its own tests check it against apimachinery); lazyapi on enc
// from etcd, from the cache holding encrypted values and from the cache
// holding decrypted ones must answer byte for byte the same.
type encTwins struct {
	plain   *env
	servers map[string]*env // "etcd", "cache", "cache-decrypted"
	objects []encObject
	rev     int64
}

func startEncTwins(t *testing.T, n int) *encTwins {
	t.Helper()
	dir, err := os.MkdirTemp("", "twin") // a Unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	readCfg, err := enctest.WriteFile(dir, "read.yaml", enctest.Config(encRulesKMS(plugin.Endpoint())...))
	if err != nil {
		t.Fatal(err)
	}
	writers := encWriters(t, dir, plugin.Endpoint())
	tw := &encTwins{plain: startEnv(t), servers: map[string]*env{}, objects: encObjects(t, n)}
	encEnv := startEnv(t, withEncryption(t, newEncryption(t, readCfg), false, false))
	crd, err := storagefmt.JSON(widgetCRD())
	if err != nil {
		t.Fatal(err)
	}
	const crdKey = "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
	tw.plain.putRaw(t, crdKey, crd)
	encEnv.putRaw(t, crdKey, crd)
	var pkv, ekv [][2]string
	seen := map[string]int{}
	for i, o := range tw.objects {
		// Objects come as (Secret, ConfigMap, Widget) triples: shift the
		// writer per triple so that every writer writes every resource.
		ev, err := writers[(i/3+i%3)%len(writers)].Encrypt(o.resource, o.key, o.plain)
		if err != nil {
			t.Fatal(err)
		}
		pkv = append(pkv, [2]string{o.key, string(o.plain)})
		ekv = append(ekv, [2]string{o.key, string(ev)})
		prov, key := encryption.ParsePrefix(ev)
		if prov == "kms" {
			key = "twinkms"
		}
		seen[o.resource+" "+prov+":"+key]++
	}
	// Every provider and key wrote values of every resource.
	for _, res := range []string{"secrets", "configmaps", "widgets.example.com"} {
		for _, pk := range []string{"aescbc:key1", "aescbc:key2", "aesgcm:k1", "secretbox:k1", "kms:twinkms", "identity:"} {
			if seen[res+" "+pk] == 0 {
				t.Fatalf("no %s value written with %s (written: %v)", res, pk, seen)
			}
		}
	}
	tw.rev = tw.plain.putMany(t, pkv)
	if r := encEnv.putMany(t, ekv); r != tw.rev {
		t.Fatalf("revisions differ: plain %d, encrypted %d", tw.rev, r)
	}
	tw.servers["etcd"] = encEnv
	// Proxies with caches on the encrypted etcd.
	for _, hold := range []bool{false, true} {
		name := "cache"
		if hold {
			name = "cache-decrypted"
		}
		e := startEnvOn(t, encEnv, withEncryption(t, newEncryption(t, readCfg), true, hold))
		tw.servers[name] = e
	}
	// The resource tables know the CRD.
	for _, e := range append([]*env{tw.plain}, encEnv) {
		waitFor(t, "widgets served", func() error {
			if code, _, body := e.raw(t, "GET", "/apis/example.com/v1/widgets", ""); code != 200 {
				return fmt.Errorf("%d %s", code, body)
			}
			return nil
		})
	}
	return tw
}

// startEnvOn starts another proxy on base's etcd and resource table.
func startEnvOn(t testing.TB, base *env, opts ...envOption) *env {
	t.Helper()
	return startEnvWith(t, base.etcd, base.table, opts...)
}

// waitCachedAll waits until every cached server answers a consistent read
// of every resource from its cache.
func (tw *encTwins) waitCached(t *testing.T) {
	t.Helper()
	for name, e := range tw.servers {
		if !strings.HasPrefix(name, "cache") {
			continue
		}
		for _, p := range []string{"/api/v1/secrets", "/api/v1/configmaps", "/apis/example.com/v1/widgets"} {
			waitCacheHit(t, e, p)
		}
	}
}

// waitCacheHit waits until a consistent LIST of p is served from e's
// watch cache.
func waitCacheHit(t testing.TB, e *env, p string) {
	t.Helper()
	waitFor(t, "cached "+p, func() error {
		m := `lazyapi_cache_requests_total{resource="` + resOf(p) + `",result="hit"}`
		before, _ := metricValue(e.ms, m)
		e.raw(t, "GET", p+"?limit=1", "")
		after, _ := metricValue(e.ms, m)
		if after <= before {
			return fmt.Errorf("not served from the cache yet")
		}
		return nil
	})
}

func resOf(p string) string {
	switch {
	case strings.HasSuffix(p, "secrets"):
		return "secrets"
	case strings.HasSuffix(p, "configmaps"):
		return "configmaps"
	}
	return "widgets.example.com"
}

// TestEncryptedIdentical: GET, LIST (JSON, protobuf, Table, partial
// metadata, YAML; selectors; pages) and WATCH of Secrets, ConfigMaps and a
// custom resource encrypted with aescbc (before and after a key rotation),
// aesgcm, secretbox, KMS v2 and identity are byte-identical to the same objects
// stored unencrypted, from etcd and from the watch cache (holding values
// encrypted or decrypted); client-go informers see the objects
// apimachinery decodes from the plaintext.
func TestEncryptedIdentical(t *testing.T) {
	tw := startEncTwins(t, 30)
	tw.waitCached(t)
	accepts := []string{"application/json", "application/vnd.kubernetes.protobuf", "application/yaml", kubectlTableAccept,
		"application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"}
	paths := []string{"/api/v1/secrets", "/api/v1/namespaces/a/secrets", "/api/v1/configmaps", "/apis/example.com/v1/widgets",
		"/apis/example.com/v1/namespaces/b/widgets"}
	queries := []string{"", "?labelSelector=parity%3Dodd", "?labelSelector=tier+in+(web,db)&limit=4", "?limit=7",
		"?fieldSelector=metadata.name%3Ds-003", "?resourceVersion=0", "?fieldSelector=type%3DOpaque"}
	n := 0
	compare := func(path, accept string) {
		t.Helper()
		wc, _, want := tw.plain.raw(t, "GET", path, accept)
		for name, e := range tw.servers {
			code, _, got := e.raw(t, "GET", path, accept)
			if code != wc || !bytes.Equal(got, want) {
				t.Fatalf("GET %s (%s) from %s: %d %d bytes, want %d %d bytes:\n got  %.500q\n want %.500q", path, accept, name, code, len(got), wc, len(want), got, want)
			}
			n++
		}
	}
	for _, p := range paths {
		for _, q := range queries {
			if strings.Contains(q, "type") && !strings.Contains(p, "secrets") {
				continue
			}
			for _, a := range accepts {
				compare(p+q, a)
			}
		}
	}
	for _, o := range []string{"/api/v1/namespaces/a/secrets/s-000", "/api/v1/namespaces/b/secrets/s-001", "/api/v1/namespaces/a/secrets/s-002",
		"/api/v1/namespaces/b/secrets/s-003", "/api/v1/namespaces/a/secrets/s-004", "/api/v1/namespaces/b/configmaps/c-007",
		"/apis/example.com/v1/namespaces/a/widgets/w-008", "/apis/example.com/v1/namespaces/b/widgets/w-009"} {
		for _, a := range accepts[:4] {
			compare(o, a)
			compare(o+"?resourceVersion=0", a)
		}
	}
	// WATCH from rv=0: the initial ADDED events.
	for _, p := range []string{"/api/v1/secrets", "/api/v1/namespaces/a/configmaps?labelSelector=parity%3Deven", "/apis/example.com/v1/widgets"} {
		sep := "?"
		if strings.Contains(p, "?") {
			sep = "&"
		}
		for _, a := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			if strings.Contains(p, "widgets") && a != "application/json" {
				continue
			}
			want := watchFrames(t, tw.plain, p+sep+"watch=true&resourceVersion=0", a, 0)
			for name, e := range tw.servers {
				got := watchFrames(t, e, p+sep+"watch=true&resourceVersion=0", a, len(want))
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("WATCH %s (%s) from %s: %d frames differ from the unencrypted ones (%d)", p, a, name, len(got), len(want))
				}
				n++
			}
		}
	}
	t.Logf("%d answers compared", n)

	// Informers: the objects apimachinery decodes from the plaintext.
	want := map[string]string{}
	for _, o := range tw.objects {
		if o.resource != "secrets" {
			continue
		}
		obj := oracle(t, o.plain, 0).(*corev1.Secret)
		want[obj.Namespace+"/"+obj.Name] = string(obj.Data["password"])
	}
	for name, e := range tw.servers {
		for _, cs := range []kubernetes.Interface{e.cs, e.pcs} {
			f := informers.NewSharedInformerFactory(cs, 0)
			inf := f.Core().V1().Secrets().Informer()
			ctx, cancel := context.WithCancel(context.Background())
			f.Start(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				t.Fatalf("%s: informer did not sync", name)
			}
			got := map[string]string{}
			for _, o := range inf.GetStore().List() {
				s := o.(*corev1.Secret)
				got[s.Namespace+"/"+s.Name] = string(s.Data["password"])
			}
			cancel()
			f.Shutdown()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: informer store %v, want %v", name, got, want)
			}
		}
	}
}

// watchFrames reads a watch's frames (JSON lines, or length-prefixed
// protobuf) until it ends (timeoutSeconds=1), or until n frames when n > 0,
// and returns them.
func watchFrames(t *testing.T, e *env, path, accept string, n int) [][]byte {
	t.Helper()
	// n frames: read until they came (a 1 s watch ended before the
	// initial events of 800 Secrets from etcd on a -race CI run at load
	// 10); n 0: all the frames of a 1 s watch; n < 0: every frame until
	// the server ends the watch (an ERROR event ends it), within 60 s.
	timeout := "1"
	if n != 0 {
		timeout = "60"
	}
	req, err := http.NewRequest("GET", e.url+path+"&timeoutSeconds="+timeout, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("WATCH %s: %d", path, resp.StatusCode)
	}
	var frames [][]byte
	r := bufio.NewReader(resp.Body)
	for {
		var f []byte
		if strings.Contains(accept, "protobuf") {
			var h [4]byte
			if _, err := ioReadFull(r, h[:]); err != nil {
				break
			}
			f = make([]byte, int(h[0])<<24|int(h[1])<<16|int(h[2])<<8|int(h[3]))
			if _, err := ioReadFull(r, f); err != nil {
				t.Fatal(err)
			}
		} else {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break
			}
			f = line
		}
		frames = append(frames, f)
		if len(frames) == n {
			break
		}
	}
	if len(frames) == 0 {
		t.Fatalf("WATCH %s: no events", path)
	}
	return frames
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestDecryptFailure: a Secret whose key is not in the configuration
// fails its GET, a LIST that includes it (first page: a 500 Status; deep
// in a streamed list: the stream is aborted, never a short 200) and a
// watch (an ERROR event), with a Status naming resource, key and provider
// and never the data; the failure is counted.
func TestDecryptFailure(t *testing.T) {
	dir := t.TempDir()
	readCfg, _ := enctest.WriteFile(dir, "read.yaml", enctest.Config(encRules()...))
	otherCfg, _ := enctest.WriteFile(dir, "other.yaml", enctest.Config(encRules(enctest.Provider("aesgcm", "", "lost"))...))
	goodCfg, _ := enctest.WriteFile(dir, "good.yaml", enctest.Config(encRules(enctest.Provider("aesgcm", "", "k1"))...))
	lost, err := enctest.NewWriter(otherCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	good, err := enctest.NewWriter(goodCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	ems := metrics.NewSet()
	tr, err := encryption.New(encryption.Config{File: readCfg, Metrics: ems})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			e := startEnv(t, withEncryption(t, tr, cached, false))
			// 3,000 good Secrets (a streamed LIST), one bad one at the end.
			var kvs [][2]string
			for i := range 3000 {
				s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("s-%05d", i)},
					Data: map[string][]byte{"k": bytes.Repeat([]byte("x"), 500)}}
				v, _ := storagefmt.Protobuf(s)
				k := storagefmt.Key("/registry", "secrets", "ns", s.Name)
				ev, err := good.Encrypt("secrets", k, v)
				if err != nil {
					t.Fatal(err)
				}
				kvs = append(kvs, [2]string{k, string(ev)})
			}
			bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "zz-bad"}, Data: map[string][]byte{"k": []byte("TOPSECRET")}}
			bv, _ := storagefmt.Protobuf(bad)
			badKey := storagefmt.Key("/registry", "secrets", "ns", "zz-bad")
			ev, err := lost.Encrypt("secrets", badKey, bv)
			if err != nil {
				t.Fatal(err)
			}
			kvs = append(kvs, [2]string{badKey, string(ev)})
			rev := e.putMany(t, kvs)
			_ = rev
			if cached {
				waitCacheHit(t, e, "/api/v1/secrets")
			}
			checkStatus := func(what string, code int, body []byte) {
				t.Helper()
				if code != 500 || !bytes.Contains(body, []byte(`InternalError`)) ||
					(!bytes.Contains(body, []byte(`provider \"aesgcm\" key \"lost\"`)) && !bytes.Contains(body, []byte(`provider "aesgcm" key "lost"`))) ||
					!bytes.Contains(body, []byte(badKey)) || bytes.Contains(body, []byte("TOPSECRET")) {
					t.Fatalf("%s = %d %s, want a 500 Status naming %s and provider aesgcm key lost", what, code, body, badKey)
				}
			}
			code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns/secrets/zz-bad", "application/json")
			checkStatus("GET", code, body)
			code, _, body = e.raw(t, "GET", "/api/v1/namespaces/ns/secrets?fieldSelector=metadata.name%3Dzz-bad", "application/json")
			checkStatus("LIST of it", code, body)
			// A long streamed LIST: aborted, not a short 200.
			for _, a := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
				resp, err := http.Get(e.url + "/api/v1/secrets?accept=" + a)
				if err == nil {
					req, _ := http.NewRequest("GET", e.url+"/api/v1/secrets", nil)
					req.Header.Set("Accept", a)
					resp.Body.Close()
					resp, err = http.DefaultClient.Do(req)
				}
				if err == nil {
					var b bytes.Buffer
					_, err = b.ReadFrom(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode == 200 {
						t.Fatalf("LIST (%s) with an undecryptable item: complete 200 of %d bytes", a, b.Len())
					}
					if err == nil {
						checkStatus("LIST "+a, resp.StatusCode, b.Bytes())
					}
				}
			}
			// client-go sees an error, never a list without the item.
			if l, err := e.cs.CoreV1().Secrets("ns").List(context.Background(), metav1.ListOptions{}); err == nil {
				t.Fatalf("client-go LIST succeeded with %d items", len(l.Items))
			}
			// WATCH: the initial events, then an ERROR event, then the end
			// (read to the server's end: 3,000 Secrets decrypted from etcd
			// took over the 1 s of a short watch in a -race CI run).
			frames := watchFrames(t, e, "/api/v1/namespaces/ns/secrets?watch=true&resourceVersion=0", "application/json", -1)
			last := frames[len(frames)-1]
			var we struct {
				Type   string
				Object json.RawMessage
			}
			if err := json.Unmarshal(last, &we); err != nil || we.Type != "ERROR" {
				t.Fatalf("last watch frame %.300q, want an ERROR event", last)
			}
			checkStatus("WATCH", 500, we.Object)
			if v, err := metricValue(ems, `lazyapi_decrypt_failures_total{resource="secrets",provider="aesgcm"}`); err != nil || v < 5 {
				t.Fatalf("lazyapi_decrypt_failures_total = %v, %v; want >= 5", v, err)
			}
		})
	}
}
