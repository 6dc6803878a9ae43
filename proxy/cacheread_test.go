package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/store"
)

// cacheTwins is one etcd served by two proxies: cached (Config.Cache set,
// ConfigMaps cached and ready) and etcd (no cache).
type cacheTwins struct {
	cached, etcd *env
	cr           *cache.Resource
}

// history is the cache's DefaultHistory (0: the default).
// opts apply to both proxies.
func startCacheTwins(t testing.TB, history int, opts ...envOption) *cacheTwins {
	t.Helper()
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 1 << 30, Metrics: cfg.Metrics, DefaultHistory: history,
			ProgressInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	}, func(cfg *proxy.Config) {
		for _, o := range opts {
			o(cfg)
		}
	})
	// A second proxy on the same etcd, without a cache.
	ms := metrics.NewSet()
	cfg := proxy.Config{Client: e.cli, Store: store.New(e.cli, store.Config{Prefix: "/registry", PageSize: 50, Metrics: ms}),
		RequestTimeout: 20 * time.Second, Resources: e.table, Metrics: ms}
	for _, o := range opts {
		o(&cfg)
	}
	srv, addr := serveProxy(t, cfg)
	tw := &cacheTwins{cached: e, etcd: &env{url: "http://" + addr, cli: e.cli, srv: srv}}
	// The proxy's first request creates the cache of ConfigMaps.
	e.raw(t, "GET", "/api/v1/configmaps?limit=1", "")
	tw.cr = c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	return tw
}

// waitCached waits until the cache is ready and holds revision rev.
func (tw *cacheTwins) waitCached(t testing.TB, rev int64) {
	t.Helper()
	waitFor(t, "configmaps cached", func() error {
		if !tw.cr.Ready() {
			st, why := tw.cr.Status()
			return fmt.Errorf("cache state %s: %s", st, why)
		}
		if got := tw.cr.Revision(); got < rev {
			return fmt.Errorf("cache at revision %d, want %d", got, rev)
		}
		return nil
	})
}

