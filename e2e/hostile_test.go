//go:build !race

// The hostile suite asserts the peak RSS of the plain lazyapi binary and
// another client's latency: .ci/run runs it without the race detector,
// after the race run, so that its race-instrumented client and the other
// packages' race tests do not take the 2 cores from the server it measures
// (in one -race CI run, beside proxy's tests, the 400-connection case
// peaked at 557 MiB against its 512 MiB limit).

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// The hostile-client suite (issue 10): the real binary with
// --memory-limit=512Mi on a real etcd holding a 35 MiB ConfigMap collection
// (40 × 900 KiB, cached) and a 35 MiB Secret collection (not cached:
// --watch-cache-sizes=secrets#0, so its LISTs read etcd), attacked by
// one client while another (its own remote address, 127.0.0.2) GETs one
// object and LISTs a small collection. Each attack, without the bounds,
// takes far more than the limit: 50 watches with initial events of 35 MiB
// are 1.75 GB in flight, 400 stalled LISTs of 35 MiB ten times that.
// Every case checks that the other client's requests all succeed, that
// the process's peak RSS (VmHWM from /proc) stays below --memory-limit,
// and that after the attackers leave the limiter's seats and reserved
// bytes return to zero.
//
// LAZYAPI_HOSTILE_BIN=path runs the suite against another build (the
// "before" figures in bench/RESULTS.md): flags that build lacks are left
// out and nothing is asserted, only reported.

const (
	hostileLimit   = 512 << 20
	hostileItems   = 40
	hostileItemLen = 900 << 10
)

type hostileEnv struct {
	etcd     *etcdtest.Server
	baseline bool
	bin      string
}

func newHostileEnv(t *testing.T) *hostileEnv {
	t.Helper()
	return newHostileEnvItems(t, hostileItems)
}

// newHostileEnvItems is newHostileEnv with items ConfigMaps of 900 KiB in
// namespace big (the Secrets stay at hostileItems).
func newHostileEnvItems(t *testing.T, items int) *hostileEnv {
	t.Helper()
	if testing.Short() {
		t.Skip("hostile-client suite: writes 70 MiB and runs the attacks")
	}
	h := &hostileEnv{etcd: etcdtest.Start(t), bin: plainBin}
	if b := os.Getenv("LAZYAPI_HOSTILE_BIN"); b != "" {
		h.bin, h.baseline = b, true
	}
	payload := strings.Repeat("x", hostileItemLen)
	cli := h.etcd.Client
	for _, kind := range []string{"configmaps", "secrets"} {
		n := hostileItems
		if kind == "configmaps" {
			n = items
		}
		for i := range n {
			name := fmt.Sprintf("big-%03d", i)
			var obj runtime.Object
			if kind == "configmaps" {
				obj = &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
					ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: name, UID: types.UID("u-cm" + name)}, Data: map[string]string{"payload": payload}}
			} else {
				obj = &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
					ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: name, UID: types.UID("u-s" + name)}, Data: map[string][]byte{"payload": []byte(payload)}}
			}
			val, err := storagefmt.Protobuf(obj)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Put(context.Background(), storagefmt.Key("/registry", kind, "big", name), string(val)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var ops []clientv3.Op
	for i := range 10 {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "probe", Name: fmt.Sprintf("p-%d", i), UID: "u-p"}, Data: map[string]string{"k": "v"}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(storagefmt.Key("/registry", "configmaps", "probe", cm.Name), string(val)))
	}
	if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	return h
}

// start runs lazyapi on the env's etcd with the suite's limits.
func (h *hostileEnv) start(t *testing.T, extra ...string) *process {
	t.Helper()
	args := []string{"--etcd-servers=" + h.etcd.Endpoint, "--memory-limit=512Mi", "--watch-cache-sizes=secrets#0",
		"--request-timeout=20s", "--max-queue-wait=5s"}
	if !h.baseline {
		args = append(args, "--write-timeout=2s")
	}
	return startBin(t, h.bin, append(args, extra...)...)
}

