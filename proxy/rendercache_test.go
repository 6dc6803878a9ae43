package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
)

// TestRenderCacheIdentical: LISTs and GETs repeated until their JSON comes
// from the rendering cache are byte-identical to a proxy without a cache;
// an object changed in etcd is served at its new revision; the kept bytes
// are charged to the watch cache budget.
func TestRenderCacheIdentical(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	rev := seedConfigMaps(t, e, "ns", 120, 2000)
	tw.waitCached(t, rev)
	paths := []string{"/api/v1/namespaces/ns/configmaps?resourceVersion=0", "/api/v1/configmaps?resourceVersion=0",
		"/api/v1/namespaces/ns/configmaps", "/api/v1/namespaces/ns/configmaps?limit=50",
		"/api/v1/namespaces/ns/configmaps?resourceVersion=0&labelSelector=parity%3Deven",
		"/api/v1/namespaces/ns/configmaps/cm-00003", "/api/v1/namespaces/ns/configmaps/cm-00003?resourceVersion=0"}
	check := func(round int) {
		t.Helper()
		for _, p := range paths {
			for _, acc := range []string{"application/json", kubectlTableAccept} {
				ca, _, a := e.raw(t, "GET", p, acc)
				cb, _, b := tw.etcd.raw(t, "GET", p, acc)
				if ca != 200 || cb != 200 || !bytes.Equal(a, b) {
					t.Fatalf("round %d: GET %s (%s): cached proxy %d (%d bytes), etcd proxy %d (%d bytes), identical=%v", round, p, acc, ca, len(a), cb, len(b), bytes.Equal(a, b))
				}
			}
		}
	}
	used0 := usedBudget(t, e)
	for round := range 3 {
		check(round)
	}
	hits, err := metricValue(e.ms, `lazyapi_render_cache_total{result="hit"}`)
	if err != nil || hits < 120 {
		t.Fatalf("render cache hits = %v (%v), want >= 120 after three rounds", hits, err)
	}
	// Warm: a JSON LIST and GET copy every item from the rendering cache,
	// one hit per item (the size pass's lookups count none) and no miss.
	for _, c := range []struct {
		path string
		hits float64
	}{
		{"/api/v1/namespaces/ns/configmaps?resourceVersion=0", 120},
		{"/api/v1/namespaces/ns/configmaps?resourceVersion=0&labelSelector=parity%3Deven", 60},
		{"/api/v1/namespaces/ns/configmaps?limit=50", 50},
		{"/api/v1/namespaces/ns/configmaps/cm-00003?resourceVersion=0", 1},
	} {
		h0, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="hit"}`)
		m0, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="miss"}`)
		if code, _, _ := e.raw(t, "GET", c.path, "application/json"); code != 200 {
			t.Fatalf("GET %s: %d", c.path, code)
		}
		h1, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="hit"}`)
		m1, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="miss"}`)
		if h1-h0 != c.hits || m1 != m0 {
			t.Errorf("warm GET %s: %v render cache hits, %v misses, want %v and 0", c.path, h1-h0, m1-m0, c.hits)
		}
	}
	kept, _ := metricValue(e.ms, "lazyapi_render_cache_bytes")
	if kept <= 0 || usedBudget(t, e)-used0 < int64(kept) {
		t.Errorf("render cache holds %v bytes but the watch cache budget grew by %d", kept, usedBudget(t, e)-used0)
	}
	// WatchList initial events: the same frames whether transcoded or
	// copied from the rendering cache.
	initial := func() []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/namespaces/ns/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var added []byte
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("watch ended before the initial-events-end bookmark: %v", err)
			}
			if bytes.Contains(line, []byte("k8s.io/initial-events-end")) {
				return added
			}
			added = append(added, line...)
		}
	}
	h0, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="hit"}`)
	w1, _, w2 := initial(), initial(), initial() // kept on the second, copied on the third
	if h1, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="hit"}`); h1-h0 < 120 || !bytes.Equal(w1, w2) || bytes.Count(w1, []byte("\n")) != 120 {
		t.Fatalf("initial events: %d render cache hits over three watches, identical=%v, %d events", int(h1-h0), bytes.Equal(w1, w2), bytes.Count(w1, []byte("\n")))
	}
	// A change: the next LIST and GET carry the new object.
	rev = e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-00003"},
		Data: map[string]string{"payload": fmt.Sprintf("%02000d", 7)}})
	tw.waitCached(t, rev)
	check(4)
	_, _, b := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps/cm-00003?resourceVersion=0", "application/json")
	if !bytes.Contains(b, []byte(fmt.Sprintf(`"resourceVersion":"%d"`, rev))) || !bytes.Contains(b, []byte("0000007")) {
		t.Fatalf("GET after the change: %.300s", b)
	}
}

// TestRenderCacheTightBudget: with a watch cache budget that the cached
// resource fills past 3/4, nothing is kept (the budget belongs to the
// cache) and answers are still identical.
func TestRenderCacheTightBudget(t *testing.T) {
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 400 << 10, Metrics: cfg.Metrics, ProgressInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	rev := seedConfigMaps(t, e, "ns", 150, 2000) // ~330 KB cached: above 3/4 of 400 KiB
	e.raw(t, "GET", "/api/v1/configmaps?limit=1", "")
	cr := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cached", func() error {
		if !cr.Ready() || cr.Revision() < rev {
			st, why := cr.Status()
			return fmt.Errorf("cache %s (%s) at %d", st, why, cr.Revision())
		}
		return nil
	})
	var first []byte
	for round := range 3 {
		code, _, b := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?resourceVersion=0", "application/json")
		if code != 200 || (round > 0 && !bytes.Equal(b, first)) {
			t.Fatalf("round %d: %d, identical=%v", round, code, bytes.Equal(b, first))
		}
		first = b
	}
	if kept, _ := metricValue(e.ms, "lazyapi_render_cache_bytes"); kept != 0 {
		t.Errorf("render cache holds %v bytes with the budget tight, want 0", kept)
	}
	if c.UsedBytes() > 400<<10 {
		t.Errorf("budget in use %d > 400 KiB", c.UsedBytes())
	}
}

func usedBudget(t testing.TB, e *env) int64 {
	t.Helper()
	v, err := metricValue(e.ms, "lazyapi_cache_used_bytes")
	if err != nil {
		t.Fatal(err)
	}
	return int64(v)
}
