//go:build !race

// Measured on the plain binary, like TestIdleWatchCost.

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// connCostServer is one server TestWatchConnectionCost measures.
type connCostServer struct {
	name  string
	url   string // https://
	token string // bearer token of the client processes ("" for lazyapi)
	pid   int
	hc    *http.Client // for /metrics and the GC (with the token)
	h1    bool         // clients offer http/1.1 only (no HTTP/2)
}

// sample returns RSS, Go heap in use + stacks after a GC (bytes),
// goroutines and open file descriptors of the server.
func (s connCostServer) sample() (rss, heapStacks, goroutines, fds float64) {
	gc(s.hc, s.url)
	heapStacks = scrapeWith(s.hc, s.url, "go_memstats_heap_inuse_bytes") + scrapeWith(s.hc, s.url, "go_memstats_stack_inuse_bytes")
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(s.pid) + "/fd")
	return float64(vmRSS(s.pid)), heapStacks, scrapeWith(s.hc, s.url, "go_goroutines"), float64(len(ents))
}

// TestWatchConnectionCost (issue 26 item 3) measures what an idle
// kubelet-shaped watch costs a server when client-go opens it, as a node
// agent does: P client processes (a clientset each, its own transport and
// loopback address) each holding W watches of one ConfigMap by name. To
// kube-apiserver client-go multiplexes a process's watches over one
// HTTP/2 connection; lazyapi serves HTTP/1.1 only, so each watch is its
// own TCP+TLS connection. The servers run on one etcd, measured one after
// the other in the same run: lazyapi, kube-apiserver over HTTP/2, and
// kube-apiserver with the clients offering http/1.1 only (one connection
// per watch there too). Each row is the growth per watch of RSS, heap in
// use + goroutine stacks after a GC, goroutines and file descriptors,
// against the same process before the watches were opened.
//
// LAZYAPI_KUBEAPISERVER=1 LAZYAPI_CONNBENCH=1 runs it (P=100, W=30;
// LAZYAPI_CONNBENCH=P sets P; LAZYAPI_CONNBENCH_ROUNDS rounds, 2).
func TestWatchConnectionCost(t *testing.T) {
	script, _ := needKubeAPIServer(t)
	if os.Getenv("LAZYAPI_CONNBENCH") == "" {
		t.Skip("set LAZYAPI_CONNBENCH=1 (and LAZYAPI_KUBEAPISERVER=1) to measure the cost of a watch's connection against kube-apiserver")
	}
	procs, perProc := 100, 30
	if k, err := strconv.Atoi(os.Getenv("LAZYAPI_CONNBENCH")); err == nil && k > 1 {
		procs = k
	}
	n := procs * perProc
	etcd := etcdtest.Start(t)
	seedIdleConfigMaps(t, etcd, n)
	ca := testpki.NewCA(t, "conn-ca")
	serving := ca.Server(t)
	p, secureURL := startTLSBin(t, plainBin, etcd, serving)
	waitCached(t, p)
	kube := startKubeAPIServer(t, script, etcd.Endpoint)
	kubeHC := &http.Client{Timeout: time.Minute, Transport: &bearer{bench.KubeAPIServerToken, kube.hc.Transport}}
	lazyHC := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // loopback test server
	servers := []connCostServer{
		{name: "lazyapi (HTTP/1.1)", url: secureURL, pid: p.cmd.Process.Pid, hc: lazyHC},
		{name: "kube-apiserver (HTTP/2)", url: kube.url, token: bench.KubeAPIServerToken, pid: kube.pid, hc: kubeHC},
		{name: "kube-apiserver (HTTP/1.1)", url: kube.url, token: bench.KubeAPIServerToken, pid: kube.pid, hc: kubeHC, h1: true},
	}
	rounds := 2
	if k, err := strconv.Atoi(os.Getenv("LAZYAPI_CONNBENCH_ROUNDS")); err == nil && k > 0 {
		rounds = k
	}
	for r := range rounds {
		for b, s := range servers {
			measureConnCost(t, s, 60+3*r+b, procs, perProc)
		}
	}
}

// measureConnCost opens procs x perProc client-go watches to s from
// loopback block b and logs what each added to s.
func measureConnCost(t *testing.T, s connCostServer, b, procs, perProc int) {
	t.Helper()
	n := procs * perProc
	rss0, hs0, g0, fd0 := s.sample()
	stop, err := openClientGoWatches(s, b, procs, perProc)
	if err != nil {
		stop()
		t.Fatalf("%s: %v", s.name, err)
	}
	time.Sleep(3 * time.Second) // the last watches registered
	rss1, hs1, g1, fd1 := s.sample()
	t.Logf("%s, %d processes x %d watches: RSS %+.1f KiB, heap+stacks %+.1f KiB, goroutines %+.2f, fds %+.3f per watch (RSS %.0f -> %.0f MiB)",
		s.name, procs, perProc, (rss1-rss0)/float64(n)/1024, (hs1-hs0)/float64(n)/1024, (g1-g0)/float64(n), (fd1-fd0)/float64(n), rss0/(1<<20), rss1/(1<<20))
	stop()
	time.Sleep(3 * time.Second)
}

// openClientGoWatches opens procs clientsets to s, each from its own
// loopback address of block b, and perProc watches on each (watch j of
// process i selects ConfigMap idle/cm-(i*perProc+j)); stop ends them and
// closes the clients' connections.
func openClientGoWatches(s connCostServer, b, procs, perProc int) (stop func(), err error) {
	var mu sync.Mutex
	var ws []watch.Interface
	var hcs []*http.Client
	var firstErr error
	stop = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, w := range ws {
			w.Stop()
		}
		for _, hc := range hcs {
			hc.CloseIdleConnections()
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				open, hc, err := openProcessWatches(s, loopback(b, i), i*perProc, perProc)
				mu.Lock()
				ws, hcs = append(ws, open...), append(hcs, hc)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for i := range procs {
		next <- i
	}
	close(next)
	wg.Wait()
	return stop, firstErr
}

// openProcessWatches is one client process: a clientset of its own
// (client-go's default transport: HTTP/2 when the server offers it, unless
// s.h1) dialing from local, with k watches of cm-from.. opened at once.
func openProcessWatches(s connCostServer, local net.IP, from, k int) ([]watch.Interface, *http.Client, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: local}}
	cfg := &rest.Config{Host: s.url, BearerToken: s.token, QPS: -1, Timeout: 0,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // loopback test servers
		Dial:            d.DialContext}
	if s.h1 {
		cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, hc, err
	}
	out := make([]watch.Interface, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for j := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[j], errs[j] = cs.CoreV1().ConfigMaps("idle").Watch(context.Background(), metav1.ListOptions{
				FieldSelector: fmt.Sprintf("metadata.name=cm-%05d", from+j), AllowWatchBookmarks: true,
				ResourceVersion: "0", TimeoutSeconds: ptr(int64(900))})
		}()
	}
	wg.Wait()
	var open []watch.Interface
	var firstErr error
	for j := range k {
		if errs[j] != nil {
			if firstErr == nil {
				firstErr = errs[j]
			}
			continue
		}
		open = append(open, out[j])
	}
	return open, hc, firstErr
}
