package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestFrontLogStreamsRSS (LAZYAPI_KUBEAPISERVER=1 LAZYAPI_FORWARDBENCH=1):
// 1,000 `logs -f` streams (GET pods/p/log?follow=true, HTTP/1.1, one TLS
// connection each, as alice) held open through lazyapi to kube-apiserver
// to the kubelet stand-in, then the same 1,000 sent directly to
// kube-apiserver; three rounds of each, alternating. It logs lazyapi's and
// kube-apiserver's RSS before and with the streams held (medians), for
// bench/RESULTS.md.
func TestFrontLogStreamsRSS(t *testing.T) {
	if os.Getenv("LAZYAPI_FORWARDBENCH") != "1" {
		t.Skip("set LAZYAPI_FORWARDBENCH=1 (and LAZYAPI_KUBEAPISERVER=1) to measure streams held through lazyapi")
	}
	needKubectl(t)
	const n = 1000
	var profiling []string
	if os.Getenv("LAZYAPI_PPROF_DIR") != "" {
		profiling = []string{"--profiling"}
	}
	f := startFront(t, append(profiling, "--max-forwarded-streams-inflight=4096", "--max-inflight-bytes=1Gi")...) // one client's share: 1,024; the budget above the reserve (96 KiB a seat)
	si := startStandIns(t, f)
	lazyPID, kubePID := f.lazy.cmd.Process.Pid, f.k.pid
	mib := func(pid int) float64 { return float64(procStatus(pid, "VmRSS:")) / (1 << 20) }
	hold := func(server string) (lazyRSS, kubeRSS float64) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // loopback test servers
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, MaxIdleConnsPerHost: -1}
		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wg sync.WaitGroup
		opened := make(chan error, n)
		sem := make(chan struct{}, 64) // opening, not holding
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				req, _ := http.NewRequestWithContext(ctx, "GET", server+"/api/v1/namespaces/default/pods/p/log?container=c&follow=true", nil)
				req.Header.Set("Authorization", "Bearer "+frontAlice)
				resp, err := tr.RoundTrip(req)
				if err == nil && resp.StatusCode != 200 {
					err = &statusErr{resp.StatusCode}
				}
				if err == nil {
					br := bufio.NewReader(resp.Body)
					for range 3 {
						if _, err = br.ReadString('\n'); err != nil {
							break
						}
					}
				}
				<-sem
				opened <- err
				if err == nil {
					br := make([]byte, 1)
					resp.Body.Read(br) // held until cancel
					resp.Body.Close()
				}
			}()
		}
		for range n {
			if err := <-opened; err != nil {
				cancel()
				wg.Wait()
				t.Fatalf("a logs -f stream through %s: %v", server, err)
			}
		}
		time.Sleep(2 * time.Second)
		lazyRSS, kubeRSS = mib(lazyPID), mib(kubePID)
		if dir := os.Getenv("LAZYAPI_PPROF_DIR"); dir != "" && server == f.lazyURL {
			saveProfiles(t, f, dir)
		}
		if got := si.kubelet.follows.Load(); got != n {
			t.Errorf("the kubelet holds %d follows, want %d", got, n)
		}
		cancel()
		wg.Wait()
		time.Sleep(2 * time.Second)
		return lazyRSS, kubeRSS
	}
	t.Logf("before: lazyapi %.1f MiB, kube-apiserver %.1f MiB", mib(lazyPID), mib(kubePID))
	var throughLazy, throughKube, directKube []float64
	for round := range 3 {
		l, k := hold(f.lazyURL)
		throughLazy, throughKube = append(throughLazy, l), append(throughKube, k)
		_, dk := hold(f.k.url)
		directKube = append(directKube, dk)
		t.Logf("round %d: through lazyapi: lazyapi %.1f MiB, kube-apiserver %.1f MiB; direct: kube-apiserver %.1f MiB", round+1, l, k, dk)
	}
	med := func(v []float64) float64 { v = slices.Clone(v); slices.Sort(v); return v[len(v)/2] }
	t.Logf("median RSS with %d logs -f held: lazyapi %.1f MiB (kube-apiserver behind it %.1f MiB); kube-apiserver serving them directly %.1f MiB",
		n, med(throughLazy), med(throughKube), med(directKube))
}

// saveProfiles writes lazyapi's heap profile, goroutine profile
// (debug=1) and memory statistics to dir (LAZYAPI_PPROF_DIR, with
// --profiling), to see what a held stream costs.
func saveProfiles(t *testing.T, f *frontEnv, dir string) {
	t.Helper()
	for name, path := range map[string]string{"heap.pb.gz": "/debug/pprof/heap", "goroutine.txt": "/debug/pprof/goroutine?debug=1",
		"allocs.txt": "/debug/pprof/heap?debug=1"} {
		req, _ := http.NewRequest("GET", f.lazyURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+frontAlice)
		resp, err := f.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		writeFile(t, filepath.Join(dir, name), b)
	}
}

type statusErr struct{ code int }

func (e *statusErr) Error() string { return http.StatusText(e.code) }