func (tw *cacheTwins) hits(t testing.TB) float64 {
	t.Helper()
	v, err := metricValue(tw.cached.ms, `lazyapi_cache_requests_total{resource="configmaps",result="hit"}`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestCacheReadIdentical: the same LIST and GET served from the watch cache
// and from etcd (a proxy without a cache, same etcd, same revision) are
// byte-identical in every format, paged (following the continue tokens of
// either source against both) and unpaged, with and without selectors.
func TestCacheReadIdentical(t *testing.T) {
	// 300 ConfigMaps in ns: more than a cache page (256 items); with
	// limit=70 the continue tokens are followed over 5 pages. Under the
	// race detector (64 s in CI with them) a cache page is 64 items, ns
	// holds 90 and the limit is 21: still more than a cache page, still 5
	// continue pages, the same requests, with fewer items.
	items, limit := 300, 70
	if raceEnabled {
		// Before the servers start; restored after they stop.
		t.Cleanup(proxy.SetCachePageItems(64))
		items, limit = 90, 21
	}
	tw := startCacheTwins(t, 0)
	e := tw.cached
	seedConfigMaps(t, e, "ns", items, 100)
	// mid: a revision the cache reconstructs from its history.
	mid := seedConfigMaps(t, e, "other", 20, 10)
	if _, err := e.cli.Delete(context.Background(), "/registry/configmaps/ns/cm-00007"); err != nil {
		t.Fatal(err)
	}
	rev := e.put(t, "configmaps", cm("zz", "web", "v"))
	tw.waitCached(t, rev)
	h0 := tw.hits(t)

	accepts := []string{"application/json", "application/vnd.kubernetes.protobuf", "application/yaml",
		kubectlTableAccept, "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"}
	paths := []string{"/api/v1/namespaces/ns/configmaps", "/api/v1/configmaps"}
	rvs := []string{"", "resourceVersion=0", fmt.Sprintf("resourceVersion=%d&resourceVersionMatch=Exact", rev),
		fmt.Sprintf("resourceVersion=%d&resourceVersionMatch=NotOlderThan", rev), fmt.Sprintf("resourceVersion=%d", rev),
		fmt.Sprintf("resourceVersion=%d&resourceVersionMatch=Exact", mid)}
	sels := []string{"", "labelSelector=parity%3Dodd", "fieldSelector=metadata.name%3Dcm-00005",
		"fieldSelector=metadata.name!%3Dcm-00005,metadata.namespace%3Dns", "labelSelector=app%3Dweb"}
	limits := []string{"", fmt.Sprintf("limit=%d", limit), "limit=1000"}
	get := func(e *env, path, accept string) []byte {
		t.Helper()
		code, _, body := e.raw(t, "GET", path, accept)
		if code != 200 {
			t.Fatalf("GET %s %s: %d %s", e.url, path, code, body)
		}
		return body
	}
	// compare compares the cached answer to path with etcd's to etcdPath
	// (path when "").
	compare := func(path, etcdPath, accept string) []byte {
		t.Helper()
		if etcdPath == "" {
			etcdPath = path
		}
		a, b := get(tw.cached, path, accept), get(tw.etcd, etcdPath, accept)
		if !bytes.Equal(a, b) {
			t.Fatalf("GET %s (%s): cache and etcd (%s) differ:\ncache %d bytes: %.600q\netcd  %d bytes: %.600q", path, accept, etcdPath, len(a), a, len(b), b)
		}
		return a
	}
	n := 0
	for _, p := range paths {
		for _, rv := range rvs {
			for _, sel := range sels {
				for _, lim := range limits {
					for _, acc := range accepts {
						q := url.Values{}
						for _, part := range []string{rv, sel, lim} {
							if part == "" {
								continue
							}
							v, _ := url.ParseQuery(part)
							for k, vs := range v {
								q[k] = vs
							}
						}
						path := p + "?" + q.Encode()
						etcdPath := ""
						if rv == "resourceVersion=0" && lim != "" {
							// From the cache, as from kube-apiserver's
							// watch cache, resourceVersion=0 ignores limit.
							q.Del("limit")
							etcdPath = p + "?" + q.Encode()
						}
						body := compare(path, etcdPath, acc)
						n++
						if lim != limits[1] || acc != "application/json" {
							continue
						}
						// Follow the continue tokens; tokens come from
						// the cache on even pages, from etcd on odd ones.
						for page := 0; ; page++ {
							var l struct {
								Metadata struct{ Continue string } `json:"metadata"`
							}
							if err := json.Unmarshal(body, &l); err != nil {
								t.Fatal(err)
							}
							if l.Metadata.Continue == "" {
								break
							}
							cq := url.Values{"limit": {strconv.Itoa(limit)}, "continue": {l.Metadata.Continue}}
							if v, _ := url.ParseQuery(sel); len(v) > 0 {
								for k, vs := range v {
									cq[k] = vs
								}
							}
							cpath := p + "?" + cq.Encode()
							for _, acc := range accepts[1:] {
								compare(cpath, "", acc)
							}
							src := tw.cached
							if page%2 == 1 {
								src = tw.etcd
							}
							body = get(src, cpath, "application/json")
							if other := get(map[*env]*env{tw.cached: tw.etcd, tw.etcd: tw.cached}[src], cpath, "application/json"); !bytes.Equal(body, other) {
								t.Fatalf("continue page %d of %s differs", page, path)
							}
							n++
						}
					}
				}
			}
		}
	}
	// GET of one object.
	for _, rv := range []string{"", "?resourceVersion=0", fmt.Sprintf("?resourceVersion=%d", rev)} {
		for _, acc := range accepts[:4] {
			compare("/api/v1/namespaces/ns/configmaps/cm-00003"+rv, "", acc)
			n++
		}
		code, _, _ := tw.cached.raw(t, "GET", "/api/v1/namespaces/ns/configmaps/cm-00007"+rv, "")
		if code != 404 {
			t.Errorf("GET of a deleted object%s from the cache: %d, want 404", rv, code)
		}
	}
	t.Logf("%d requests compared, %v cache hits", n, tw.hits(t)-h0)
	if got := tw.hits(t) - h0; got < float64(n) {
		t.Errorf("cache hits %v over %d requests: some were not served from the cache", got, n)
	}
}

// TestCacheReadFallback: a continue token at a revision the cache cannot
// reconstruct is served from etcd; a NotOlderThan of a future revision is
// 504 ResourceVersionTooLarge.
func TestCacheReadFallback(t *testing.T) {
	tw := startCacheTwins(t, 10) // the history holds 10 events
	e := tw.cached
	first := seedConfigMaps(t, e, "ns", 120, 10)
	tw.waitCached(t, first)
	// Exact at a revision before the cache's history: etcd answers, same
	// as the uncached proxy.
	old := first - 1
	f0, err := metricValue(e.ms, `lazyapi_cache_requests_total{resource="configmaps",result="fallback"}`)
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/api/v1/namespaces/ns/configmaps?resourceVersion=%d&resourceVersionMatch=Exact&limit=10", old)
	c1, _, b1 := tw.cached.raw(t, "GET", path, "application/json")
	c2, _, b2 := tw.etcd.raw(t, "GET", path, "application/json")
	if c1 != 200 || c1 != c2 || !bytes.Equal(b1, b2) {
		t.Fatalf("Exact at %d: cache proxy %d %.300s, etcd proxy %d %.300s", old, c1, b1, c2, b2)
	}
	if f1, _ := metricValue(e.ms, `lazyapi_cache_requests_total{resource="configmaps",result="fallback"}`); f1 != f0+1 {
		t.Errorf("cache fallbacks %v -> %v, want one more", f0, f1)
	}
	code, _, body := tw.cached.raw(t, "GET", fmt.Sprintf("/api/v1/namespaces/ns/configmaps?resourceVersion=%d&resourceVersionMatch=NotOlderThan", first+1000), "application/json")
	if code != 504 || !bytes.Contains(body, []byte("ResourceVersionTooLarge")) {
		t.Fatalf("NotOlderThan future: %d %s", code, body)
	}
}

// TestStreamedListRecorded: a streamed LIST (larger than the inline limit)
// is recorded once it is written, and also when its body is never written
// (HEAD), from the cache and from etcd.
func TestStreamedListRecorded(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	rev := seedConfigMaps(t, e, "ns", 100, 4<<10) // ~400 KiB: streamed
	tw.waitCached(t, rev)
	name := `lazyapi_apiserver_request_total{verb="LIST",resource="configmaps",code="200",format="json"}`
	for _, q := range []string{"?resourceVersion=0", "?resourceVersion=0&labelSelector=parity%3Dodd&limit=1000", ""} {
		for _, method := range []string{"GET", "HEAD"} {
			before, _ := metricValue(e.ms, name)
			code, _, body := e.raw(t, method, "/api/v1/namespaces/ns/configmaps"+q, "application/json")
			if code != 200 || (method == "GET") != (len(body) > 100<<10) {
				t.Fatalf("%s %s: %d, %d bytes", method, q, code, len(body))
			}
			waitFor(t, method+" recorded", func() error {
				if v, _ := metricValue(e.ms, name); v != before+1 {
					return fmt.Errorf("%s = %v, want %v", name, v, before+1)
				}
				return nil
			})
		}
	}
}
