package proxy_test

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
)

// BenchmarkWatchFanout: 100 JSON watchers of one namespace over HTTP, fed
// from the watch cache, while ConfigMaps (~600 B stored) change; one op is
// one change delivered to every watcher, ns/delivered the time per event
// and watcher. "shared" encodes each event's frame once for all watchers
// (frameCache); the baseline in the same run, "unshared", has the frame
// cache off, so each watcher transcodes every event itself. Clients only
// cut lines. The etcd writes (transactions of 10 puts) and the clients run
// in the same process, so the ratio understates the server-side gain.
//
//	go test ./proxy -run '^$' -bench BenchmarkWatchFanout -benchtime=2000x -count=3
func BenchmarkWatchFanout(b *testing.B) {
	var c *cache.Cache
	e := startEnv(b, func(cfg *proxy.Config) {
		var err error
		// A history of 20,000 events: the writer does not wait for the
		// watchers, and one more than the history behind is closed.
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 256 << 20, DefaultHistory: 20000})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	const keys = 100
	vals := make([]string, keys)
	for i := range keys {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(i), Namespace: "ns", UID: "uid"},
			Data: map[string]string{"pad": strings.Repeat("x", 500), "i": strconv.Itoa(i)}}
		v, err := storagefmt.Protobuf(obj)
		if err != nil {
			b.Fatal(err)
		}
		vals[i] = string(v)
	}
	key := func(i int) string { return storagefmt.Key("/registry", "configmaps", "ns", "cm-"+strconv.Itoa(i%keys)) }
	for i := range keys {
		e.putRaw(b, key(i), []byte(vals[i]))
	}
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitCached(b, r, "configmaps cached")
	tr := &http.Transport{MaxIdleConnsPerHost: 1000}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	run := func(b *testing.B, watchers int) {
		b.StopTimer()
		rev, err := e.cli.Get(context.Background(), "/")
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		for range watchers {
			req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion="+
				strconv.FormatInt(rev.Header.Revision, 10), nil)
			req.Header.Set("Accept", "application/json")
			resp, err := hc.Do(req)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("watch: %v", err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer resp.Body.Close()
				br := bufio.NewReaderSize(resp.Body, 16<<10)
				for n := 0; n < b.N; {
					line, err := br.ReadSlice('\n')
					if err != nil && err != bufio.ErrBufferFull {
						b.Errorf("after %d of %d events: %v", n, b.N, err)
						return
					}
					if err == nil && len(line) > 1 {
						n++
					}
				}
			}()
		}
		shared0, _ := metricValue(e.ms, `lazyapi_watch_frames_total{result="shared"}`)
		cpu := processCPU()
		b.StartTimer()
		for i := 0; i < b.N; i += 10 {
			ops := make([]clientv3.Op, 0, 10)
			for j := i; j < min(i+10, b.N); j++ {
				ops = append(ops, clientv3.OpPut(key(j), vals[j%keys]))
			}
			if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
				b.Fatal(err)
			}
		}
		wg.Wait()
		b.StopTimer()
		reportCPU(b, cpu)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*watchers), "ns/delivered")
		shared1, _ := metricValue(e.ms, `lazyapi_watch_frames_total{result="shared"}`)
		b.ReportMetric(100*(shared1-shared0)/float64(b.N*watchers), "%shared")
	}
	for _, shared := range []bool{true, false} {
		name := "shared"
		if !shared {
			name = "unshared"
		}
		b.Run(name+"/watchers=100", func(b *testing.B) {
			if shared {
				proxy.SetWatchFrameCacheBytes(e.srv, proxy.WatchFrameCacheBytes)
			} else {
				proxy.SetWatchFrameCacheBytes(e.srv, 0)
			}
			run(b, 100)
		})
	}
}
