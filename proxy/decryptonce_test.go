package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/proxy"
)

// decryptCounter wraps k8s.io/apiserver's transformers and counts their
// decryptions per stored value (etcd key and ciphertext).
type decryptCounter struct {
	mu sync.Mutex
	n  map[string]int // key + "\x00" + hash of the ciphertext
}

func (c *decryptCounter) wrap(_ string, t value.Transformer) value.Transformer {
	return &countingTransformer{Transformer: t, c: c}
}

func (c *decryptCounter) reset() {
	c.mu.Lock()
	c.n = map[string]int{}
	c.mu.Unlock()
}

// counts returns the decryptions since the last reset.
func (c *decryptCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func valueID(key string, stored []byte) string {
	h := fnv.New64a()
	h.Write(stored)
	return fmt.Sprintf("%s\x00%x", key, h.Sum64())
}

type countingTransformer struct {
	value.Transformer
	c *decryptCounter
}

func (t *countingTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	id := valueID(string(dataCtx.AuthenticatedData()), data)
	t.c.mu.Lock()
	t.c.n[id]++
	t.c.mu.Unlock()
	return t.Transformer.TransformFromStorage(ctx, data, dataCtx)
}

// TestDecryptOncePerRead counts, with a counting wrapper around
// k8s.io/apiserver's own transformers, the decryptions of every stored
// value per read: a LIST (JSON, protobuf, Table, YAML, partial metadata
// in JSON and protobuf; selectors; limit), a GET, a watch's initial events
// and change events (two watchers, shared frames), from etcd and from the
// watch cache holding values encrypted decrypt each value they serve once
// (a protobuf LIST from the cache decrypted each twice: its size pass and
// its write pass); a cache holding decrypted values decrypts nothing. A
// protobuf LIST from etcd larger than 2 MiB reads etcd twice (sizes, then
// items) and so decrypts twice.
func TestDecryptOncePerRead(t *testing.T) {
	dir, err := os.MkdirTemp("", "once")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfgFile, err := enctest.WriteFile(dir, "enc.yaml", enctest.Config(enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "k1"), enctest.Provider("aescbc", "", "k1")}}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := enctest.NewWriter(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	counter := &decryptCounter{n: map[string]int{}}
	tr, err := encryption.New(encryption.Config{File: cfgFile, Wrap: counter.wrap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)

	// 800 Secrets of ~3 KiB: a protobuf LIST of them is over 2 MiB
	// (protoBufferBytes; ~1.2 times it), over several etcd pages (50) and
	// cache pages (256). Under the race detector (where the test took
	// 72 s of CPU with them, 18.5 s without) the bound is 256 KiB and the
	// Secrets ~330 bytes: the same counts of items and pages, and the same
	// proportions to the bound (the whole list ~1.2 times it, the odd
	// half ~0.6), so the same reads cross it.
	const n = 800
	size := 3000
	if raceEnabled {
		// Before startEnv: restored after the servers stop (cleanups
		// run last-in first-out).
		t.Cleanup(proxy.SetProtoBufferBytes(256 << 10))
		size = 330
	}
	type stored struct{ key, id string }
	var (
		objs []stored
		kvs  [][2]string
	)
	encrypt := func(s *corev1.Secret) (string, string) {
		v, err := storagefmt.Protobuf(s)
		if err != nil {
			t.Fatal(err)
		}
		k := storagefmt.Key("/registry", "secrets", s.Namespace, s.Name)
		ev, err := w.Encrypt("secrets", k, v)
		if err != nil {
			t.Fatal(err)
		}
		return k, string(ev)
	}
	secret := func(i int, data string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("s-%04d", i), UID: "u",
			Labels: map[string]string{"parity": []string{"even", "odd"}[i%2]}}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"k": []byte(data)}}
	}
	for i := range n {
		k, ev := encrypt(secret(i, strings.Repeat("x", size)))
		objs = append(objs, stored{k, valueID(k, []byte(ev))})
		kvs = append(kvs, [2]string{k, ev})
	}
	etcdEnv := startEnv(t, withEncryption(t, tr, false, false))
	rev0 := etcdEnv.putMany(t, kvs)
	// One Secret changes (for the watch's change events).
	upKey, upVal := encrypt(secret(1, strings.Repeat("y", size)))
	etcdEnv.putRaw(t, upKey, []byte(upVal))
	oldID := objs[1].id
	objs[1].id = valueID(upKey, []byte(upVal))
	servers := map[string]*env{"etcd": etcdEnv,
		"cache":           startEnvOn(t, etcdEnv, withEncryption(t, tr, true, false)),
		"cache-decrypted": startEnvOn(t, etcdEnv, withEncryption(t, tr, true, true))}
	for name, e := range servers {
		if name != "etcd" {
			waitCacheHit(t, e, "/api/v1/secrets")
			// The history before the fill (backfill) is decrypted in
			// the background: a watch from before the fill waits for it.
			watchFrames(t, e, fmt.Sprintf("/api/v1/namespaces/a/secrets?watch=true&resourceVersion=%d", rev0), "application/json", 1)
		}
	}

	// check reads with e and fails unless the values of want (indexes of
	// objs) were decrypted per times each, and no other value was.
	check := func(name, what string, per int, want []int, read func(), others ...string) {
		t.Helper()
		counter.reset()
		read()
		got := counter.counts()
		if name == "cache-decrypted" {
			per = 0
		}
		bad := 0
		for _, id := range others {
			if c := got[id]; c != per {
				bad++
				t.Errorf("%s from %s: %q decrypted %d times, want %d", what, name, id, c, per)
			}
			delete(got, id)
		}
		for _, i := range want {
			if c := got[objs[i].id]; c != per {
				if bad++; bad <= 3 {
					t.Errorf("%s from %s: %s decrypted %d times, want %d", what, name, objs[i].key, c, per)
				}
			}
			delete(got, objs[i].id)
		}
		for id, c := range got {
			if bad++; bad <= 3 {
				t.Errorf("%s from %s: %q decrypted %d times, want 0", what, name, id, c)
			}
		}
		if bad > 0 {
			t.Errorf("%s from %s: %d values decrypted a wrong number of times", what, name, bad)
		}
	}
	all := make([]int, n)
	odd, evens := []int{}, []int{}
	for i := range all {
		all[i] = i
		if i%2 == 1 {
			odd = append(odd, i)
		} else {
			evens = append(evens, i)
		}
	}
	accepts := map[string]string{
		"json": "application/json", "protobuf": "application/vnd.kubernetes.protobuf", "table": kubectlTableAccept,
		"yaml":             "application/yaml",
		"partial-json":     "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
		"partial-protobuf": "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
	}
	// etcd first: its first protobuf LIST over 2 MiB finds no recorded
	// sizes (the cache servers' comparisons below read etcd too).
	for _, name := range []string{"etcd", "cache", "cache-decrypted"} {
		e := servers[name]
		bodies := map[string][]byte{}
		for format, accept := range accepts {
			for _, q := range []struct {
				query string
				want  []int
			}{{"", all}, {"?resourceVersion=0", all}, {"?labelSelector=parity%3Dodd", odd}, {"?limit=100", all[:100]},
				{"?limit=100&labelSelector=parity%3Dodd", odd[:100]}, {"?limit=300&labelSelector=parity%3Deven", evens[:300]}} {
				per, want := 1, q.want
				if name == "etcd" && q.query == "" && format == "protobuf" {
					// Over 2 MiB: etcd is read twice, and the first
					// such LIST of a value decrypts it in both passes
					// (the second: below).
					per = 2
				}
				if name == "etcd" && strings.Contains(q.query, "labelSelector") {
					// Each value up to the limit-th match decrypted to
					// evaluate the selector, once: the matches' encoding
					// from that pass is the answer.
					want = all[:q.want[len(q.want)-1]+1]
				}
				if name == "etcd" && q.query == "?resourceVersion=0" {
					continue // the same read as ""
				}
				check(name, "LIST "+format+q.query, per, want, func() {
					code, _, body := e.raw(t, "GET", "/api/v1/namespaces/a/secrets"+q.query, accept)
					if code != 200 {
						t.Fatalf("LIST %s%s from %s: %d %.300s", format, q.query, name, code, body)
					}
					bodies[format+q.query] = body
				})
			}
		}
		if name == "etcd" {
			// The next one takes the sizes its size pass needs from
			// what the first one's write pass recorded (estimate.SizeMemo).
			check(name, "LIST protobuf (again)", 1, all, func() {
				code, _, body := e.raw(t, "GET", "/api/v1/namespaces/a/secrets", accepts["protobuf"])
				if code != 200 || !bytes.Equal(body, bodies["protobuf"]) {
					t.Fatalf("LIST protobuf (again) from etcd: %d, %d bytes, want the first LIST's %d", code, len(body), len(bodies["protobuf"]))
				}
			})
		}
		// The cache's answers (their protobuf sizes computed without
		// decrypting) equal etcd's.
		if name != "etcd" {
			for fq, body := range bodies {
				if strings.HasPrefix(fq, "table") || strings.Contains(fq, "resourceVersion=0") {
					continue // Age cells read the clock; rv=0 is not an etcd read there
				}
				_, _, want := etcdEnv.raw(t, "GET", "/api/v1/namespaces/a/secrets"+fq[strings.Index(fq+"?", "?"):], accepts[strings.SplitN(fq, "?", 2)[0]])
				if !bytes.Equal(body, want) {
					t.Errorf("LIST %s from %s: %d bytes differ from etcd's %d", fq, name, len(body), len(want))
				}
			}
		}
		for _, format := range []string{"json", "protobuf", "table"} {
			check(name, "GET "+format, 1, []int{7}, func() {
				if code, _, body := e.raw(t, "GET", "/api/v1/namespaces/a/secrets/s-0007", accepts[format]); code != 200 {
					t.Fatalf("GET from %s: %d %.300s", name, code, body)
				}
			})
		}
		// Initial events (sendInitialEvents from the cache; from etcd an
		// initial list).
		for _, format := range []string{"json", "protobuf"} {
			for _, q := range []struct {
				query string
				want  []int
			}{{"", all}, {"&labelSelector=parity%3Dodd", odd}} {
				want := q.want
				if name == "etcd" && q.query != "" {
					want = all // each value decrypted to evaluate the selector
				}
				check(name, "WATCH initial events "+format+q.query, 1, want, func() {
					watchFrames(t, e, "/api/v1/namespaces/a/secrets?watch=true&resourceVersion=0"+q.query, accepts[format], len(q.want))
				})
			}
		}
		// A change event replayed to two watchers: each decrypts it once
		// (frames of values held encrypted are not shared).
		// With a selector, a watch from etcd decrypts the previous value
		// too (did it match before?); the cache has its attributes.
		for _, q := range []string{"", "&labelSelector=parity%3Dodd"} {
			var others []string
			if name == "etcd" && q != "" {
				others = []string{oldID}
			}
			check(name, "WATCH change event"+q+" (2 watchers)", 2, []int{1}, func() {
				for range 2 {
					watchFrames(t, e, fmt.Sprintf("/api/v1/namespaces/a/secrets?watch=true&resourceVersion=%d%s", rev0, q), "application/json", 1)
				}
			}, others...)
		}
	}
}

