package proxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kcache "k8s.io/client-go/tools/cache"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// classicInformerLW opts an informer out of WatchList: LIST then WATCH.
type classicInformerLW struct{ *kcache.ListWatch }

func (classicInformerLW) IsWatchListSemanticsUnSupported() bool { return true }

// cachedProxy is a proxy with a watch cache on addr, stopped by stop.
type cachedProxy struct {
	addr string
	stop func()
	ms   *metrics.Set
}

// startCachedProxy starts a proxy with a watch cache of memory bytes and
// waits until the cache of ConfigMaps is in state want (StateReady, or
// StateRefused for a cache too small: reads go to etcd).
func startCachedProxy(t *testing.T, etcd *etcdtest.Server, table *resource.Table, addr string, memory int64,
	want cache.State) *cachedProxy {
	t.Helper()
	ms := metrics.NewSet()
	c, err := cache.New(cache.Config{Client: etcd.Client, MemoryBytes: memory, Metrics: ms, DefaultHistory: 1000,
		ProgressInterval: 100 * time.Millisecond, RetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(proxy.Config{Client: etcd.Client, Store: store.New(etcd.Client, store.Config{Prefix: "/registry", PageSize: 50, Metrics: ms}),
		RequestTimeout: 20 * time.Second, Resources: table, Metrics: ms, Cache: c})
	if err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	waitFor(t, "listen on "+addr, func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cache state "+want.String(), func() error {
		if st, why := r.Status(); st != want {
			return fmt.Errorf("cache state %s: %s", st, why)
		}
		return nil
	})
	var once sync.Once
	p := &cachedProxy{addr: ln.Addr().String(), ms: ms}
	p.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
			<-served
			c.Close()
		})
	}
	t.Cleanup(p.stop)
	return p
}

// TestClassicInformerSurvivesRestart: a LIST+WATCH informer synced against
// a cached proxy follows the changes made after the proxy restarts with a
// fresh cache, and it does so without re-listing: its re-watch from its last
// resourceVersion X is served from the history the new cache replayed from
// before its fill (cache BackfillRevisions). Without that history the
// re-watch is 410 Expired; the reflector then re-lists at X and
// re-watches from the list's resourceVersion. That works only when the
// first LIST (limit=500&resourceVersion=0) was not paginated, as
// kube-apiserver's watch cache answers it: a paginated answer makes client-go
// page its re-list with resourceVersion=X (an Exact read, at X) and re-watch
// from X again, forever. Before the restart the cache is ready, or too
// small (the first LIST is served from etcd, while a cache would fill).
func TestClassicInformerSurvivesRestart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		memory int64
		state  cache.State
	}{
		{"cache ready", 64 << 20, cache.StateReady},
		{"cache refused", 1 << 10, cache.StateRefused},
	} {
		t.Run(tc.name, func(t *testing.T) { testClassicInformerRestart(t, tc.memory, tc.state) })
	}
}

func testClassicInformerRestart(t *testing.T, memory int64, state cache.State) {
	etcd := etcdtest.Start(t)
	table := resource.NewBuiltin()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := table.StartCRDSync(ctx, etcd.Client, "/registry"); err != nil {
		t.Fatal(err)
	}
	e := &env{etcd: etcd, cli: etcd.Client}
	const n = 700 // more than the reflector's page of 500
	kvs := make([][2]string, 0, n)
	for i := range n {
		val, err := storagefmt.Protobuf(cm(fmt.Sprintf("cm-%04d", i), "web", "0"))
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, [2]string{"/registry/configmaps/ns/" + fmt.Sprintf("cm-%04d", i), string(val)})
	}
	e.putMany(t, kvs)
	p := startCachedProxy(t, etcd, table, "127.0.0.1:0", memory, state)

	var (
		mu  sync.Mutex
		log []string
	)
	cfg := &rest.Config{Host: "http://" + p.addr, QPS: -1, ContentConfig: rest.ContentConfig{
		ContentType: "application/json", AcceptContentTypes: "application/json"},
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(req *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(req)
				code := 0
				if resp != nil {
					code = resp.StatusCode
				}
				mu.Lock()
				log = append(log, fmt.Sprintf("%s %d %v", req.URL.RequestURI(), code, err))
				mu.Unlock()
				return resp, err
			})
		}}
	cs := kubernetes.NewForConfigOrDie(cfg)
	lw := &kcache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}
	inf := kcache.NewSharedIndexInformer(classicInformerLW{lw}, &corev1.ConfigMap{}, 0, kcache.Indexers{})
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	if !kcache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	matches := func(name, v string) func() error {
		return func() error {
			o, ok, err := inf.GetStore().GetByKey("ns/" + name)
			if err != nil || !ok {
				return fmt.Errorf("ns/%s not in the informer (%v)", name, err)
			}
			if got := o.(*corev1.ConfigMap).Data["v"]; got != v {
				return fmt.Errorf("ns/%s v=%s, want %s", name, got, v)
			}
			return nil
		}
	}
	e.put(t, "configmaps", cm("cm-0001", "web", "1"))
	waitFor(t, "informer before the restart", matches("cm-0001", "1"))

	mu.Lock()
	restartAt := len(log)
	mu.Unlock()
	p.stop()
	// Written while the proxy is down: the new cache's history starts
	// after the informer's last resourceVersion.
	for i := range 5 {
		e.put(t, "configmaps", cm("cm-0002", "web", strconv.Itoa(i)))
	}
	startCachedProxy(t, etcd, table, p.addr, 64<<20, cache.StateReady)
	e.put(t, "configmaps", cm("cm-0003", "web", "after"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := matches("cm-0003", "after")()
		if err == nil {
			err = matches("cm-0002", "4")()
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			if len(log) > 30 {
				log = log[len(log)-30:]
			}
			t.Fatalf("informer after the restart: %v; last requests:\n%q", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The restarted cache's history starts before its fill (backfill):
	// the informer resumed its watch from its last resourceVersion
	// instead of re-listing (issue 14 item 5: no re-list storm after a
	// restart).
	mu.Lock()
	defer mu.Unlock()
	for _, l := range log[restartAt:] {
		if !strings.Contains(l, "watch=true") {
			t.Errorf("after the restart the informer re-listed: %s (requests since the restart: %q)", l, log[restartAt:])
			break
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
