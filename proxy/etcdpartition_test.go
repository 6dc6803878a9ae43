package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// TestEtcdPartitionNamespacedList: with etcd partitioned from lazyapi
// (connections open, nothing answers), a namespaced LIST of a cached
// resource reads no etcd for its admission estimate: a consistent one
// answers 503 within the cache's revision probe (3 s), a
// resourceVersion=0 one is served from the cache at once. Before, the
// estimate sampled the namespace's size from etcd and waited out an etcd
// call's bound (5 s) first: 8 s for the 503, 5 s for the cached answer.
// A LIST of a resource that is not cached answers 503 within one etcd
// call's bound: the estimate's sample that etcd did not answer is its
// answer (before, its own read then waited again: 10 s).
func TestEtcdPartitionNamespacedList(t *testing.T) {
	addr, px := startPartitionable(t)
	px.Partition()
	defer px.Heal()
	for _, tc := range []struct {
		path  string
		code  int
		bound time.Duration
	}{
		{"configmaps", 503, 5 * time.Second},
		{"configmaps?resourceVersion=0", 200, time.Second},
		{"secrets", 503, 5*time.Second + 500*time.Millisecond}, // not cached: one etcd call's bound
	} {
		time.Sleep(1100 * time.Millisecond) // past the 1 s etcd-down hold: every case asks etcd
		start := time.Now()
		resp, err := http.Get("http://" + addr + "/api/v1/namespaces/a/" + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if d := time.Since(start); resp.StatusCode != tc.code || d > tc.bound {
			t.Errorf("LIST %s with etcd partitioned = %d after %v: %.200s; want %d within %v", tc.path, resp.StatusCode, d, b, tc.code, tc.bound)
		}
	}
}

// startPartitionable starts a server with a watch cache and a limiter
// whose etcd client reaches an etcd holding the ConfigMap a/cm through
// the returned proxy (etcdtest.Proxy: partition, cut, heal), and waits
// until the ConfigMaps' cache is ready; opts change its Config. It
// returns the server's address.
func startPartitionable(t *testing.T, opts ...envOption) (string, *etcdtest.Proxy) {
	t.Helper()
	etcd := etcdWithConfigMap(t)
	px := etcdtest.NewProxy(t, strings.TrimPrefix(etcd.Endpoint, "http://"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{px.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	ms := metrics.NewSet()
	c, err := cache.New(cache.Config{Client: cli, MemoryBytes: 64 << 20, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lcfg := ratelimit.DefaultConfig()
	lcfg.MaxInflightBytes = 1 << 30
	lim, err := ratelimit.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := proxy.Config{Client: cli, Store: store.New(cli, store.Config{Prefix: "/registry", Metrics: ms}),
		Resources: resource.NewBuiltin(), Metrics: ms, Cache: c, Limiter: lim}
	for _, o := range opts {
		o(&cfg)
	}
	_, addr := serveProxy(t, cfg)
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cached", func() error {
		if st, why := r.Status(); st != cache.StateReady {
			return fmt.Errorf("cache state %s: %s", st, why)
		}
		return nil
	})
	return addr, px
}

// TestEtcdPartitionAuthFirst: what a LIST's admission estimate reads of
// etcd (8e5b489: a sample of an uncached collection, whose failure is an
// immediate 503; a cached namespace counted in the cache) is read for an
// authenticated and authorized request only. With etcd partitioned, a
// caller with a bad token gets 401 and one RBAC denies (anonymous, a user
// with no binding) 403, at once, for cached and uncached LISTs, a GET and
// a watch: never the 503 or the etcd call's wait (5 s) an authorized LIST
// gets, and still not while etcd is known down after one.
func TestEtcdPartitionAuthFirst(t *testing.T) {
	addr, px := startPartitionable(t, withRBAC(t, metrics.NewSet()))
	px.Partition()
	defer px.Heal()
	get := func(token, path string) (int, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b), time.Since(start)
	}
	denied := func(when string) {
		t.Helper()
		for _, caller := range []struct {
			name, token string
			code        int
			reason      string
		}{
			{"a bad token", "not-a-token", 401, `"reason":"Unauthorized"`},
			{"anonymous", "", 403, `"reason":"Forbidden"`},
			{"nobody (no binding)", "token-25", 403, `"reason":"Forbidden"`},
		} {
			for _, path := range []string{
				"/api/v1/namespaces/a/configmaps", // cached: counted in the cache
				"/api/v1/namespaces/a/secrets",    // not cached: an etcd sample
				"/api/v1/secrets",
				"/api/v1/namespaces/a/configmaps/cm",
				"/api/v1/namespaces/a/secrets?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
			} {
				code, body, d := get(caller.token, path)
				if code != caller.code || !strings.Contains(body, caller.reason) || d > 2*time.Second {
					t.Errorf("%s: %s GET %s = %d after %v: %.200s; want %d %s at once", when, caller.name, path, code, d, body, caller.code, caller.reason)
				}
			}
		}
	}
	denied("etcd partitioned")
	// The admin's consistent LIST asks etcd (the cache's revision
	// probe): 503 within 3 s, and etcd is then known down for a second.
	if code, body, d := get("token-20", "/api/v1/namespaces/a/configmaps"); code != 503 || d > 5*time.Second {
		t.Fatalf("system:masters LIST of ConfigMaps with etcd partitioned = %d after %v: %.200s; want 503 within the revision probe (3 s)", code, d, body)
	}
	if code, body, d := get("token-20", "/api/v1/namespaces/a/secrets"); code != 503 || d > time.Second {
		t.Fatalf("system:masters LIST of secrets with etcd known down = %d after %v: %.200s; want 503 at once (held)", code, d, body)
	}
	denied("etcd known down")
}