// TestRenderCacheEncrypted: with a watch cache holding values encrypted
// (the default), the rendered-JSON cache keeps the renderings of objects
// stored in plaintext (ConfigMaps where only Secrets are encrypted) and
// never those of objects encrypted at rest; with --watch-cache-decrypted
// it keeps those too.
func TestRenderCacheEncrypted(t *testing.T) {
	dir := t.TempDir()
	cfgFile, err := enctest.WriteFile(dir, "enc.yaml", enctest.Config(enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "k1")}}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := enctest.NewWriter(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	tr := newEncryption(t, cfgFile)
	base := startEnv(t, withEncryption(t, tr, true, false))
	var kvs [][2]string
	for i := range 50 {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: fmt.Sprintf("s-%02d", i), UID: "u"},
			Data: map[string][]byte{"k": []byte(strings.Repeat("TOPSECRET", 200))}}
		v, _ := storagefmt.Protobuf(s)
		k := storagefmt.Key("/registry", "secrets", "a", s.Name)
		ev, err := w.Encrypt("secrets", k, v)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, [2]string{k, string(ev)})
	}
	base.putMany(t, kvs)
	seedConfigMaps(t, base, "a", 50, 2000)
	for _, hold := range []bool{false, true} {
		e := base
		if hold {
			e = startEnvOn(t, base, withEncryption(t, tr, true, true))
		}
		kept := func() float64 {
			v, _ := metricValue(e.ms, "lazyapi_render_cache_bytes")
			return v
		}
		for _, res := range []string{"secrets", "configmaps"} {
			p := "/api/v1/namespaces/a/" + res
			waitCacheHit(t, e, p)
			before := kept()
			for range 3 {
				for _, q := range []string{"", "/" + map[string]string{"secrets": "s-07", "configmaps": "cm-00007"}[res]} {
					if code, _, body := e.raw(t, "GET", p+q, "application/json"); code != 200 {
						t.Fatalf("GET %s: %d %.200s", p+q, code, body)
					}
				}
				watchFrames(t, e, "/api/v1/namespaces/a/"+res+"?watch=true&resourceVersion=0", "application/json", 50)
			}
			grew := kept() > before
			if want := res == "configmaps" || hold; grew != want {
				t.Errorf("hold=%v: JSON of %s kept in the rendering cache: %v (%v -> %v bytes), want %v", hold, res, grew, before, kept(), want)
			}
		}
	}
}
