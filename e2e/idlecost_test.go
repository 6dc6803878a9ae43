//go:build !race

// The idle-watch cost is measured on the plain binary (see hostile_test.go
// for why without the race detector).

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// idleSample is what the process holds at one point of TestIdleWatchCost.
type idleSample struct {
	rss, heap, stacks, goroutines float64
}

// idleCostRow is one phase's growth per opened watch or connection.
type idleCostRow struct {
	what                           string
	rss, heapStacks, stacks, gorPC float64 // KiB per watch (goroutines: per watch)
}

// TestIdleWatchCost (issue 26 item 2) measures what an idle watch costs
// the real binary, as a kubelet holds them: one watch of one ConfigMap
// (fieldSelector=metadata.name=X, bookmarks on) per connection, each from
// its own loopback address, over plain HTTP and over TLS. One process
// serves --port and --secure-port; each phase opens n of one kind and
// samples RSS (VmRSS) and, after a GC, Go heap in use + goroutine stacks
// (its own /metrics) against the sample before it, in the same process:
// plain watches, TLS watches, then idle keep-alive connections after one
// GET (plain, TLS), which is what the connection alone costs (what HTTP/2
// multiplexing could save per watch, at most). Then the watches' clients
// close their connections: every watch must end and give its seat back.
//
// CI opens 1,000 of each (at 300 the heap's noise of a few MiB made the
// TLS figure 39-50 KiB from run to run, and failed CI once; at 1,000 it is
// 40.6-41.4) and checks that the heap + stacks of an idle watch
// stay within what the limiter reserves for it (proxy's watchIdleBytes,
// plus watchTLSBytes over TLS: 25 and 49 KiB). LAZYAPI_IDLE_COST=1 opens
// 2,000 of each (=N: N) and logs the figures of bench/RESULTS.md;
// LAZYAPI_IDLE_COST_BASE=path also measures that build ("before"), the
// two interleaved in the same run (LAZYAPI_IDLE_COST_ROUNDS rounds, 2). LAZYAPI_IDLE_COST_PROFILE=dir
// saves a heap profile after each phase there.
func TestIdleWatchCost(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of watches on the real binary")
	}
	n, rounds := 1000, 1
	if v := os.Getenv("LAZYAPI_IDLE_COST"); v != "" {
		n, rounds = 2000, 2
		if k, err := strconv.Atoi(v); err == nil && k > 1 {
			n = k
		}
		if k, err := strconv.Atoi(os.Getenv("LAZYAPI_IDLE_COST_ROUNDS")); err == nil && k > 0 {
			rounds = k
		}
	}
	etcd := etcdtest.Start(t)
	seedIdleConfigMaps(t, etcd, n)
	ca := testpki.NewCA(t, "idle-ca")
	serving := ca.Server(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}

	type build struct{ name, bin string }
	builds := []build{{"this build", plainBin}}
	if b := os.Getenv("LAZYAPI_IDLE_COST_BASE"); b != "" {
		builds = []build{{"base", b}, {"this build", plainBin}}
	}
	results := map[string][][]idleCostRow{}
	for r := range rounds {
		for _, b := range builds {
			rows := measureIdleCost(t, etcd, b.bin, tlsConf, serving, n)
			for _, row := range rows {
				t.Logf("round %d, %s, %d each: %-24s RSS %+6.1f KiB, heap+stacks %+6.1f KiB (stacks %+5.1f), goroutines %+.2f per watch",
					r+1, b.name, n, row.what, row.rss, row.heapStacks, row.stacks, row.gorPC)
			}
			results[b.name] = append(results[b.name], rows)
		}
	}
	for _, b := range builds {
		med := medianRows(results[b.name])
		for _, row := range med {
			t.Logf("median of %d, %s, %d each: %-24s RSS %+6.1f KiB, heap+stacks %+6.1f KiB (stacks %+5.1f), goroutines %+.2f per watch",
				rounds, b.name, n, row.what, row.rss, row.heapStacks, row.stacks, row.gorPC)
		}
		if b.bin != plainBin {
			continue
		}
		// What the limiter reserves per idle watch must cover what one
		// holds (proxy's watchIdleBytes and watchTLSBytes).
		bound := map[string]float64{"plain watch": idleWatchBytes >> 10, "TLS watch": idleWatchTLSBytes >> 10}
		for _, row := range med {
			if b, ok := bound[row.what]; ok && row.heapStacks > b {
				t.Errorf("%s: heap + stacks %.1f KiB per idle watch, more than the %.0f KiB the limiter reserves for it", row.what, row.heapStacks, b)
			}
		}
	}
}

