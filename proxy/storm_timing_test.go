package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
)

// BenchmarkSecretStreams: the per-stream transcode of an informer storm on
// large Secrets (issue 15), in process. n Secrets of 1 MiB of random data
// (bench's storm data: JSON of a Secret is base64, ~1.33× the stored bytes)
// are cached in a watch cache that they fill over 3/4 of, so the rendered-JSON
// cache keeps nothing and every stream transcodes every Secret, as in the
// 400-Secret storm at --memory-limit=2Gi. One op is `streams` concurrent
// JSON streams over HTTP on loopback, each read to its end by a client that
// discards what it reads: "watchlist" is a WatchList (sendInitialEvents,
// read to the initial-events-end bookmark), "list" a reflector's first LIST
// (resourceVersion=0). alloc-B/served-B is the process's bytes allocated
// (runtime.MemStats.TotalAlloc, the clients' included) per byte served: the
// garbage behind the garbage cap's collections in the storm.
//
//	go test ./proxy -run '^$' -bench BenchmarkSecretStreams -benchtime=10x -count=3
func BenchmarkSecretStreams(b *testing.B) {
	n := 64
	if testing.Short() {
		n = 16
	}
	const size = 1 << 20
	var c *cache.Cache
	e := startEnv(b, func(cfg *proxy.Config) {
		var err error
		// The Secrets fill 80% of the budget: over renderBudgetNum/Den.
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: int64(n) * (size + 4<<10) * 5 / 4, Metrics: cfg.Metrics})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	r := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("secret-%03d", i), UID: "uid",
			Labels: map[string]string{"app": "storm"}}, Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"tls.key": data, "username": []byte("storm")}}
		v, err := storagefmt.Protobuf(s)
		if err != nil {
			b.Fatal(err)
		}
		e.putRaw(b, storagefmt.Key("/registry", "secrets", "ns", s.Name), v)
	}
	cr := c.Resource(cache.Spec{Name: "secrets", Prefix: "/registry/secrets/", Namespaced: true})
	waitCached(b, cr, "secrets cached")
	tr := &http.Transport{MaxIdleConnsPerHost: 64, ReadBufferSize: 64 << 10, DisableCompression: true}
	b.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	const base = "/api/v1/namespaces/ns/secrets"
	// stream reads one response to its end (a WatchList to its
	// initial-events-end bookmark) and returns the bytes read.
	stream := func(ctx context.Context, path string, watch bool) (int64, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("status %d", resp.StatusCode)
		}
		if !watch {
			return io.Copy(io.Discard, resp.Body)
		}
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		var read int64
		for {
			line, err := br.ReadSlice('\n')
			read += int64(len(line))
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return read, err
			}
			if bytes.Contains(line, []byte(`"k8s.io/initial-events-end":"true"`)) {
				return read, nil
			}
		}
	}
	run := func(b *testing.B, path string, watch bool, streams int) {
		b.ReportAllocs()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var served atomic.Int64
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		cpu := processCPU()
		for b.Loop() {
			var wg sync.WaitGroup
			for range streams {
				wg.Go(func() {
					n, err := stream(ctx, path, watch)
					if err != nil {
						b.Error(err)
					}
					served.Add(n)
				})
			}
			wg.Wait()
		}
		reportCPU(b, cpu)
		runtime.ReadMemStats(&ms1)
		b.SetBytes(served.Load() / int64(b.N))
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(served.Load()), "alloc-B/served-B")
		b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(b.N), "gc/op")
		if kept, _ := metricValue(e.ms, `lazyapi_render_cache_total{result="kept"}`); kept != 0 {
			b.Fatalf("%v renderings kept: the rendering cache is on", kept)
		}
	}
	// One stream of each first: the pools and the watch cache's
	// consistent-read machinery warm, so that the first sub-benchmark
	// measures the same steady state as the others.
	wl := base + "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
	list := base + "?limit=500&resourceVersion=0"
	for _, p := range []string{wl, list} {
		if _, err := stream(context.Background(), p, p == wl); err != nil {
			b.Fatal(err)
		}
	}
	for _, streams := range []int{1, 8} {
		b.Run("watchlist/streams="+strconv.Itoa(streams), func(b *testing.B) {
			run(b, wl, true, streams)
		})
		b.Run("list/streams="+strconv.Itoa(streams), func(b *testing.B) {
			run(b, list, false, streams)
		})
	}
}
