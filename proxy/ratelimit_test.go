package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// TestListFloodAdmission is issue 6 at small scale: 300 ConfigMaps of
// 100 KiB (~30 MiB stored; 100, ~10 MiB, under the race detector), a
// proxy whose limiter has an 8 MiB byte budget,
// a queue of 4 and a 5 s queue wait, 16 clients each listing everything
// listFloodAttempts times at once, and one more client (its own remote IP,
// so its own fairness queue) GETting single objects until the listers stop.
// Every LIST must be a complete, parseable list of all 300 items or a 429
// TooManyRequests Status with Retry-After; nothing else (no 5xx, no cut
// body). At least one of each must happen, and every GET must be answered
// 200: a small request is not starved by the flood. The lists (above the
// bulk threshold, half a list) are bulk: at most 2 are served at once while
// the others queue, GETs are served while bulk lists are queued, and the
// bulk streams yield to the GETs. Counts and codes only, no timing
// assertions; but an admitted list must end within the 20 s request
// timeout, queue wait included, or it is cut (TestRequestTimeoutMidStream).
// Under the race detector a 30 MiB list took 6-14 s of that (against 1.4-7
// s without) on a loaded 2-core machine, and the client's own decoding of
// each 30 MiB answer shares the cores: the lists that crossed 20 s were
// cut, as they must be. Hence the smaller collection under -race.
func TestListFloodAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and lists ~30 MiB repeatedly")
	}
	const (
		itemBytes         = 100 << 10
		listers           = 16
		listFloodAttempts = 4
	)
	items := 300
	if raceEnabled {
		items = 100
	}
	cfg := ratelimit.DefaultConfig()
	cfg.BulkListBytes = int64(items * itemBytes / 2)
	cfg.MaxInflightBytes = 8 << 20
	cfg.MaxQueued = 4
	cfg.MaxQueueWait = 5 * time.Second
	cfg.MaxBulkInflight = 2
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	// The flood is of LISTs admitted one by one: identical concurrent
	// LISTs (these, with or without gzip) would share one read and one
	// admission (sharedlist.go, TestSharedList*), and none would be
	// refused.
	e.srv.DisableSharedLists()
	// etcd takes requests up to 2 MiB: 10 puts of 100 KiB per transaction.
	seedBig(t, e, "flood", items, itemBytes)
	const listPath = "/api/v1/namespaces/flood/configmaps"

	type outcome struct {
		code       int
		retryAfter string
		items      int
		err        error
	}
	// Each lister has its own connection (a Transport per client), as 16
	// separate processes would; all share 127.0.0.1, one fairness key.
	listOnce := func(hc *http.Client) outcome {
		req, err := http.NewRequest(http.MethodGet, e.url+listPath, nil)
		if err != nil {
			return outcome{err: err}
		}
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return outcome{err: fmt.Errorf("cannot list: %w", err)}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		o := outcome{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		if err != nil {
			o.err = fmt.Errorf("cannot read the %d body: %w", resp.StatusCode, err)
			return o
		}
		switch resp.StatusCode {
		case http.StatusOK:
			var list struct {
				Kind  string `json:"kind"`
				Items []struct {
					Metadata struct {
						Name string `json:"name"`
					} `json:"metadata"`
				} `json:"items"`
			}
			if err := json.Unmarshal(body, &list); err != nil {
				o.err = fmt.Errorf("cannot parse a 200 list (%d bytes): %w", len(body), err)
				return o
			}
			if list.Kind != "ConfigMapList" {
				o.err = fmt.Errorf("200 list kind = %q", list.Kind)
			}
			o.items = len(list.Items)
			for i, it := range list.Items {
				if want := fmt.Sprintf("cm-%05d", i); it.Metadata.Name != want {
					o.err = fmt.Errorf("item %d = %q, want %q", i, it.Metadata.Name, want)
					break
				}
			}
		case http.StatusTooManyRequests:
			var st struct {
				Kind   string `json:"kind"`
				Status string `json:"status"`
				Reason string `json:"reason"`
				Code   int    `json:"code"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				o.err = fmt.Errorf("cannot parse the 429 Status %q: %w", body, err)
			} else if st.Kind != "Status" || st.Status != "Failure" || st.Reason != "TooManyRequests" || st.Code != 429 {
				o.err = fmt.Errorf("429 body = %+v, want a Failure Status TooManyRequests 429", st)
			}
		}
		return o
	}

	// The GET client dials from 127.0.0.2: another remote IP, so another
	// fairness key than the listers'.
	getClient := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)},
	}).DialContext}}
	defer getClient.CloseIdleConnections()
	done := make(chan struct{})
	var gets, getsOK, getsWhileQueued int
	var getErrs []string
	getDone := make(chan struct{})
	go func() {
		defer close(getDone)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			path := fmt.Sprintf("%s/cm-%05d", listPath, i%items)
			before := lim.Stats()
			resp, err := getClient.Get(e.url + path)
			gets++
			if err != nil {
				getErrs = append(getErrs, err.Error())
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				getErrs = append(getErrs, fmt.Sprintf("GET %s: cannot read body: %v", path, err))
			case resp.StatusCode != http.StatusOK:
				getErrs = append(getErrs, fmt.Sprintf("GET %s = %d (Retry-After %q): %.200s", path, resp.StatusCode, resp.Header.Get("Retry-After"), body))
			default:
				getsOK++
				if before.Queued > 0 && lim.Stats().Queued > 0 {
					getsWhileQueued++
				}
			}
		}
	}()

	// The bulk seats hold: sample the limiter while the lists run.
	var maxBulk int
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			select {
			case <-done:
				return
			default:
			}
			if st := lim.Stats(); st.InflightBulk > maxBulk {
				maxBulk = st.InflightBulk
			}
			runtime.Gosched()
		}
	}()

	var mu sync.Mutex
	codes := map[int]int{}
	var complete, throttled int
	var bad []string
	var wg sync.WaitGroup
	for range listers {
		wg.Go(func() {
			hc := &http.Client{Transport: &http.Transport{}}
			defer hc.CloseIdleConnections()
			for range listFloodAttempts {
				o := listOnce(hc)
				mu.Lock()
				codes[o.code]++
				switch {
				case o.err != nil:
					bad = append(bad, o.err.Error())
				case o.code == http.StatusOK && o.items == items:
					complete++
				case o.code == http.StatusOK:
					bad = append(bad, fmt.Sprintf("200 list with %d items, want %d", o.items, items))
				case o.code == http.StatusTooManyRequests:
					if secs, err := strconv.Atoi(o.retryAfter); err != nil || secs < 1 {
						bad = append(bad, fmt.Sprintf("429 with Retry-After %q, want whole seconds >= 1", o.retryAfter))
					} else {
						throttled++
					}
				default:
					bad = append(bad, fmt.Sprintf("LIST answered %d, want 200 or 429", o.code))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(done)
	<-getDone
	<-sampleDone

	st := lim.Stats()
	var mb strings.Builder
	cfg.Metrics.WritePrometheus(&mb)
	yields := 0
	for line := range strings.Lines(mb.String()) {
		if v, ok := strings.CutPrefix(line, "lazyapi_ratelimit_bulk_yields_total "); ok {
			yields, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	t.Logf("lists: %d complete, %d throttled, codes %v; gets: %d ok of %d, %d while bulk lists were queued; max bulk in flight %d, bulk yields %d; limiter after: %+v",
		complete, throttled, codes, getsOK, gets, getsWhileQueued, maxBulk, yields, st)
	if maxBulk == 0 || maxBulk > 2 {
		t.Errorf("max bulk lists in flight = %d, want 1..2 (--max-bulk-lists-inflight=2)", maxBulk)
	}
	if getsWhileQueued == 0 {
		t.Errorf("no GET answered while bulk lists were queued")
	}
	if yields == 0 {
		t.Errorf("bulk streams never yielded to the GETs")
	}
	for i, b := range bad {
		if i == 10 {
			t.Errorf("... %d more", len(bad)-10)
			break
		}
		t.Errorf("bad LIST outcome: %s", b)
	}
	if complete == 0 {
		t.Errorf("no complete list in %d attempts", listers*listFloodAttempts)
	}
	if throttled == 0 {
		t.Errorf("no 429 in %d attempts with an 8 MiB budget and a queue of 4", listers*listFloodAttempts)
	}
	for i, g := range getErrs {
		if i == 10 {
			t.Errorf("... %d more", len(getErrs)-10)
			break
		}
		t.Errorf("GET not served: %s", g)
	}
	if getsOK == 0 {
		t.Errorf("the GET client got no answer during the flood")
	}
	// Everything released: the reservations went back when the responses ended.
	waitFor(t, "reservations released", func() error {
		if s := lim.Stats(); s.InflightRequests != 0 || s.ReservedBytes != 0 {
			return fmt.Errorf("stats after the flood: %+v", s)
		}
		return nil
	})
}

// bulkLearnEnv starts a server whose limiter has one bulk seat, a bulk
// threshold of 1 MiB and a queue wait of 1 s (the bulk-learning tests).
func bulkLearnEnv(t *testing.T) (*env, *ratelimit.Limiter, ratelimit.Config) {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 64 << 20
	cfg.MaxBulkInflight = 1
	cfg.BulkListBytes = 1 << 20
	cfg.MaxQueueWait = time.Second
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, func(c *proxy.Config) { c.Limiter = lim }), lim, cfg
}

// TestBulkLearnedFromStream: a collection whose first values are small is
// underestimated (count × the first page's average size) and its LISTs are
// admitted as short; once that LIST's response passes the bulk threshold, the next
// LISTs of the collection are bulk. The test holds the only bulk seat, so a
// bulk LIST gets 429 after the queue wait and a short one is served.
func TestBulkLearnedFromStream(t *testing.T) {
	e, lim, cfg := bulkLearnEnv(t)
	put := func(ns, name string, size int) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Data: map[string]string{"payload": strings.Repeat("x", size)}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.Put(context.Background(), storagefmt.Key("/registry", "configmaps", ns, name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	// The range starts with small objects: the first value (the sample)
	// and the first page (the size hint) are small.
	const small = 20
	for i := range small {
		put("aaa", fmt.Sprintf("small-%02d", i), 10)
	}
	const big = 30
	for i := range big {
		put("flood", fmt.Sprintf("cm-%02d", i), 100<<10) // 3 MiB in all
	}
	seat, err := lim.Admit(context.Background(), ratelimit.Request{Client: "test", Kind: ratelimit.Bulk})
	if err != nil {
		t.Fatal(err)
	}
	list := func() (int, int) {
		t.Helper()
		resp, err := http.Get(e.url + "/api/v1/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatalf("cannot parse a 200 list: %v", err)
			}
		}
		return resp.StatusCode, len(l.Items)
	}
	// The first LIST is estimated at 50 × 4 KiB (no size hint yet) and
	// sets the hint from its first page: small objects only. Without what
	// it wrote, the next LIST would be estimated from that hint, short too.
	if code, n := list(); code != http.StatusOK || n != small+big {
		t.Fatalf("first LIST (underestimated: short) = %d with %d items, want 200 with %d", code, n, small+big)
	}
	// Past the threshold it became bulk: it yielded to no one (it is the
	// only request; as a short request it would have waited for itself).
	var mb strings.Builder
	cfg.Metrics.WritePrometheus(&mb)
	if !strings.Contains(mb.String(), "lazyapi_ratelimit_bulk_yields_total 0\n") {
		t.Errorf("the LIST that became bulk yielded (to itself?):\n%s", mb.String())
	}
	if seen := e.srv.ObservedResponse("/registry/configmaps/"); !lim.IsBulk(seen) {
		t.Fatalf("observed response of the collection = %d bytes, want above the 1 MiB threshold", seen)
	}
	if code, _ := list(); code != http.StatusTooManyRequests {
		t.Fatalf("LIST after a large response (bulk, the only bulk seat held) = %d, want 429", code)
	}
	seat.Release(0)
	if code, n := list(); code != http.StatusOK || n != small+big {
		t.Fatalf("LIST with the bulk seat free = %d with %d items, want 200 with %d", code, n, small+big)
	}
}

// TestRequestTimeoutMidStream: a streamed LIST that overruns
// --request-timeout while its client reads (the server is the slow side:
// its bulk stream yields BulkYield per flush to a short request held in
// flight) is aborted, with and without gzip: status 200, then a read error
// and a body that does not parse, never a well-formed list missing items.
// This is what a LIST slowed by a loaded machine (or by the race
// detector) meets at its request timeout; TestStalledReaderAborted covers
// a client that stops reading.
func TestRequestTimeoutMidStream(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 64 << 20
	cfg.BulkListBytes = 1 << 20
	cfg.BulkYield = 100 * time.Millisecond
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(c *proxy.Config) {
		c.Limiter = lim
		c.RequestTimeout = time.Second
	})
	// ~4 MiB: about 64 flushes, 6.4 s of yields against a 1 s timeout.
	seedBig(t, e, "big", 100, 40<<10)
	held, err := lim.Admit(context.Background(), ratelimit.Request{Client: "held", Kind: ratelimit.Short})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(0)
	for _, gz := range []bool{false, true} {
		hc := &http.Client{Transport: &http.Transport{DisableCompression: !gz}}
		start := time.Now()
		resp, err := hc.Get(e.url + "/api/v1/namespaces/big/configmaps")
		if err != nil {
			t.Fatalf("gzip %v: %v", gz, err)
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections()
		t.Logf("gzip %v: %d (decompressed %v) after %v, %d bytes, read error %v", gz, resp.StatusCode,
			resp.Uncompressed, time.Since(start), len(body), rerr)
		if resp.StatusCode != 200 || rerr == nil || json.Valid(body) {
			t.Errorf("gzip %v: LIST past its request timeout = %d, read error %v, valid JSON %v; want 200, a read error, a cut body",
				gz, resp.StatusCode, rerr, json.Valid(body))
		}
		if resp.Uncompressed != gz { // net/http decompressed a gzip body
			t.Errorf("gzip %v: the response was compressed: %v", gz, resp.Uncompressed)
		}
	}
	if v, _ := metricValue(e.ms, `lazyapi_streams_aborted_total{reason="request_timeout"}`); v != 2 {
		t.Errorf(`lazyapi_streams_aborted_total{reason="request_timeout"} = %v, want 2`, v)
	}
}

// TestCacheListBulk is the 256-reflector storm of bench/RESULTS.md (## storm:
// cache LISTs at the bulk level) at small scale: a reflector's first LIST
// (limit=500&resourceVersion=0) is answered whole from the watch cache, so
// it is admitted by the whole collection's size, at the bulk level, not
// as a 500-item short LIST. The test holds the only bulk seat: such a
// LIST then waits in its bulk queue and gets 429 with Retry-After, while
// a LIST that honours its limit (from etcd) is short and served. Real
// client-go reflector LISTs refused that way retry after Retry-After and
// all complete once the seat is free. Counts and codes only: the queue
// wait is the only duration, and it only delays.
func TestCacheListBulk(t *testing.T) {
	// 500 items are 0.55 MB, under the 1 MiB threshold; the collection
	// is 3.3 MB, above it.
	const (
		items     = 3000
		itemBytes = 1 << 10
	)
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 64 << 20
	cfg.MaxBulkInflight = 1
	cfg.BulkListBytes = 1 << 20
	cfg.MaxQueueWait = 500 * time.Millisecond
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var c *cache.Cache
	e := startEnv(t, func(pc *proxy.Config) {
		pc.Limiter = lim
		c, err = cache.New(cache.Config{Client: pc.Client, MemoryBytes: 64 << 20, DefaultHistory: 100})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		pc.Cache = c
	})
	seedBig(t, e, "storm", items, itemBytes)
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cached", func() error {
		if !r.Ready() || r.Bytes() < items*itemBytes {
			st, why := r.Status()
			return fmt.Errorf("cache state %s (%d bytes): %s", st, r.Bytes(), why)
		}
		return nil
	})

	type answer struct {
		code          int
		retryAfter    string
		items         int
		continueToken string
	}
	list := func(query string) answer {
		t.Helper()
		resp, err := http.Get(e.url + "/api/v1/namespaces/storm/configmaps?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		if resp.StatusCode == http.StatusOK {
			var l struct {
				Metadata struct {
					Continue string `json:"continue"`
				} `json:"metadata"`
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatalf("cannot parse a 200 list: %v", err)
			}
			a.items, a.continueToken = len(l.Items), l.Metadata.Continue
		}
		return a
	}

	// The average value size, as any LIST read from etcd sets it (in the
	// storm, one that came while the cache filled): 500 items of it are
	// under the threshold.
	e.srv.SetSizeHint("/registry/configmaps/", itemBytes+100)
	seat, err := lim.Admit(context.Background(), ratelimit.Request{Client: "test", Kind: ratelimit.Bulk})
	if err != nil {
		t.Fatal(err)
	}
	// A LIST that honours its limit (no resourceVersion: a consistent
	// read, paged) is estimated at limit items: short.
	if a := list("limit=5"); a.code != http.StatusOK || a.items != 5 || a.continueToken == "" {
		t.Fatalf("LIST limit=5 (short, from etcd) with the bulk seat held = %+v, want 200 with 5 items and a continue token", a)
	}
	// resourceVersion=0 ignores limit: the whole collection from the
	// cache, bulk (estimated at 500 × the hint it was short).
	all := func() answer {
		t.Helper()
		resp, err := http.Get(e.url + "/api/v1/configmaps?limit=500&resourceVersion=0")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		a := answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
		if resp.StatusCode == http.StatusOK {
			var l struct {
				Items []json.RawMessage `json:"items"`
			}
			if err := json.Unmarshal(body, &l); err != nil {
				t.Fatalf("cannot parse a 200 list: %v", err)
			}
			a.items = len(l.Items)
		}
		return a
	}
	if a := all(); a.code != http.StatusTooManyRequests || a.retryAfter == "" {
		t.Fatalf("reflector LIST limit=500&resourceVersion=0 from the cache with the only bulk seat held = %+v, want 429 with Retry-After (bulk: the whole %d-byte collection is written)", a, items*itemBytes)
	}

	// Real reflector LISTs (client-go, JSON): refused with 429 while the
	// seat is held, retried after Retry-After, all complete when it is
	// free.
	var throttled atomic.Int64
	rc := rest.CopyConfig(e.jsonCfg)
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "" {
				throttled.Add(1)
			}
			return resp, err
		})
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	const reflectors = 4
	type result struct {
		items int
		cont  string
		err   error
	}
	results := make(chan result, reflectors)
	for range reflectors {
		go func() {
			l, err := cs.CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{Limit: 500, ResourceVersion: "0"})
			if err != nil {
				results <- result{err: err}
				return
			}
			results <- result{items: len(l.Items), cont: l.Continue}
		}()
	}
	waitFor(t, "every reflector LIST refused once", func() error {
		if n := throttled.Load(); n < reflectors {
			return fmt.Errorf("%d 429s with Retry-After, want %d", n, reflectors)
		}
		return nil
	})
	seat.Release(0)
	for range reflectors {
		select {
		case res := <-results:
			if res.err != nil || res.items != items || res.cont != "" {
				t.Errorf("client-go LIST limit=500&resourceVersion=0 = %d items, continue %q, err %v; want %d items, no continue", res.items, res.cont, res.err, items)
			}
		case <-time.After(time.Minute):
			t.Fatal("a client-go LIST did not end within a minute of the bulk seat's release")
		}
	}
	t.Logf("429s with Retry-After seen by client-go: %d", throttled.Load())
	if st := lim.Stats(); st.InflightBulk != 0 || st.InflightRequests != 0 || st.Queued != 0 {
		t.Errorf("limiter after the LISTs = %+v, want nothing in flight or queued", st)
	}
}
