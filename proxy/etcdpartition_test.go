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
	_, addr := serveProxy(t, proxy.Config{Client: cli, Store: store.New(cli, store.Config{Prefix: "/registry", Metrics: ms}),
		Resources: resource.NewBuiltin(), Metrics: ms, Cache: c, Limiter: lim})
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cached", func() error {
		if st, why := r.Status(); st != cache.StateReady {
			return fmt.Errorf("cache state %s: %s", st, why)
		}
		return nil
	})
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
