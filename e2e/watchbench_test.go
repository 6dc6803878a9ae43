package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// metricOf reads one sample from lazyapi's /metrics.
func metricOf(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// cpuSeconds returns the user+system CPU time of process pid from
// /proc/<pid>/stat (fields 14 and 15, in USER_HZ ticks, which Linux fixes
// at 100 for user space); ok=false where /proc is not available.
func cpuSeconds(pid int) (float64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): utime is field 14 = f[11], stime f[12].
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(ut+st) / 100, true
}

// benchEnvInt reads a positive integer from the environment, or def.
func benchEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// writeTimeField is what the bench's clients look for in each JSON event
// line: the ConfigMap's data.t, the write's wall-clock time in ns.
var writeTimeField = []byte(`"t":"`)

// writeTime returns the data.t timestamp of one JSON watch event line.
func writeTime(line []byte) (int64, bool) {
	i := bytes.Index(line, writeTimeField)
	if i < 0 {
		return 0, false
	}
	rest := line[i+len(writeTimeField):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return ns, err == nil
}

// TestWatchBench is the watch benchmark (not part of CI; run with
// LAZYAPI_WATCHBENCH=1): 1,000 concurrent JSON watchers on ConfigMaps in
// one namespace of a lazyapi process while 100 changes/s are written to
// etcd for 10 s (LAZYAPI_WATCHBENCH_WATCHERS, _RATE, _SECONDS change them).
//
// It measures the server: the clients only cut the stream into lines and
// find the data.t timestamp with bytes.Index (no JSON decoding), and the
// writer paces writes by an absolute schedule (asynchronous puts) and
// reports the rate it achieved. It reports lazyapi's heap per idle watch,
// the delivery latency from the etcd write to the line read by the client
// (p50/p99/max), and lazyapi's CPU seconds (from /proc/<pid>/stat) from the
// first write until every event was delivered, per delivered event.
func TestWatchBench(t *testing.T) {
	if os.Getenv("LAZYAPI_WATCHBENCH") != "1" {
		t.Skip("set LAZYAPI_WATCHBENCH=1 to run the watch benchmark")
	}
	watchers := benchEnvInt(t, "LAZYAPI_WATCHBENCH_WATCHERS", 1000)
	rate := benchEnvInt(t, "LAZYAPI_WATCHBENCH_RATE", 100)
	dur := time.Duration(benchEnvInt(t, "LAZYAPI_WATCHBENCH_SECONDS", 10)) * time.Second
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ch := &churner{cli: etcd.Client, rnd: rand.New(rand.NewPCG(5, 6)), n: 1000}
	ch.seed(t, ctx)
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--max-watches-inflight="+strconv.Itoa(2*watchers))
	pid := p.cmd.Process.Pid
	base := p.URL + "/api/v1/namespaces/ns-1/configmaps"
	// Prime the cache: watch until one is served from it.
	for i := 0; ; i++ {
		resp, err := http.Get(base + "?watch=true&timeoutSeconds=1")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if metricOf(t, p.URL, `lazyapi_cache_requests_total{resource="configmaps",result="hit"}`) > 0 {
			break
		}
		if i > 100 {
			t.Fatal("watch cache did not become ready")
		}
	}
	heap0 := metricOf(t, p.URL, "go_memstats_heap_inuse_bytes")
	rv := strconv.FormatInt(func() int64 {
		r, err := etcd.Client.Get(ctx, "/")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}(), 10)

	hist := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	var mu sync.Mutex
	var received, opened atomic.Int64
	tr := &http.Transport{MaxIdleConnsPerHost: watchers, DisableCompression: true}
	hc := &http.Client{Transport: tr}
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ready := make(chan struct{}, watchers)
	for range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(wctx, "GET", base+"?watch=true&resourceVersion="+rv, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := hc.Do(req)
			ready <- struct{}{}
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				return
			}
			opened.Add(1)
			br := bufio.NewReaderSize(resp.Body, 16<<10)
			local := make([]int64, 0, 1024)
			var long []byte // a line longer than br's buffer
			for {
				line, err := br.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					long = append(long, line...)
					continue
				}
				if err != nil {
					break
				}
				if long != nil {
					line = append(long, line...)
					long = nil
				}
				if ns, ok := writeTime(line); ok {
					local = append(local, time.Now().UnixNano()-ns)
					received.Add(1)
				}
			}
			mu.Lock()
			for _, d := range local {
				hist.RecordValue(max(d/1000, 1))
			}
			mu.Unlock()
		}()
	}
	for range watchers {
		<-ready
	}
	// The headers reach a client just before its watch counts as open:
	// poll the gauge to a deadline.
	for deadline := time.Now().Add(10 * time.Second); ; {
		open := metricOf(t, p.URL, "lazyapi_watchers_open")
		if open >= float64(watchers) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%v watchers open, want %d", open, watchers)
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the gauge to a deadline
	}
	heapIdle := metricOf(t, p.URL, "go_memstats_heap_inuse_bytes")
	cpu0, cpuOK := cpuSeconds(pid)

	// rate changes/s to ConfigMaps of ns-1 (keys cm-xxxx1), data.t = write
	// time, on an absolute schedule: a late write does not delay the next.
	total := rate * int(dur/time.Second)
	interval := time.Second / time.Duration(rate)
	var heapMax float64
	var wwg sync.WaitGroup
	writes := 0
	t0 := time.Now()
	lastSample := t0
	timer := time.NewTimer(0)
	for i := range total {
		if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
			timer.Reset(wait)
			<-timer.C // pacing the writer, not synchronising
		}
		k := 1 + 10*ch.rnd.IntN(100)
		ns, name := ch.key(k)
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
			Data: map[string]string{"t": strconv.FormatInt(time.Now().UnixNano(), 10), "pad": strings.Repeat("x", 500)}}
		val, err := storagefmt.Protobuf(obj)
		if err != nil {
			t.Fatal(err)
		}
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			if _, err := etcd.Client.Put(ctx, storagefmt.Key("/registry", "configmaps", ns, name), string(val)); err != nil {
				t.Error(err)
			}
		}()
		writes++
		if time.Since(lastSample) > 500*time.Millisecond {
			heapMax = max(heapMax, metricOf(t, p.URL, "go_memstats_heap_inuse_bytes"))
			lastSample = time.Now()
		}
	}
	wwg.Wait()
	writeDur := time.Since(t0)
	want := int64(writes) * opened.Load()
	deadline := time.Now().Add(60 * time.Second)
	for received.Load() < want && time.Now().Before(deadline) {
		heapMax = max(heapMax, metricOf(t, p.URL, "go_memstats_heap_inuse_bytes"))
		time.Sleep(100 * time.Millisecond) // polling until delivered or the deadline
	}
	deliverDur := time.Since(t0)
	cpu1, _ := cpuSeconds(pid)
	wcancel()
	wg.Wait()
	lag := metricOf(t, p.URL, "lazyapi_watchers_closed_lagging_total")
	fallback := metricOf(t, p.URL, "lazyapi_watch_etcd_fallback_total")
	shared := metricOf(t, p.URL, `lazyapi_watch_frames_total{result="shared"}`)
	encoded := metricOf(t, p.URL, `lazyapi_watch_frames_total{result="encoded"}`)
	private := metricOf(t, p.URL, `lazyapi_watch_frames_total{result="private"}`)
	got := received.Load()
	cpu := "n/a"
	if cpuOK {
		cpu = fmt.Sprintf("%.2f s (%.1f µs per delivered event, %.1f ms per write)", cpu1-cpu0,
			(cpu1-cpu0)*1e6/float64(max(got, 1)), (cpu1-cpu0)*1e3/float64(max(writes, 1)))
	}
	t.Logf("watch bench: %d watchers (%d opened), %d writes in %.1f s (achieved %.1f/s, intended %d/s); delivered %d of %d events in %.1f s after the first write",
		watchers, opened.Load(), writes, writeDur.Seconds(), float64(writes)/writeDur.Seconds(), rate, got, want, deliverDur.Seconds())
	t.Logf("watch bench: lazyapi heap in use %.1f MiB before, %.1f MiB with the watchers idle (%.1f KiB per watch), max %.1f MiB during (includes uncollected garbage)",
		heap0/(1<<20), heapIdle/(1<<20), (heapIdle-heap0)/1024/float64(max(opened.Load(), 1)), heapMax/(1<<20))
	t.Logf("watch bench: latency write->line read p50 %.1f ms, p99 %.1f ms, max %.1f ms; lazyapi CPU %s; lagging closes %v, etcd fallbacks %v",
		float64(hist.ValueAtQuantile(50))/1000, float64(hist.ValueAtQuantile(99))/1000, float64(hist.Max())/1000, cpu, lag, fallback)
	t.Logf("watch bench: frames shared %v, encoded for sharing %v, encoded privately (far behind) %v", shared, encoded, private)
	if got < want {
		relists := metricOf(t, p.URL, `lazyapi_cache_relists_total{resource="configmaps"}`)
		t.Errorf("delivered %d of %d events (cache re-lists %v); lazyapi stderr:\n%s", got, want, relists, p.stderr)
	}
}