// peakRSS returns the process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, p *process) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// waitDrained waits until the limiter holds no seat and no byte.
func (h *hostileEnv) waitDrained(t *testing.T, p *process) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var held []string
		for _, m := range []string{`lazyapi_ratelimit_inflight{kind="short"}`, `lazyapi_ratelimit_inflight{kind="bulk"}`,
			`lazyapi_ratelimit_inflight{kind="watch"}`, `lazyapi_ratelimit_reserved_bytes`, `lazyapi_ratelimit_queued`} {
			if v := scrape(p.URL, m); v != 0 {
				held = append(held, fmt.Sprintf("%s=%v", m, v))
			}
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.failf(t, "after the attack the limiter still holds %s", strings.Join(held, " "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *hostileEnv) failf(t *testing.T, format string, args ...any) {
	t.Helper()
	if h.baseline {
		t.Logf("baseline: "+format, args...)
		return
	}
	t.Errorf(format, args...)
}

// probe is the other client: from 127.0.0.2 it GETs one object and LISTs
// ten small ones in turn until stop, recording codes and latencies.
type probe struct {
	mu    sync.Mutex
	lat   []time.Duration
	codes map[int]int
	errs  []string
	stop  chan struct{}
	done  chan struct{}
}

func startProbe(url string) *probe {
	pr := &probe{codes: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	go func() {
		defer close(pr.done)
		paths := []string{"/api/v1/namespaces/probe/configmaps/p-1", "/api/v1/namespaces/probe/configmaps"}
		for i := 0; ; i++ {
			select {
			case <-pr.stop:
				return
			default:
			}
			start := time.Now()
			resp, err := hc.Get(url + paths[i%2])
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			el := time.Since(start)
			pr.mu.Lock()
			if err != nil {
				pr.errs = append(pr.errs, err.Error())
			} else {
				pr.codes[resp.StatusCode]++
				pr.lat = append(pr.lat, el)
			}
			pr.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // pacing: ~50 requests/s, not synchronisation
		}
	}()
	return pr
}

// finish stops the probe and checks that every request succeeded.
func (pr *probe) finish(t *testing.T, h *hostileEnv, name string) (p99 time.Duration, n int) {
	t.Helper()
	close(pr.stop)
	<-pr.done
	pr.mu.Lock()
	defer pr.mu.Unlock()
	slices.Sort(pr.lat)
	if len(pr.lat) > 0 {
		p99 = pr.lat[min(len(pr.lat)-1, len(pr.lat)*99/100)]
	}
	if len(pr.errs) > 0 || len(pr.codes) != 1 || pr.codes[200] == 0 {
		h.failf(t, "%s: the other client's GETs and small LISTs: codes %v, errors %d (first: %v), want all 200", name, pr.codes, len(pr.errs), first(pr.errs))
	}
	return p99, len(pr.lat)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

const watchListQuery = "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"

// target is a server the storm connects to: lazyapi (plain HTTP) or
// kube-apiserver (HTTPS, bearer token).
type target struct {
	url   string
	hc    *http.Client
	token string
	// timeout bounds the storm (and each watch's timeoutSeconds); 0: 2 minutes.
	timeout time.Duration
}

// watchSynced opens a protobuf watch with initial events and reads it
// until the initial-events-end bookmark; it returns the HTTP status.
func watchSynced(ctx context.Context, tg target) (int, error) {
	secs := 60
	if tg.timeout > 0 {
		secs = int(tg.timeout / time.Second)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", tg.url+"/api/v1/namespaces/big/configmaps"+watchListQuery+"&timeoutSeconds="+strconv.Itoa(secs), nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	if tg.token != "" {
		req.Header.Set("Authorization", "Bearer "+tg.token)
	}
	hc := tg.hc
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var hdr [4]byte
	buf := make([]byte, 0, 1<<20)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return 200, fmt.Errorf("stream ended before initial-events-end: %w", err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if cap(buf) < int(n) {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return 200, err
		}
		if bytes.Contains(buf, []byte("k8s.io/initial-events-end")) {
			return 200, nil
		}
	}
}

// storm runs n watches with initial events at once, each retried after a
// 429 or 503, and returns the count of responses per status (0: a broken
// stream) and the time until all were synced.
func storm(tg target, n int) (map[int]int, time.Duration) {
	codes, _, took := stormErrs(tg, n)
	return codes, took
}

// stormErrs is storm that also returns how many broken streams ended with
// each error (the reason a storm failed, in its failure message).
func stormErrs(tg target, n int) (map[int]int, map[string]int, time.Duration) {
	codes := map[int]int{}
	errs := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	timeout := 2 * time.Minute
	if tg.timeout > 0 {
		timeout = tg.timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As client-go: a 429 or 503 is retried after its
			// Retry-After (1 s from both servers here).
			for {
				code, err := watchSynced(ctx, tg)
				mu.Lock()
				if err != nil {
					code = 0
					errs[err.Error()]++
				}
				codes[code]++
				mu.Unlock()
				if (code != 429 && code != 503) || ctx.Err() != nil {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			}
		}()
	}
	wg.Wait()
	return codes, errs, time.Since(start)
}

// stalled opens n connections that send path and never read (4 KiB
// receive buffer); closeAll closes them. A path with a %d verb is
// formatted with the connection's index modulo hostileItems and sent
// pipelined times on its connection (the kernel's socket buffers take a
// few MiB of responses before the server's writes block).
func stalled(t *testing.T, url, path, accept string, n, pipelined int) (closeAll func()) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	var conns []net.Conn
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		p := path
		if strings.Contains(p, "%") {
			p = fmt.Sprintf(p, i%hostileItems)
		}
		for range max(pipelined, 1) {
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept: %s\r\n\r\n", p, accept)
		}
		conns = append(conns, c)
	}
	return func() {
		for _, c := range conns {
			c.Close()
		}
	}
}

// slowReaders read LISTs of path at about bps bytes per second each until
// stop; they return how many bytes they read in all.
func slowReaders(url, path string, n, bps int, stop <-chan struct{}) (wait func() int64) {
	var total atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", url+path, nil)
			req.Header.Set("Accept", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, bps/10)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				m, err := resp.Body.Read(buf)
				total.Add(int64(m))
				if err != nil {
					return
				}
			}
		}()
	}
	return func() int64 { wg.Wait(); return total.Load() }
}

