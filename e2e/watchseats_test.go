//go:build !race

// The watch-seat tests assert the plain binary's RSS (see hostile_test.go
// for why they run without the race detector).

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// loopback returns the i-th distinct loopback address of a block: 127.b.x.y
// with x.y from i (y in 1..250), so that each watch is its own client
// (lazyapi's fairness key without authentication is the remote IP).
func loopback(b, i int) net.IP {
	return net.IPv4(127, byte(b), byte(1+i/250), byte(1+i%250))
}

// startDefault runs lazyapi (LAZYAPI_HOSTILE_BIN's build when set) on the
// env's etcd with default flags and extra.
func (h *hostileEnv) startDefault(t *testing.T, extra ...string) *process {
	t.Helper()
	old := lazyapiBin
	lazyapiBin = h.bin
	defer func() { lazyapiBin = old }()
	return start(t, append([]string{"--etcd-servers=" + h.etcd.Endpoint}, extra...)...)
}

// idleWatch is one open watch read only up to its response header.
type idleWatch struct {
	conn net.Conn
	code int
}

// dialer dials url (http:// or https:// with tlsConf) from a local address
// (nil: the default).
func dialer(url string, tlsConf *tls.Config) func(local net.IP) (net.Conn, error) {
	host := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	return func(local net.IP) (net.Conn, error) {
		d := &net.Dialer{Timeout: 10 * time.Second}
		if local != nil {
			d.LocalAddr = &net.TCPAddr{IP: local}
		}
		if strings.HasPrefix(url, "https://") {
			return tls.DialWithDialer(d, "tcp", host, tlsConf)
		}
		return d.Dial("tcp", host)
	}
}

