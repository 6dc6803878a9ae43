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

// BenchmarkWatchSelective: the kubelet's shape of watch (issue 26). 1,000
// watches from the watch cache, each on its own connection (HTTP/1.1, as
// client-go's to lazyapi) selecting one ConfigMap by metadata.name, with
// bookmarks (every 10 s here, a minute by default); an op is one change of
// one of the ConfigMaps (round robin), delivered to the one watch that
// selects it. The changes are paced, 100 a second (transactions of 2 every
// 20 ms), so each watch gets one every 10 s, as many as bookmarks, as in
// lazybench kubelet, and what happens between its writes (the write
// guard's timers, the bookmarks' timers) is counted too. What one delivered event
// costs is therefore mostly per connection: the watch goroutine's wake-up,
// its frame's write and the write's guard (writeGuard). cpu-ns/op is the
// process's CPU per delivered event: the server, its embedded etcd and the
// clients, so a change in the server's share shows diluted. It needs 2,000
// open files.
//
//	go test ./proxy -run '^$' -bench BenchmarkWatchSelective -benchtime=2000x -count=5
func BenchmarkWatchSelective(b *testing.B) {
	const watchers, batch, every = 1000, 2, 20 * time.Millisecond
	var c *cache.Cache
	e := startEnv(b, func(cfg *proxy.Config) {
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 256 << 20, BookmarkInterval: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	name := func(i int) string { return "cm-" + strconv.Itoa(i%watchers) }
	vals := make([][]byte, 2)
	for i := range vals {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "uid"},
			Data: map[string]string{"pad": strings.Repeat("x", 300), "v": strconv.Itoa(i)}}
		v, err := storagefmt.Protobuf(obj)
		if err != nil {
			b.Fatal(err)
		}
		vals[i] = v
	}
	key := func(i int) string { return storagefmt.Key("/registry", "configmaps", "ns", name(i)) }
	var rev int64
	for i := range watchers {
		rev = e.putRaw(b, key(i), vals[0])
	}
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitCached(b, r, "configmaps cached")
	tr := &http.Transport{MaxIdleConnsPerHost: watchers}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Each watch counts the events it read; want is what each must have
	// read by the end of the current run.
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	got := make([]int, watchers)
	for i := range watchers {
		req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/namespaces/ns/configmaps?watch=true&allowWatchBookmarks=true&resourceVersion="+
			strconv.FormatInt(rev, 10)+"&fieldSelector=metadata.name%3D"+name(i), nil)
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("watch %d: %v", i, err)
		}
		go func() {
			defer resp.Body.Close()
			br := bufio.NewReaderSize(resp.Body, 4<<10)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil && err != bufio.ErrBufferFull {
					return
				}
				if err == nil && strings.Contains(string(line), `"type":"MODIFIED"`) {
					mu.Lock()
					got[i]++
					cond.Broadcast()
					mu.Unlock()
				}
			}
		}()
	}
	sent := 0
	b.ResetTimer()
	cpu := processCPU()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; i < b.N; i += batch {
		<-tick.C
		ops := make([]clientv3.Op, 0, batch)
		for j := i; j < min(i+batch, b.N); j++ {
			ops = append(ops, clientv3.OpPut(key(sent+j), string(vals[((sent+j)/watchers+1)%2])))
		}
		if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	sent += b.N
	// Each watch has read its share of the changes so far.
	deadline := time.AfterFunc(time.Minute, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
	defer deadline.Stop()
	start := time.Now()
	mu.Lock()
	for i := 0; i < watchers; i++ {
		want := sent / watchers
		if i < sent%watchers {
			want++
		}
		for got[i] < want {
			if time.Since(start) > time.Minute {
				mu.Unlock()
				b.Fatalf("watch %d read %d events, want %d", i, got[i], want)
			}
			cond.Wait()
		}
	}
	mu.Unlock()
	b.StopTimer()
	reportCPU(b, cpu)
}