// report logs one case's figures in one line (bench/RESULTS.md quotes them).
func report(t *testing.T, name string, p *process, extra string) int64 {
	t.Helper()
	rss := peakRSS(t, p)
	t.Logf("hostile %s: peak RSS %d MiB (limit %d MiB); %s", name, rss>>20, hostileLimit>>20, extra)
	return rss
}

func (h *hostileEnv) checkRSS(t *testing.T, name string, rss int64) {
	t.Helper()
	if rss >= hostileLimit {
		h.failf(t, "%s: peak RSS %d MiB, want below --memory-limit %d MiB", name, rss>>20, hostileLimit>>20)
	}
}

// waitCached waits until the ConfigMap cache is filled (a warm lazyapi).
func waitCached(t *testing.T, p *process) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	// A LIST at resourceVersion=0 starts the fill where it is lazy (a
	// build without --watch-cache-preload).
	if resp, err := http.Get(p.URL + "/api/v1/namespaces/probe/configmaps?resourceVersion=0"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for scrape(p.URL, `lazyapi_cache_state{resource="configmaps"}`) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("configmaps not cached within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestHostileReconnectStorm(t *testing.T) {
	h := newHostileEnv(t)
	for _, warm := range []bool{false, true} {
		name := "cold"
		if warm {
			name = "warm"
		}
		t.Run(name, func(t *testing.T) {
			p := h.start(t)
			if warm {
				waitCached(t, p)
			}
			before := snapMetrics(p.URL)
			pr := startProbe(p.URL)
			stormN := 50
			if v, err := strconv.Atoi(os.Getenv("LAZYAPI_HOSTILE_STORM_N")); err == nil && v > 0 {
				stormN = v // a longer storm for the latency figures of bench/RESULTS.md
			}
			codes, errs, took := stormErrs(target{url: p.URL}, stormN)
			p99, n := pr.finish(t, h, "storm "+name)
			t.Logf("hostile storm %s breakdown: %s", name, breakdown(before, snapMetrics(p.URL), p.cmd.Process.Pid))
			rss := report(t, fmt.Sprintf("reconnect storm %s N=%d", name, stormN), p,
				fmt.Sprintf("codes %v, all synced after %s; other client: %d requests, p99 %s", codes, took.Round(time.Millisecond), n, p99.Round(time.Millisecond)))
			h.checkRSS(t, name, rss)
			if codes[200] == 0 || codes[0] > 0 {
				h.failf(t, "storm %s: codes %v, broken streams' errors %v: want 200s (429s retried by clients) and no broken streams\nlazyapi's warnings and errors:\n%s",
					name, codes, errs, tail(grepLog(p.stderr.String()), 16<<10))
			}
			h.waitDrained(t, p)
		})
	}
}

// TestHostileStormNotCached is the reconnect storm on a collection that
// does not fit the watch cache: 160 ConfigMaps of 900 KiB (141 MiB) against
// the 128 MiB budget --memory-limit=512Mi leaves it. The cache's fill is
// refused and every watch reads its initial list from etcd, under
// admission. The fill itself must stay bounded too: it used to replay the
// collection's history (all of it written within the last 10,000
// revisions) as one etcd watch response, held twice by the etcd client,
// on every retry of the refused fill (bench/RESULTS.md, ## storm: why the
// 400-Secret storm went over --memory-limit).
func TestHostileStormNotCached(t *testing.T) {
	const items = 160
	h := newHostileEnvItems(t, items)
	p := h.start(t)
	// The fill is refused (once, at least) before the storm: its replay
	// and the storm's reads from etcd are what must fit the limit.
	deadline := time.Now().Add(90 * time.Second)
	for scrape(p.URL, `lazyapi_cache_not_cached_total{resource="configmaps",reason="too_large"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("configmaps (%d MiB) not refused by the watch cache within 90s", items*hostileItemLen>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("hostile storm not cached: peak RSS %d MiB before the storm (the refused fill)", peakRSS(t, p)>>20)
	pr := startProbe(p.URL)
	codes, errs, took := stormErrs(target{url: p.URL, timeout: 3 * time.Minute}, 16)
	p99, n := pr.finish(t, h, "storm not cached")
	rss := report(t, fmt.Sprintf("reconnect storm on %d MiB not cached N=16", items*hostileItemLen>>20), p,
		fmt.Sprintf("codes %v, all synced after %s; fills refused %v (by estimate, before reading values: %v); other client: %d requests, p99 %s", codes, took.Round(time.Millisecond),
			scrape(p.URL, `lazyapi_cache_not_cached_total{resource="configmaps",reason="too_large"}`),
			scrape(p.URL, `lazyapi_cache_refused_estimated_total{resource="configmaps"}`), n, p99.Round(time.Millisecond)))
	h.checkRSS(t, "storm not cached", rss)
	if codes[200] != 16 || codes[0] > 0 {
		h.failf(t, "storm not cached: codes %v, broken streams' errors %v: want 16 synced (429s retried by clients)\nlazyapi's warnings and errors:\n%s",
			codes, errs, tail(grepLog(p.stderr.String()), 16<<10))
	}
	h.waitDrained(t, p)
}

func TestHostileStalledReaders(t *testing.T) {
	h := newHostileEnv(t)
	p := h.start(t)
	waitCached(t, p)
	// The other client alone: the same run's baseline of its latency.
	before := snapMetrics(p.URL)
	pr := startProbe(p.URL)
	time.Sleep(4 * time.Second) // the baseline's duration, not synchronisation
	p99, n := pr.finish(t, h, "no attack")
	t.Logf("hostile no attack: other client: %d requests, p99 %s; breakdown: %s", n, p99.Round(time.Millisecond), breakdown(before, snapMetrics(p.URL), p.cmd.Process.Pid))
	for _, tc := range []struct {
		name, path, accept string
		n, pipelined       int
	}{
		{"stalled LISTs from etcd", "/api/v1/namespaces/big/secrets", "application/json", 50, 1},
		{"stalled LISTs from cache", "/api/v1/namespaces/big/configmaps?resourceVersion=0", "application/json", 50, 1},
		{"400 connections of one client", "/api/v1/namespaces/big/configmaps", "application/vnd.kubernetes.protobuf", 400, 1},
		{"watch storm that never reads", "/api/v1/namespaces/big/configmaps" + watchListQuery, "application/vnd.kubernetes.protobuf;stream=watch", 200, 1},
		// GETs of 900 KiB Secrets (1.2 MB of JSON each), from etcd, six
		// pipelined per connection.
		{"stalled GETs of large objects", "/api/v1/namespaces/big/secrets/big-%03d", "application/json", 400, 6},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if h.baseline && strings.HasPrefix(tc.name, "watch storm") {
				// Unbounded before the fix (issue 10: 3.1 GB for 100
				// such watches): keep the machine's share.
				tc.n = 50
			}
			before := snapMetrics(p.URL)
			pr := startProbe(p.URL)
			closeAll := stalled(t, p.URL, tc.path, tc.accept, tc.n, tc.pipelined)
			// Hold the attack for longer than --write-timeout and the
			// queue wait: the stalled streams must be ended meanwhile.
			time.Sleep(8 * time.Second) // the attack's duration, not synchronisation
			p99, n := pr.finish(t, h, tc.name)
			t.Logf("hostile %s breakdown: %s", tc.name, breakdown(before, snapMetrics(p.URL), p.cmd.Process.Pid))
			aborted := scrape(p.URL, `lazyapi_streams_aborted_total{reason="write_stalled"}`)
			rss := report(t, tc.name, p, fmt.Sprintf("n=%d; streams aborted so far %v; other client: %d requests, p99 %s", tc.n, aborted, n, p99.Round(time.Millisecond)))
			h.checkRSS(t, tc.name, rss)
			closeAll()
			h.waitDrained(t, p)
		})
	}
	t.Run("slow_readers_1KBps", func(t *testing.T) {
		pr := startProbe(p.URL)
		stop := make(chan struct{})
		wait := slowReaders(p.URL, "/api/v1/namespaces/big/secrets", 4, 1024, stop)
		time.Sleep(8 * time.Second) // the attack's duration
		close(stop)
		read := wait()
		p99, n := pr.finish(t, h, "slow readers")
		rss := report(t, "slow readers at 1 KB/s", p, fmt.Sprintf("4 readers read %d KiB; other client: %d requests, p99 %s", read>>10, n, p99.Round(time.Millisecond)))
		h.checkRSS(t, "slow readers", rss)
		h.waitDrained(t, p)
	})
}

// TestHostileStormBench is the reconnect storm of bench/RESULTS.md
// (## hostile clients), run with LAZYAPI_HOSTILE_BENCH=1 (or a list of N,
// e.g. LAZYAPI_HOSTILE_BENCH=50,200): N = 50, 200 and 1,000 watches with
// initial events (each until its initial-events-end bookmark) of the
// ConfigMaps in namespace big, arriving at a just-started lazyapi and, when
// bench/kube-apiserver.sh has built it, at a just-started kube-apiserver
// v1.37 on the same etcd. Figures: peak RSS, responses that were not 200,
// how many were synced and when.
//
// Other variables:
//
//	LAZYAPI_HOSTILE_BENCH_ITEMS=1165   ConfigMaps of 900 KiB (default 40: 35 MiB; 1165: 1 GiB)
//	LAZYAPI_HOSTILE_BENCH_PEERS=kube   lazyapi, kube or both (default)
//	LAZYAPI_HOSTILE_BENCH_TIMEOUT=5m   the storm's bound (default 2m): watches not synced by then count as 0
//	LAZYAPI_HOSTILE_BENCH_KILL_MIB=8192 kube-apiserver is killed above this RSS (default 3072) and reported so
func TestHostileStormBench(t *testing.T) {
	if os.Getenv("LAZYAPI_HOSTILE_BENCH") == "" {
		t.Skip("set LAZYAPI_HOSTILE_BENCH=1 to run the reconnect storm bench")
	}
	items := hostileItems
	if v, err := strconv.Atoi(os.Getenv("LAZYAPI_HOSTILE_BENCH_ITEMS")); err == nil && v > 0 {
		items = v
	}
	timeout := 2 * time.Minute
	if v, err := time.ParseDuration(os.Getenv("LAZYAPI_HOSTILE_BENCH_TIMEOUT")); err == nil && v > 0 {
		timeout = v
	}
	killAt := int64(3 << 30)
	if v, err := strconv.ParseInt(os.Getenv("LAZYAPI_HOSTILE_BENCH_KILL_MIB"), 10, 64); err == nil && v > 0 {
		killAt = v << 20
	}
	peers := os.Getenv("LAZYAPI_HOSTILE_BENCH_PEERS")
	if peers == "" {
		peers = "both"
	}
	seeded := time.Now()
	h := newHostileEnvItems(t, items)
	t.Logf("hostile bench: %d ConfigMaps of %d KiB (%d MiB) seeded in %s; storm bound %s", items, hostileItemLen>>10,
		int64(items)*hostileItemLen>>20, time.Since(seeded).Round(time.Second), timeout)
	var ns []int
	for f := range strings.SplitSeq(os.Getenv("LAZYAPI_HOSTILE_BENCH"), ",") {
		if n, err := strconv.Atoi(f); err == nil {
			ns = append(ns, n)
		}
	}
	if len(ns) == 0 {
		ns = []int{50, 200, 1000}
	}
	if peers != "kube" {
		for _, n := range ns {
			p := h.start(t)
			codes, took := storm(target{url: p.URL, timeout: timeout}, n)
			report(t, fmt.Sprintf("bench lazyapi storm N=%d items=%d", n, items), p,
				fmt.Sprintf("codes %v, %d of %d synced, ended after %s", codes, codes[200], n, took.Round(time.Millisecond)))
			if err := p.stop(30 * time.Second); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
	}
	if peers == "lazyapi" {
		return
	}
	script, err := filepath.Abs("../bench/kube-apiserver.sh")
	if err != nil {
		t.Fatal(err)
	}
	if exec.Command("bash", script, "path").Run() != nil {
		t.Log("kube-apiserver not built (bench/kube-apiserver.sh build): lazyapi only")
		return
	}
	for _, n := range ns {
		port := freePort(t)
		cmd := exec.Command("bash", script, "start", "--etcd-servers", h.etcd.Endpoint, "--port", strconv.Itoa(port),
			"--dir", t.TempDir(), "--token", "hostile")
		dieWithParent(cmd)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		tg := target{url: fmt.Sprintf("https://127.0.0.1:%d", port), token: "hostile", timeout: timeout,
			hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, MaxIdleConnsPerHost: 2000}}}
		// Watchdog: the machine is shared; above killAt the peer is killed.
		var killedAt atomic.Int64
		stop := make(chan struct{})
		watchdogDone := make(chan struct{})
		go func() {
			defer close(watchdogDone)
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if rss := vmRSS(cmd.Process.Pid); rss > killAt {
					killedAt.Store(int64(time.Since(started)))
					cmd.Process.Kill()
					return
				}
			}
		}()
		// Just started: the storm begins as soon as it answers /readyz.
		deadline := time.Now().Add(5 * time.Minute)
		ready := false
		for killedAt.Load() == 0 {
			req, _ := http.NewRequest("GET", tg.url+"/readyz", nil)
			req.Header.Set("Authorization", "Bearer hostile")
			if resp, err := tg.hc.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ready = true
					break
				}
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		var codes map[int]int
		var took time.Duration
		readyAfter := time.Since(started)
		if ready {
			codes, took = storm(tg, n)
		}
		hwm := vmHWM(cmd.Process.Pid)
		close(stop)
		<-watchdogDone
		cmd.Process.Kill()
		cmd.Wait()
		note := ""
		if k := killedAt.Load(); k > 0 {
			note = fmt.Sprintf(" (> %d MiB: killed at %s after its start)", killAt>>20, time.Duration(k).Round(100*time.Millisecond))
		}
		if !ready && note == "" {
			t.Errorf("kube-apiserver not ready within 5 minutes")
		}
		t.Logf("hostile bench kube-apiserver storm N=%d items=%d: peak RSS %d MiB%s; ready after %s; codes %v, %d of %d synced, ended after %s",
			n, items, hwm>>20, note, readyAfter.Round(100*time.Millisecond), codes, codes[200], n, took.Round(time.Millisecond))
	}
}

// vmHWM and vmRSS read /proc/<pid>/status (bytes; 0 when unreadable).
func vmHWM(pid int) int64 { return procStatus(pid, "VmHWM:") }
func vmRSS(pid int) int64 { return procStatus(pid, "VmRSS:") }

// tail returns the last n bytes of s (a log in a failure message).
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// grepLog returns the warnings and errors of a lazyapi log.
func grepLog(s string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			b.WriteString(l)
			b.WriteString("\n")
		}
	}
	return b.String()
}
