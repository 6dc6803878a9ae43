package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
)

// TestForwardWriteCost (LAZYAPI_KUBEAPISERVER=1 LAZYAPI_FORWARDBENCH=1)
// measures what forwarding adds, in one run against kube-apiserver
// v1.37.2 (startFront: --requestheader-*, Node,RBAC), with 5 rounds and
// medians:
//   - latency of a small write (a POST of a 100-byte ConfigMap, JSON, one
//     client, keep-alive TLS): 1,000 a round, alternately through lazyapi
//     and direct, so that both see the same load; p50 and p99 of each,
//     and their differences;
//   - CPU per forwarded MiB: 64 POSTs of 256 KiB ConfigMaps (the object
//     comes back: 32 MiB through lazyapi a round), through lazyapi, then the
//     same direct; lazyapi's CPU in the forwarded phase less its CPU in the
//     direct one (its watch cache takes in the writes either way) per MiB
//     of request and response bodies, beside kube-apiserver's CPU per MiB.
func TestForwardWriteCost(t *testing.T) {
	if os.Getenv("LAZYAPI_FORWARDBENCH") != "1" {
		t.Skip("set LAZYAPI_FORWARDBENCH=1 (and LAZYAPI_KUBEAPISERVER=1) to measure forwarded writes against kube-apiserver")
	}
	f := startFront(t)
	lazyPID := f.lazy.cmd.Process.Pid
	post := func(server, name string, data string) (int64, time.Duration) {
		body := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"d":"` + data + `"}}`
		req, err := http.NewRequest("POST", server+"/api/v1/namespaces/bench/configmaps", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+frontAlice)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		start := time.Now()
		resp, err := f.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST %s through %s: %d", name, server, resp.StatusCode)
		}
		return int64(len(body)) + n, d
	}
	if code := f.rawAnswer(t, f.k.url, "bench", "POST", "/api/v1/namespaces", frontAlice, nil,
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"bench"}}`)[:3]; code != "201" {
		t.Fatalf("create namespace bench: %s", code)
	}
	cpu := func(pid int) time.Duration {
		d, err := bench.ProcCPU(pid)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	small := strings.Repeat("x", 100)
	large := strings.Repeat("x", 256<<10)
	// Warm both connections and lazyapi's cache of configmaps.
	for i := range 20 {
		post(f.lazyURL, fmt.Sprintf("warm-l-%d", i), small)
		post(f.k.url, fmt.Sprintf("warm-d-%d", i), small)
	}
	const rounds, writes, bigWrites = 5, 1000, 64
	var lp50, lp99, dp50, dp99, add50, add99, lazyMs, cacheMs, fwdMs, kubeMs []float64
	for r := range rounds {
		lh, dh := bench.NewHistogram(), bench.NewHistogram()
		for i := range writes {
			_, d := post(f.lazyURL, fmt.Sprintf("l-%d-%d", r, i), small)
			lh.Record(d)
			_, d = post(f.k.url, fmt.Sprintf("d-%d-%d", r, i), small)
			dh.Record(d)
		}
		ls, ds := lh.Summary(), dh.Summary()
		lp50, lp99, dp50, dp99 = append(lp50, ls.P50), append(lp99, ls.P99), append(dp50, ds.P50), append(dp99, ds.P99)
		add50, add99 = append(add50, ls.P50-ds.P50), append(add99, ls.P99-ds.P99)

		var fwdBytes, dirBytes int64
		l0, k0 := cpu(lazyPID), cpu(f.k.pid)
		for i := range bigWrites {
			n, _ := post(f.lazyURL, fmt.Sprintf("big-l-%d-%d", r, i), large)
			fwdBytes += n
		}
		l1, k1 := cpu(lazyPID), cpu(f.k.pid)
		for i := range bigWrites {
			n, _ := post(f.k.url, fmt.Sprintf("big-d-%d-%d", r, i), large)
			dirBytes += n
		}
		// lazyapi's watch cache may still be taking in the last writes.
		time.Sleep(time.Second)
		l2, k2 := cpu(lazyPID), cpu(f.k.pid)
		mib := func(n int64) float64 { return float64(n) / (1 << 20) }
		lazyMs = append(lazyMs, float64((l1-l0).Microseconds())/1000/mib(fwdBytes))
		cacheMs = append(cacheMs, float64((l2-l1).Microseconds())/1000/mib(dirBytes))
		kubeMs = append(kubeMs, float64((k2-k1).Microseconds())/1000/mib(dirBytes))
		fwdMs = append(fwdMs, lazyMs[r]-cacheMs[r])
		t.Logf("round %d: small write p50/p99 through lazyapi %.2f/%.2f ms, direct %.2f/%.2f ms; 256 KiB writes: lazyapi %.1f ms CPU/MiB forwarded (%.1f MiB), %.1f ms/MiB while they went direct; kube-apiserver %.1f ms/MiB direct (%.1f forwarded)",
			r, ls.P50, ls.P99, ds.P50, ds.P99, lazyMs[r], mib(fwdBytes), cacheMs[r], kubeMs[r], float64((k1-k0).Microseconds())/1000/mib(fwdBytes))
	}
	med := func(v []float64) float64 { s := slices.Clone(v); slices.Sort(s); return s[len(s)/2] }
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("median of %d rounds (load %s): small write p50 %.2f ms through lazyapi vs %.2f ms direct (added %+.2f ms), p99 %.2f vs %.2f ms (added %+.2f ms); "+
		"lazyapi CPU per forwarded MiB %.1f ms (%.1f ms/MiB while the same writes went direct: its cache; forwarding itself %.1f ms/MiB), kube-apiserver %.1f ms per MiB written",
		rounds, strings.TrimSpace(string(load)), med(lp50), med(dp50), med(add50), med(lp99), med(dp99), med(add99),
		med(lazyMs), med(cacheMs), med(fwdMs), med(kubeMs))
	if med(lp50) <= 0 || med(dp50) <= 0 {
		t.Errorf("no latency measured")
	}
}