// idleWatchTLSBytes is proxy's watchIdleBytes + watchTLSBytes: what an
// idle watch over TLS reserves.
const idleWatchTLSBytes = 49 << 10

// startTLSBin starts bin on etcd with --profiling and a TLS --secure-port
// (serving's certificate) beside the plain port, and returns the process
// and the TLS port's URL.
func startTLSBin(t *testing.T, bin string, etcd *etcdtest.Server, serving *testpki.Cert) (*process, string) {
	t.Helper()
	securePort := freePort(t)
	p := startBin(t, bin, "--etcd-servers="+etcd.Endpoint, "--profiling", "--secure-port="+strconv.Itoa(securePort),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile)
	return p, "https://127.0.0.1:" + strconv.Itoa(securePort)
}

// seedIdleConfigMaps writes n small ConfigMaps idle/cm-00000.. to etcd.
func seedIdleConfigMaps(t *testing.T, etcd *etcdtest.Server, n int) {
	t.Helper()
	for i := range n {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "idle", Name: fmt.Sprintf("cm-%05d", i), UID: types.UID(fmt.Sprintf("u-%d", i))},
			Data:       map[string]string{"key": "value"}}
		if _, err := etcd.Client.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "idle", cm.Name), string(mustProtobuf(t, cm))); err != nil {
			t.Fatal(err)
		}
	}
}

// measureIdleCost runs bin on etcd with --port and --secure-port and
// measures the phases of TestIdleWatchCost, n watches or connections
// each.
func measureIdleCost(t *testing.T, etcd *etcdtest.Server, bin string, tlsConf *tls.Config, serving *testpki.Cert, n int) []idleCostRow {
	t.Helper()
	p, secureURL := startTLSBin(t, bin, etcd, serving)
	defer p.stop(30 * time.Second)
	waitCached(t, p)
	const coll = "/api/v1/namespaces/idle/configmaps"
	rv := collectionRV(t, p.URL, coll)
	watchPath := func(i int) string {
		return fmt.Sprintf("%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=%s&fieldSelector=metadata.name%%3Dcm-%05d", coll, rv, i)
	}
	sample := func() idleSample {
		// Two GCs: the first moves sync.Pool contents (TLS handshake and
		// write buffers of the phase just opened) to the victim cache,
		// the second frees them; one GC left them counted as per-watch
		// heap.
		gc(http.DefaultClient, p.URL)
		gc(http.DefaultClient, p.URL)
		return idleSample{rss: float64(vmRSS(p.cmd.Process.Pid)), heap: scrape(p.URL, "go_memstats_heap_inuse_bytes"),
			stacks: scrape(p.URL, "go_memstats_stack_inuse_bytes"), goroutines: scrape(p.URL, "go_goroutines")}
	}
	var all, watches []net.Conn
	defer func() { closeAll(all) }()
	var rows []idleCostRow
	prev := sample()
	phases := []struct {
		what  string
		url   string
		block int
		watch bool
	}{
		{"plain watch", p.URL, 20, true},
		{"TLS watch", secureURL, 30, true},
		{"plain idle connection", p.URL, 40, false},
		{"TLS idle connection", secureURL, 50, false},
	}
	for _, ph := range phases {
		var conf *tls.Config
		if strings.HasPrefix(ph.url, "https://") {
			conf = tlsConf
		}
		dial := dialer(ph.url, conf)
		addr := func(i int) net.IP { return loopback(ph.block+i/10000, i%10000) }
		if ph.watch {
			open, codes, errs := openWatchesAt(dial, n, addr, watchPath)
			all, watches = append(all, open...), append(watches, open...)
			if codes[200] != n {
				t.Fatalf("%d %ss: codes %v (first error %q), want all 200", n, ph.what, codes, first(errs))
			}
			want := float64(len(all))
			deadline := time.Now().Add(30 * time.Second)
			for scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`) < want {
				if time.Now().After(deadline) {
					t.Fatalf("lazyapi_ratelimit_inflight{kind=\"watch\"} = %v, want %v", scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`), want)
				}
				time.Sleep(100 * time.Millisecond)
			}
		} else {
			open, err := openIdleConns(dial, n, addr, coll+"/cm-00000")
			all = append(all, open...)
			if err != nil {
				t.Fatalf("%d %ss: %v", n, ph.what, err)
			}
		}
		cur := sample()
		if dir := os.Getenv("LAZYAPI_IDLE_COST_PROFILE"); dir != "" {
			saveProfile(t, p.URL+"/debug/pprof/heap", filepath.Join(dir, fmt.Sprintf("heap-%d-%s.pb.gz", p.cmd.Process.Pid, strings.ReplaceAll(ph.what, " ", "-"))))
		}
		rows = append(rows, idleCostRow{what: ph.what, rss: (cur.rss - prev.rss) / float64(n) / 1024,
			heapStacks: (cur.heap + cur.stacks - prev.heap - prev.stacks) / float64(n) / 1024,
			stacks:     (cur.stacks - prev.stacks) / float64(n) / 1024,
			gorPC:      (cur.goroutines - prev.goroutines) / float64(n)})
		prev = cur
	}
	// A client that goes away ends its watch although the watch writes
	// nothing: the hang-up is noticed (conn.Hangups' epoll, issue 26)
	// and the watch's seat given back.
	closeAll(watches)
	deadline := time.Now().Add(30 * time.Second)
	for scrape(p.URL, "lazyapi_watchers_open") != 0 || scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the clients of %d idle watches closed their connections: lazyapi_watchers_open = %v, inflight watches %v; want 0",
				len(watches), scrape(p.URL, "lazyapi_watchers_open"), scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return rows
}

