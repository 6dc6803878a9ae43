//go:build !race

// TestEstimateHoldsStalled measures the live heap of stalled streams
// against the limiter's reservation: it runs in CI's plain pass (.ci/run,
// the !race tests), where the heap is the server's own and not the race
// detector's, in 12 s (116 s under -race, the slowest test of CI's race
// pass). The estimate code it checks runs under -race in the other tests
// that stall streams (TestStalledReaderAborted, TestTLSStalledClientAborted,
// TestSharedScanStalledMember).

package proxy_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	vmetrics "github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
)

// TestEstimateHoldsStalled holds the admission estimate against the truth:
// for 16 streams whose clients never read (4 KiB receive buffers) of each
// kind (a LIST read from etcd, a LIST from the watch cache, a watch with
// initial events, a GET of a 1 MiB object from etcd and from the cache),
// in JSON and protobuf, the live heap they hold once their writes are
// blocked (after a GC, over the heap before they came) is at most the
// bytes the limiter reserved for them, plus the watch frame cache's global
// 4 MiB bound. etcd runs in a child process so that its allocations do not
// count. The GETs' objects are ten times their resource's average size (the
// size hint their estimate starts from): their bodies, which fasthttp
// writes after the handler returned, keep their reservation and reserve
// the excess (conn.HeldBody, reqState.reserve).
func TestEstimateHoldsStalled(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 20 MiB to a child etcd")
	}
	cli := startEtcdChild(t)
	const items, size, n = 200, 100 << 10, 16
	payload := strings.Repeat("x", size)
	for i := range items {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "est", Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"payload": payload}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "est", cm.Name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	// The GETs' objects: 1 MiB each, one per stalled connection.
	big := strings.Repeat("y", 1<<20)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "estget", Name: fmt.Sprintf("g-%02d", i)}, Data: map[string]string{"payload": big}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "estget", cm.Name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	const frameCacheBound = 4 << 20
	for _, kind := range []struct{ name, path string }{
		{"LIST from etcd", "/api/v1/namespaces/est/configmaps"},
		{"LIST from cache", "/api/v1/namespaces/est/configmaps?resourceVersion=0"},
		{"watch with initial events", "/api/v1/namespaces/est/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"},
		{"GET from etcd", "/api/v1/namespaces/estget/configmaps/g-%02d"},
		{"GET from cache", "/api/v1/namespaces/estget/configmaps/g-%02d"},
	} {
		for _, accept := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
			t.Run(kind.name+"/"+accept, func(t *testing.T) {
				lcfg := ratelimit.DefaultConfig()
				lcfg.MaxInflightBytes = 1 << 30
				lcfg.MaxBulkInflight = n
				lcfg.ClientShare = 1
				lcfg.Metrics = vmetrics.NewSet()
				lim, err := ratelimit.New(lcfg)
				if err != nil {
					t.Fatal(err)
				}
				cfg := proxy.Config{Client: cli, Resources: resource.NewBuiltin(), Metrics: vmetrics.NewSet(), Limiter: lim,
					WriteTimeout: time.Minute}
				var c *cache.Cache
				if !strings.Contains(kind.name, "etcd") {
					c, err = cache.New(cache.Config{Client: cli, MemoryBytes: 256 << 20, BackfillRevisions: -1})
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					cfg.Cache = c
				}
				srv, err := proxy.New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				// Each LIST's own estimate is measured: identical LISTs
				// would share one admission (sharedlist.go).
				srv.DisableSharedLists()
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go srv.Serve(ln)
				defer srv.Shutdown(context.Background())
				if c != nil {
					srv.PreloadCache(func(name string) bool { return name == "configmaps" })
					r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
					waitFor(t, "configmaps cached", func() error {
						if !r.Ready() {
							return fmt.Errorf("not ready")
						}
						return nil
					})
				}
				// One LIST first so that the size hints are set, as in a
				// running server.
				stalledList(t, ln.Addr().String(), "/api/v1/namespaces/est/configmaps/cm-00001").Close()
				runtime.GC()
				runtime.GC()
				base := heapNow()
				var conns []net.Conn
				for i := range n {
					c, err := net.Dial("tcp", ln.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
					path, reqs := kind.path, 1
					if strings.Contains(path, "%") {
						// A GET's body of 1 MiB fits in the kernel's
						// socket buffers (autotuned up to tcp_wmem's
						// 4 MiB): the client pipelines 8 GETs, so that
						// one body per connection is held by the server.
						path, reqs = fmt.Sprintf(path, i), 8
					}
					for range reqs {
						fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept: %s\r\n\r\n", path, accept)
					}
					conns = append(conns, c)
				}
				defer func() {
					for _, c := range conns {
						c.Close()
					}
				}()
				waitFor(t, "all streams admitted", func() error {
					st := lim.Stats()
					// A GET's body holds its bytes, not its seat, once
					// handed to fasthttp (ratelimit.Ticket.Drain).
					if got := st.InflightRequests + st.InflightBulk + st.InflightWatches + st.Draining; got != n {
						return fmt.Errorf("%d admitted, want %d", got, n)
					}
					return nil
				})
				// Until the held heap is stable over three samples: the
				// writes are blocked. Two GCs per sample, so that pooled
				// buffers (sync.Pool keeps them one GC longer) do not count.
				// Stable: within 2% or 1 MiB (the in-process etcd and the
				// race detector's bookkeeping move a 16 MiB heap by more
				// than 2% between samples on a busy machine: a -race CI
				// run at load 10 never saw three such samples in 20 s).
				var held uint64
				stable := 0
				within := func(a, b uint64) bool { return a <= b+max(b/50, 1<<20) }
				waitFor(t, "writes blocked", func() error {
					runtime.GC()
					runtime.GC()
					h := heapNow()
					if held == 0 || !within(h, held) || !within(held, h) {
						held, stable = h, 0
						return fmt.Errorf("heap still changing: %d", h)
					}
					if stable++; stable < 3 {
						return fmt.Errorf("heap stable %d times", stable)
					}
					held = h
					return nil
				})
				growth := int64(held) - int64(base)
				reserved := lim.Stats().ReservedBytes
				t.Logf("%s %s: %d stalled streams hold %.1f MiB of heap; reserved %.1f MiB (%.2f×)", kind.name, accept, n,
					float64(growth)/(1<<20), float64(reserved)/(1<<20), float64(reserved)/float64(max(growth, 1)))
				if growth > reserved+frameCacheBound {
					t.Errorf("%s %s: the stalled streams hold %d bytes, the limiter reserved %d (+ %d frame cache): the estimate is too low",
						kind.name, accept, growth, reserved, frameCacheBound)
				}
			})
		}
	}
}
