package proxy_test

import (
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
)

// TestEtcdDownFirstRequest: with etcd down, the first consistent GET or
// LIST answers 503 with Retry-After within the 5 s bound of one etcd call,
// from a cached resource too (its revision probe failed, then the etcd
// fallback waited again: 8 s).
func TestEtcdDownFirstRequest(t *testing.T) {
	etcd := etcdWithConfigMap(t)
	cached := startCachedProxy(t, etcd, resource.NewBuiltin(), "127.0.0.1:0", 64<<20, cache.StateReady)
	_, addr := serveProxy(t, proxy.Config{Client: etcd.Client, Resources: resource.NewBuiltin()})
	uncached := &cachedProxy{addr: addr}
	etcd.Embedded.Close()
	for _, tc := range []struct{ addr, path string }{
		{cached.addr, "/api/v1/namespaces/a/configmaps/cm"},
		{uncached.addr, "/api/v1/namespaces/a/configmaps"},
	} {
		start := time.Now()
		resp, err := http.Get("http://" + tc.addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(start); resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || d > 5500*time.Millisecond {
			t.Errorf("GET %s with etcd down = %d (Retry-After %q) after %v, want 503 with Retry-After within 5 s",
				tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), d)
		}
	}
}

// etcdWithConfigMap starts an etcd holding the ConfigMap a/cm, the start
// of the etcd-down and etcd-partition tests.
func etcdWithConfigMap(t *testing.T) *etcdtest.Server {
	t.Helper()
	etcd := etcdtest.Start(t)
	e := &env{etcd: etcd, cli: etcd.Client}
	e.put(t, "configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "a", UID: "uid-cm"}})
	return etcd
}
