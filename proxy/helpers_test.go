package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/openapi"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// env is a real etcd, a resource table and a proxy on a loopback port.
type env struct {
	etcd    *etcdtest.Server
	cli     *clientv3.Client
	table   *resource.Table
	srv     *proxy.Server
	store   *store.Store // the server's
	ms      *metrics.Set
	url     string
	jsonCfg *rest.Config
	protCfg *rest.Config
	cs      kubernetes.Interface // JSON
	pcs     kubernetes.Interface // protobuf
}

type envOption func(*proxy.Config)

// withStore gives the server a store (prefix /registry, pages of 50) with
// set's changes.
func withStore(set func(sc *store.Config)) envOption {
	return func(c *proxy.Config) {
		sc := store.Config{Prefix: "/registry", PageSize: 50, Metrics: c.Metrics}
		set(&sc)
		c.Store = store.New(c.Client, sc)
	}
}

func startEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	return startEnvWith(t, nil, nil, opts...)
}

// startEnvWith starts a proxy on etcd and table, or on new ones when nil.
func startEnvWith(t testing.TB, etcd *etcdtest.Server, table *resource.Table, opts ...envOption) *env {
	t.Helper()
	e := &env{etcd: etcd, table: table, ms: metrics.NewSet()}
	if e.etcd == nil {
		e.etcd = etcdtest.Start(t)
	}
	e.cli = e.etcd.Client
	var oapi *openapi.Service
	if e.table == nil {
		e.table = resource.NewBuiltin()
		oapi = proxy.NewOpenAPI(e.table) // before the sync: it sets the CRD doc builder
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := e.table.StartCRDSync(ctx, e.cli, "/registry"); err != nil {
			t.Fatalf("StartCRDSync: %v", err)
		}
	}
	if oapi == nil {
		oapi = proxy.NewOpenAPI(e.table)
	}
	cfg := proxy.Config{
		Client: e.cli,
		Store:  store.New(e.cli, store.Config{Prefix: "/registry", PageSize: 50, Metrics: e.ms}),
		// Generous: a LIST of 800 encrypted Secrets from etcd overran
		// 20 s (and was cut) on a -race run at load 10; the tests of
		// the timeout set their own.
		RequestTimeout: time.Minute,
		Resources:      e.table,
		Metrics:        e.ms,
		OpenAPI:        oapi,
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, addr := serveProxy(t, cfg)
	e.srv, e.store = srv, cfg.Store
	e.url = "http://" + addr
	// kubernetes.NewForConfig defaults to protobuf: ask for JSON explicitly.
	e.jsonCfg = &rest.Config{Host: e.url, QPS: -1, ContentConfig: rest.ContentConfig{
		ContentType:        "application/json",
		AcceptContentTypes: "application/json",
	}}
	e.protCfg = &rest.Config{Host: e.url, QPS: -1, ContentConfig: rest.ContentConfig{
		ContentType:        "application/vnd.kubernetes.protobuf",
		AcceptContentTypes: "application/vnd.kubernetes.protobuf",
	}}
	e.cs = kubernetes.NewForConfigOrDie(e.jsonCfg)
	e.pcs = kubernetes.NewForConfigOrDie(e.protCfg)
	return e
}

// serveProxy starts a server of cfg on a loopback port until the test
// ends (it must shut down within 5 s) and returns it and its address.
func serveProxy(t testing.TB, cfg proxy.Config) (*proxy.Server, string) {
	t.Helper()
	srv, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve after Shutdown = %v, want nil", err)
		}
	})
	return srv, ln.Addr().String()
}

// put stores obj as kube-apiserver would (protobuf) and returns its mod
// revision.
func (e *env) put(t testing.TB, keyPrefix string, obj runtime.Object) int64 {
	t.Helper()
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	val, err := storagefmt.Protobuf(obj)
	if err != nil {
		t.Fatal(err)
	}
	return e.putRaw(t, storagefmt.Key("/registry", keyPrefix, acc.GetNamespace(), acc.GetName()), val)
}

func (e *env) putRaw(t testing.TB, key string, val []byte) int64 {
	t.Helper()
	resp, err := e.cli.Put(context.Background(), key, string(val))
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return resp.Header.Revision
}

// putMany writes values in transactions of 100.
func (e *env) putMany(t testing.TB, kvs [][2]string) int64 {
	t.Helper()
	var rev int64
	for i := 0; i < len(kvs); i += 100 {
		ops := make([]clientv3.Op, 0, 100)
		for _, kv := range kvs[i:min(i+100, len(kvs))] {
			ops = append(ops, clientv3.OpPut(kv[0], kv[1]))
		}
		resp, err := e.cli.Txn(context.Background()).Then(ops...).Commit()
		if err != nil {
			t.Fatalf("txn: %v", err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// oracle decodes a stored value with apimachinery and sets its RV, as
// kube-apiserver would serve it.
func oracle(t testing.TB, stored []byte, rv int64) runtime.Object {
	t.Helper()
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(stored, nil, nil)
	if err != nil {
		t.Fatalf("oracle decode: %v", err)
	}
	acc, _ := meta.Accessor(obj)
	acc.SetResourceVersion(strconv.FormatInt(rv, 10))
	obj.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return obj
}

// rawGet does a plain HTTP request and returns status, content type, body.
func (e *env) raw(t testing.TB, method, path, accept string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, body
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metricValue(ms *metrics.Set, name string) (float64, error) {
	var b strings.Builder
	ms.WritePrometheus(&b)
	for line := range strings.SplitSeq(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, errors.New(fmt.Sprint("no metric ", name))
}

// waitCached waits until r is ready (filled), failing with its cache
// state and reason.
func waitCached(t testing.TB, r *cache.Resource, what string) {
	t.Helper()
	waitFor(t, what, func() error {
		if !r.Ready() {
			st, why := r.Status()
			return fmt.Errorf("cache state %s: %s", st, why)
		}
		return nil
	})
}