// openWatch dials with dial from local, sends a GET of path with header
// lines extra, and reads the response's status line and headers (not its
// body: the watch stays open and, with no events, idle).
func openWatch(dial func(net.IP) (net.Conn, error), local net.IP, path string, extra ...string) (idleWatch, error) {
	c, err := dial(local)
	if err != nil {
		return idleWatch{}, err
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
	for _, h := range extra {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return idleWatch{}, err
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 512)
	line, err := br.ReadString('\n')
	if err != nil {
		c.Close()
		return idleWatch{}, fmt.Errorf("cannot read the status line: %w", err)
	}
	f := strings.Fields(line)
	code := 0
	if len(f) >= 2 {
		code, _ = strconv.Atoi(f[1])
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			c.Close()
			return idleWatch{}, fmt.Errorf("cannot read the headers: %w", err)
		}
		if l == "\r\n" {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	if code != 200 {
		c.Close()
		return idleWatch{code: code}, nil
	}
	return idleWatch{conn: c, code: code}, nil
}

// openWatches opens n idle watches of path in parallel, watch i from
// addr(i) with header lines extra(i) (nil: none); it returns the open ones
// and the count per status (0: a dial or read error, first in errs).
func openWatches(dial func(net.IP) (net.Conn, error), n int, addr func(i int) net.IP, path string, extra func(i int) []string) (open []net.Conn, codes map[int]int, errs []string) {
	codes = map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				var h []string
				if extra != nil {
					h = extra(i)
				}
				w, err := openWatch(dial, addr(i), path, h...)
				mu.Lock()
				if err != nil {
					codes[0]++
					errs = append(errs, err.Error())
				} else {
					codes[w.code]++
					if w.conn != nil {
						open = append(open, w.conn)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return open, codes, errs
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.Close()
	}
}

// collectionRV returns the resourceVersion of a LIST of path.
func collectionRV(t *testing.T, url, path string) string {
	t.Helper()
	resp, err := http.Get(url + path + "?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	const k = `"resourceVersion":"`
	i := strings.Index(string(b), k)
	if resp.StatusCode != 200 || i < 0 {
		t.Fatalf("LIST %s: %d %s", path, resp.StatusCode, b)
	}
	rest := string(b[i+len(k):])
	return rest[:strings.IndexByte(rest, '"')]
}

// TestIdleWatchesDefaultFlags is issue 29's capacity case: with default
// flags (no --memory-limit: the budgets derive from 1 GiB), 10,000 idle
// watches from 10,000 distinct clients on a namespace of 40 ConfigMaps of
// 900 KiB are all admitted, RSS stays within the 1 GiB the defaults
// assume, and a new client's WatchList is served meanwhile. Each watch
// used to reserve a write buffer plus 3 × the average object (2.8 MB
// here): the 256 MiB in-flight budget held 94 of them, and
// --max-watches-inflight 1,000. It logs the RSS per idle watch, the figure
// in docs/operating.md's Capacity section (LAZYAPI_IDLE_WATCHES=n sets the count).
func TestIdleWatchesDefaultFlags(t *testing.T) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("LAZYAPI_IDLE_WATCHES")); err == nil && v > 0 {
		n = v
	}
	h := newHostileEnv(t)
	// Default flags; LAZYAPI_IDLE_FLAGS adds some (space separated), to
	// measure another configuration.
	p := h.startDefault(t, append([]string{"--profiling"}, strings.Fields(os.Getenv("LAZYAPI_IDLE_FLAGS"))...)...)
	waitCached(t, p)
	const coll = "/api/v1/namespaces/big/configmaps"
	rv := collectionRV(t, p.URL, coll)
	path := coll + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=" + rv
	pid := p.cmd.Process.Pid
	rss0 := vmRSS(pid)
	gc(http.DefaultClient, p.URL)
	heap0, stacks0 := scrape(p.URL, "go_memstats_heap_inuse_bytes"), scrape(p.URL, "go_memstats_stack_inuse_bytes")
	start := time.Now()
	open, codes, errs := openWatches(dialer(p.URL, nil), n, func(i int) net.IP { return loopback(10+i/10000, i%10000) }, path, nil)
	defer closeAll(open)
	took := time.Since(start)
	if codes[200] != n {
		t.Fatalf("%d idle watches from distinct clients: codes %v (first error %q), want all 200", n, codes, first(errs))
	}
	// The watches are open: wait for the server's gauge to count them all.
	deadline := time.Now().Add(30 * time.Second)
	for scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`) < float64(n) {
		if time.Now().After(deadline) {
			t.Fatalf("lazyapi_ratelimit_inflight{kind=\"watch\"} = %v, want %d", scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rss1 := vmRSS(pid)
	gc(http.DefaultClient, p.URL)
	reserved := scrape(p.URL, "lazyapi_ratelimit_reserved_bytes")
	heap := scrape(p.URL, "go_memstats_heap_inuse_bytes")
	stacks := scrape(p.URL, "go_memstats_stack_inuse_bytes")
	gor := scrape(p.URL, "go_goroutines")
	// A new client's WatchList of the 35 MiB collection is served.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, err := watchSynced(ctx, target{url: p.URL, hc: loopbackClient(net.IPv4(127, 0, 0, 9)), timeout: 20 * time.Second})
	if code != 200 || err != nil {
		t.Errorf("a new client's WatchList beside %d idle watches: %d, %v; want 200 and its initial-events-end bookmark", n, code, err)
	}
	peak := peakRSS(t, p)
	t.Logf("idle watches: %d opened in %s; RSS %d -> %d MiB (%.1f KiB per watch), peak %d MiB; heap in use after a GC %.0f -> %.0f MiB, stacks %.0f -> %.0f MiB, %v goroutines; reserved %.0f bytes (%.1f KiB per watch)",
		n, took.Round(time.Millisecond), rss0>>20, rss1>>20, float64(rss1-rss0)/float64(n)/1024, peak>>20, heap0/(1<<20), heap/(1<<20), stacks0/(1<<20), stacks/(1<<20), gor, reserved, reserved/float64(n)/1024)
	if peak >= 1<<30 {
		t.Errorf("peak RSS %d MiB with %d idle watches, want below the 1 GiB the default budgets assume", peak>>20, n)
	}
	closeAll(open)
	h.waitDrained(t, p)
}

// loopbackClient is an HTTP client whose connections come from ip.
func loopbackClient(ip net.IP) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// idleWatchBytes is proxy's watchIdleBytes: what an idle watch reserves.
const idleWatchBytes = 25 << 10

// openWatchList opens a protobuf WatchList of the big ConfigMaps with hc
// and reads it to its initial-events-end bookmark; the stream stays open
// (close it with the returned body) as a reflector's does.
func openWatchList(ctx context.Context, url string, hc *http.Client, header func(*http.Request), secs int) (code int, body io.Closer, err error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/namespaces/big/configmaps"+watchListQuery+"&timeoutSeconds="+strconv.Itoa(secs), nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	if header != nil {
		header(req)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil, nil
	}
	if err := readToBookmark(resp.Body); err != nil {
		resp.Body.Close()
		return 200, nil, err
	}
	return 200, resp.Body, nil
}

// readToBookmark reads protobuf watch frames up to the
// initial-events-end bookmark.
func readToBookmark(r io.Reader) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var hdr [4]byte
	buf := make([]byte, 0, 1<<20)
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return fmt.Errorf("stream ended before initial-events-end: %w", err)
		}
		n := int(hdr[0])<<24 | int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return err
		}
		if strings.Contains(string(buf), "k8s.io/initial-events-end") {
			return nil
		}
	}
}

// TestWatchListsStayOpen is issue 29's test: with default flags, 120
// distinct clients (one loopback address each) each open a WatchList of 40
// ConfigMaps of 900 KiB (35 MiB) and keep it open after its
// initial-events-end bookmark, as a reflector does. All 120 get 200 and
// sync; once their initial events are written the limiter holds at most
// 120 × what an idle watch holds (the initial phase's reservation is
// given back at the bookmark), and a new client's WatchList is answered
// 200 within 1 s. Each watch used to keep a write buffer plus 3 × the
// average object (2.8 MB) reserved for its life: 94 of the 120 got 200,
// the budget stayed full and a new WatchList got 429 after 2 s.
func TestWatchListsStayOpen(t *testing.T) {
	const clients = 120
	h := newHostileEnv(t)
	p := h.startDefault(t)
	waitCached(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var (
		mu     sync.Mutex
		codes  = map[int]int{}
		errs   []string
		bodies []io.Closer
		wg     sync.WaitGroup
	)
	defer func() {
		for _, b := range bodies {
			b.Close()
		}
	}()
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body, err := openWatchList(ctx, p.URL, loopbackClient(net.IPv4(127, 0, 1, byte(1+i))), nil, 90)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				code = 0
				errs = append(errs, err.Error())
			}
			codes[code]++
			if body != nil {
				bodies = append(bodies, body)
			}
		}()
	}
	wg.Wait()
	synced := time.Since(start)
	if codes[200] != clients || len(bodies) != clients {
		t.Fatalf("%d WatchLists from distinct clients: codes %v (0: broken, first error %q), want all 200 and synced", clients, codes, first(errs))
	}
	// The initial phases are over: the reservations shrink to the idle
	// watches' (polled: a stream's last flush may still be under way).
	bound := float64(clients * idleWatchBytes)
	var reserved float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		reserved = scrape(p.URL, "lazyapi_ratelimit_reserved_bytes")
		if reserved >= 0 && reserved <= bound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after %d WatchLists synced, lazyapi_ratelimit_reserved_bytes = %.0f, want at most %.0f (%d idle watches)", clients, reserved, bound, clients)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if w := scrape(p.URL, `lazyapi_ratelimit_inflight{kind="watch"}`); w != clients {
		t.Errorf("lazyapi_ratelimit_inflight{kind=\"watch\"} = %v, want %d open watches", w, clients)
	}
	// A new client's WatchList is answered at once.
	req, _ := http.NewRequestWithContext(ctx, "GET", p.URL+"/api/v1/namespaces/big/configmaps"+watchListQuery+"&timeoutSeconds=30", nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	t0 := time.Now()
	resp, err := loopbackClient(net.IPv4(127, 0, 2, 1)).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answered := time.Since(t0)
	defer resp.Body.Close()
	if resp.StatusCode != 200 || answered > time.Second {
		t.Fatalf("a new client's WatchList beside %d open ones: %d after %s, want 200 within 1s", clients, resp.StatusCode, answered.Round(time.Millisecond))
	}
	if err := readToBookmark(resp.Body); err != nil {
		t.Fatalf("the new client's WatchList: %v", err)
	}
	t.Logf("%d WatchLists of 35 MiB synced in %s and held open; reserved %.0f bytes (%.1f KiB per watch); a new WatchList answered in %s, synced in %s; peak RSS %d MiB",
		clients, synced.Round(time.Millisecond), reserved, reserved/clients/1024, answered.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), peakRSS(t, p)>>20)
}

