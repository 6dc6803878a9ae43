package e2e

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestScaleBench (LAZYAPI_SCALEBENCH=1) floods consistent full LISTs of
// ConfigMaps spread over 1, 2 and 3 lazyapi replicas, one per member of a
// real 3-member etcd (its own member first in --etcd-servers), with the
// same clients (LAZYAPI_SCALEBENCH_CLIENTS, default 6) for
// LAZYAPI_SCALEBENCH_SECONDS (default 10) each. It reports LISTs/s, MiB/s
// and the lazyapi processes' CPU seconds per MiB served (utime+stime from
// /proc), which does not depend on how many cores the machine has.
func TestScaleBench(t *testing.T) {
	if os.Getenv("LAZYAPI_SCALEBENCH") != "1" {
		t.Skip("set LAZYAPI_SCALEBENCH=1 to run the replica scaling benchmark")
	}
	clients := benchEnvInt(t, "LAZYAPI_SCALEBENCH_CLIENTS", 6)
	dur := time.Duration(benchEnvInt(t, "LAZYAPI_SCALEBENCH_SECONDS", 10)) * time.Second
	n := benchEnvInt(t, "LAZYAPI_SCALEBENCH_OBJECTS", 5000)
	// LAZYAPI_SCALEBENCH_RV=0 lists with resourceVersion=0 (the cache
	// alone); default: consistent LISTs (a quorum read of etcd's revision,
	// then the cache).
	query := ""
	if rv := os.Getenv("LAZYAPI_SCALEBENCH_RV"); rv != "" {
		query = "?resourceVersion=" + rv
	}
	cl := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := &churner{cli: cl.Client, rnd: rand.New(rand.NewPCG(16, 9)), n: n}
	ch.seed(t, ctx)
	eps := cl.Endpoints()
	var urls []string
	var pids []int
	for i := range eps {
		order := append([]string{eps[i]}, append(append([]string(nil), eps[:i]...), eps[i+1:]...)...)
		p := start(t, "--etcd-servers="+strings.Join(order, ","))
		urls = append(urls, p.URL)
		pids = append(pids, p.cmd.Process.Pid)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for _, u := range urls {
		if got := fullList(hc, u, ""); got != n {
			t.Fatalf("%s: LIST %d items, want %d", u, got, n)
		}
		waitCacheState(t, hc, u, 2, time.Minute)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("%d ConfigMaps, %d clients, %s per step, LIST%s; load before: %s", n, clients, dur, query, strings.TrimSpace(string(load)))
	var base float64
	for k := 1; k <= len(urls); k++ {
		var lists, bytes atomic.Int64
		cpu0 := make([]float64, k)
		for i := range k {
			cpu0[i], _ = cpuSeconds(pids[i])
		}
		sctx, stop := context.WithTimeout(ctx, dur)
		var wg sync.WaitGroup
		began := time.Now()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u := urls[c%k] + "/api/v1/configmaps" + query
				for sctx.Err() == nil {
					req, _ := http.NewRequestWithContext(sctx, "GET", u, nil)
					req.Header.Set("Accept", "application/json")
					resp, err := hc.Do(req)
					if err != nil {
						continue
					}
					nb, err := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode == 200 {
						lists.Add(1)
						bytes.Add(nb)
					}
				}
			}()
		}
		wg.Wait()
		stop()
		el := time.Since(began).Seconds()
		var cpu float64
		for i := range k {
			c1, _ := cpuSeconds(pids[i])
			cpu += c1 - cpu0[i]
		}
		mib := float64(bytes.Load()) / (1 << 20)
		if k == 1 {
			base = mib / el
		}
		load, _ := os.ReadFile("/proc/loadavg")
		t.Logf("RESULT replicas=%d: %.1f LISTs/s, %.1f MiB/s (%.2fx of 1 replica), lazyapi CPU %.2f s/s, %.1f ms CPU per MiB served; load %s",
			k, float64(lists.Load())/el, mib/el, mib/el/base, cpu/el, 1000*cpu/mib, strings.Fields(string(load))[0])
	}
}