// saveProfile writes the profile at url to file.
func saveProfile(t *testing.T, url, file string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("profile %s: %v", url, err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Logf("profile %s: %v", url, err)
	}
}

// openWatchesAt is openWatches with a path per watch (32 opened at once).
func openWatchesAt(dial func(net.IP) (net.Conn, error), n int, addr func(int) net.IP, path func(int) string) ([]net.Conn, map[int]int, []string) {
	var open []net.Conn
	codes := map[int]int{}
	var errs []string
	type res struct {
		w   idleWatch
		err error
	}
	next, out := make(chan int), make(chan res)
	for range 32 {
		go func() {
			for i := range next {
				w, err := openWatch(dial, addr(i), path(i))
				out <- res{w, err}
			}
		}()
	}
	go func() {
		for i := range n {
			next <- i
		}
		close(next)
	}()
	for range n {
		r := <-out
		switch {
		case r.err != nil:
			codes[0]++
			errs = append(errs, r.err.Error())
		default:
			codes[r.w.code]++
			if r.w.conn != nil {
				open = append(open, r.w.conn)
			}
		}
	}
	return open, codes, errs
}

// openIdleConns opens n connections, each from addr(i), GETs path on each
// (keep-alive) and leaves it open and idle.
func openIdleConns(dial func(net.IP) (net.Conn, error), n int, addr func(int) net.IP, path string) ([]net.Conn, error) {
	type res struct {
		c   net.Conn
		err error
	}
	next, out := make(chan int), make(chan res)
	for range 32 {
		go func() {
			for i := range next {
				c, err := idleConn(dial, addr(i), path)
				out <- res{c, err}
			}
		}()
	}
	go func() {
		for i := range n {
			next <- i
		}
		close(next)
	}()
	var open []net.Conn
	var firstErr error
	for range n {
		r := <-out
		if r.err != nil && firstErr == nil {
			firstErr = r.err
		}
		if r.c != nil {
			open = append(open, r.c)
		}
	}
	return open, firstErr
}

// idleConn dials from local, GETs path and reads the whole response; the
// connection stays open (keep-alive) and idle.
func idleConn(dial func(net.IP) (net.Conn, error), local net.IP, path string) (net.Conn, error) {
	c, err := dial(local)
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	if err != nil || resp.Close {
		c.Close()
		if err == nil {
			err = fmt.Errorf("GET %s: the server closed the connection", path)
		}
		return nil, err
	}
	_ = c.SetReadDeadline(time.Time{})
	return c, nil
}

// medianRows is the median of each phase's figures over rounds.
func medianRows(rounds [][]idleCostRow) []idleCostRow {
	if len(rounds) == 0 {
		return nil
	}
	med := func(f func(idleCostRow) float64, i int) float64 {
		var v []float64
		for _, r := range rounds {
			v = append(v, f(r[i]))
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	out := make([]idleCostRow, len(rounds[0]))
	for i := range out {
		out[i] = idleCostRow{what: rounds[0][i].what,
			rss:        med(func(r idleCostRow) float64 { return r.rss }, i),
			heapStacks: med(func(r idleCostRow) float64 { return r.heapStacks }, i),
			stacks:     med(func(r idleCostRow) float64 { return r.stacks }, i),
			gorPC:      med(func(r idleCostRow) float64 { return r.gorPC }, i)}
	}
	return out
}