// TestWatchSharesManyIdentities is issue 23's fair-share case on the real
// binary with default flags, over TLS with bearer tokens and RBAC: one
// user holds 3,000 idle watches, then two others open 500 each at once,
// while a system:masters
// user's GET and watch succeed at once. The per-client cap used to be a
// fixed half of --max-watches-inflight (1,000): two identities took every
// watch seat and everyone else, an admin too, got 429. Peak RSS is
// sampled and bounded by the 1 GiB the default budgets assume.
func TestWatchSharesManyIdentities(t *testing.T) {
	h := newHostileEnv(t)
	servingCA, clientCA := testpki.NewCA(t, "serving-ca"), testpki.NewCA(t, "client-ca")
	serving := servingCA.Server(t)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("token-alpha,alpha,uid-a,readers\ntoken-beta,beta,uid-b,readers\n"+
		"token-gamma,gamma,uid-g,readers\ntoken-admin,admin,uid-m,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	putRBAC(t, h.etcd, discoveryRBAC()...)
	putRBAC(t, h.etcd, readerRBAC("big", group("readers"))...)
	port := freePort(t)
	old := lazyapiBin
	lazyapiBin = h.bin
	p := start(t, "--etcd-servers="+h.etcd.Endpoint, "--secure-port="+strconv.Itoa(port),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile,
		"--client-ca-file="+clientCA.File, "--token-auth-file="+tokens, "--profiling")
	lazyapiBin = old
	pem, err := os.ReadFile(servingCA.File)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	dial := dialer(url, tlsConf)
	// The admin reads /metrics (anonymous requests may not).
	hc := &http.Client{Transport: &bearer{token: "token-admin", rt: &http.Transport{TLSClientConfig: tlsConf}}}
	metric := func(name string) float64 { return scrapeWith(hc, url, name) }
	deadline := time.Now().Add(60 * time.Second)
	for metric(`lazyapi_cache_state{resource="configmaps"}`) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("configmaps not cached within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	const coll = "/api/v1/namespaces/big/configmaps"
	cur, err := h.etcd.Client.Get(context.Background(), "/registry/configmaps/big/big-000")
	if err != nil {
		t.Fatal(err)
	}
	path := coll + "?watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion=" + strconv.FormatInt(cur.Header.Revision, 10)
	base := vmRSS(p.cmd.Process.Pid)
	gc(hc, url)
	heap0, stacks0 := metric("go_memstats_heap_inuse_bytes"), metric("go_memstats_stack_inuse_bytes")

	type user struct {
		token string
		n     int
	}
	users := []user{{"token-alpha", 3000}, {"token-beta", 500}, {"token-gamma", 500}}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
		got   = map[string]map[int]int{}
		errs  []string
	)
	defer func() { closeAll(conns) }()
	start := time.Now()
	// alpha first (a node agent holding its watches), then beta and gamma
	// at once: alpha alone may take 7/8 of --max-watch-bytes, beta and
	// gamma then share what is left.
	for i, u := range users {
		if i == 1 {
			wg.Wait()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			open, codes, e := openWatches(dial, u.n, func(int) net.IP { return nil }, path,
				func(int) []string { return []string{"Authorization: Bearer " + u.token} })
			mu.Lock()
			defer mu.Unlock()
			conns = append(conns, open...)
			got[u.token] = codes
			errs = append(errs, e...)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, u := range users {
		if got[u.token][200] != u.n {
			t.Errorf("%s: %d watches: codes %v, want all 200 (first error %q)", u.token, u.n, got[u.token], first(errs))
		}
	}
	// The admin's GET and watch are answered at once.
	admin := func(path string) (int, time.Duration) {
		t0 := time.Now()
		w, err := openWatch(dial, nil, path, "Authorization: Bearer token-admin")
		if err != nil {
			t.Fatalf("admin GET %s: %v", path, err)
		}
		if w.conn != nil {
			w.conn.Close()
		}
		return w.code, time.Since(t0)
	}
	for _, q := range []string{coll + "/big-001", path, coll + watchListQuery + "&timeoutSeconds=10"} {
		if code, took := admin(q); code != 200 || took > 5*time.Second {
			t.Errorf("system:masters GET %s beside 4,000 watches: %d after %s, want 200 at once", q, code, took.Round(time.Millisecond))
		}
	}
	rss := vmRSS(p.cmd.Process.Pid)
	peak := peakRSS(t, p)
	gc(hc, url)
	heap, stacks := metric("go_memstats_heap_inuse_bytes"), metric("go_memstats_stack_inuse_bytes")
	t.Logf("watch shares: %v opened in %s; RSS %d -> %d MiB (%.1f KiB per TLS watch), peak %d MiB; heap in use + stacks after a GC %.1f KiB per watch; reserved %.0f bytes, %v watch clients",
		got, took.Round(time.Millisecond), base>>20, rss>>20, float64(rss-base)/4000/1024, peak>>20, (heap+stacks-heap0-stacks0)/4000/1024,
		metric("lazyapi_ratelimit_reserved_bytes"), metric("lazyapi_ratelimit_watch_clients"))
	if peak >= 1<<30 {
		t.Errorf("peak RSS %d MiB with 4,000 watches, want below the 1 GiB the default budgets assume", peak>>20)
	}
	closeAll(conns)
	conns = nil
	deadline = time.Now().Add(30 * time.Second)
	for metric(`lazyapi_ratelimit_inflight{kind="watch"}`) != 0 || metric("lazyapi_ratelimit_reserved_bytes") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after the watches closed the limiter holds %v watches, %v bytes", metric(`lazyapi_ratelimit_inflight{kind="watch"}`), metric("lazyapi_ratelimit_reserved_bytes"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gc makes lazyapi (run with --profiling) collect its garbage: a heap
// profile with gc=1, so that heap in use counts what is live.
func gc(hc *http.Client, url string) {
	if resp, err := hc.Get(url + "/debug/pprof/heap?gc=1"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// bearer adds a bearer token to requests.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
