//go:build !race

package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// TestEtcdWatchLagBound: a watch served from etcd (no watch cache) whose
// client stops reading holds at most Config.EtcdWatchLagBytes of etcd's
// events, then ends; the client, reading again, gets the events up to the
// cut and the end of the response, and a watch from its last revision gets
// the rest, in order, none twice. Before, the etcd client buffered every
// event etcd sent meanwhile (with its previous value), without bound.
//
// Memory held is measured as the live heap (after GC) grown by the writes
// while the stalled watch is open, less what the same writes grew it by
// with no watch (the embedded etcd keeps its raft log in this process;
// that difference varies by up to ~11 MiB either way from run to run):
// before the bound 36-40 MiB, after it -11 to +6 MiB (limit 4 MiB).
// !race: a live-heap measurement, as TestEstimateHoldsStalled.
func TestEtcdWatchLagBound(t *testing.T) {
	const limit = 4 << 20
	size, writes := 1<<20, 32
	e := startEnv(t, func(pc *proxy.Config) {
		pc.WriteTimeout = time.Minute // the stalled client is not cut for its stall
		pc.EtcdWatchLagBytes = limit
	})
	payload := strings.Repeat("y", size)
	var rev int64
	put := func(i int) { rev = putLagConfigMap(t, e, i, 4, payload) }
	heap := func() int64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	put(0)
	h0 := heap()
	for i := range writes {
		put(i)
	}
	base := heap() - h0 // the writes alone

	// A watch from now whose client reads its response's header, then
	// nothing (a small receive buffer: the socket takes little).
	from := rev
	conn, resp := stalledWatch(t, strings.TrimPrefix(e.url, "http://"), from)
	defer conn.Close()
	const lagged = "lazyapi_watchers_closed_lagging_total"
	before, _ := metricValue(e.ms, lagged)
	h2 := heap()
	for i := range writes {
		put(writes + i)
	}
	last := rev
	// The watch is cut once it holds more than the limit (or, before the
	// bound, the etcd client holds everything etcd sent).
	deadline := time.Now().Add(10 * time.Second)
	for v, _ := metricValue(e.ms, lagged); v <= before && time.Now().Before(deadline); v, _ = metricValue(e.ms, lagged) {
		time.Sleep(50 * time.Millisecond)
	}
	held := heap() - h2 - base
	t.Logf("%d updates of %d KiB to a watch whose client does not read: the live heap grew %.1f MiB more than with no watch (limit %d MiB)",
		writes, size>>10, float64(held)/(1<<20), limit>>20)
	if v, _ := metricValue(e.ms, lagged); v <= before {
		t.Errorf("%s = %v: the watch was not cut", lagged, v)
	}
	if held > 3*limit {
		t.Errorf("the stalled watch held %.1f MiB, want at most about the limit, %d MiB", float64(held)/(1<<20), limit>>20)
	}

	// The client reads again: the events up to the cut, then the end.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := readWatchRevs(t, resp.Body, 0)
	if len(got) == 0 || got[len(got)-1] >= last {
		t.Fatalf("the cut watch sent revisions %v, want some, ending before %d", got, last)
	}
	// A watch from the last revision received gets the rest.
	hr, err := http.Get(fmt.Sprintf("%s/api/v1/namespaces/lag/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=30", e.url, got[len(got)-1]))
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Body.Close()
	got = append(got, readWatchRevs(t, hr.Body, last)...)
	want := from + 1
	for _, r := range got {
		if r != want {
			t.Fatalf("revisions %v across the cut watch and its resumption, want each of %d..%d once, in order", got, from+1, last)
		}
		want++
	}
	if want != last+1 {
		t.Fatalf("revisions %v across the cut watch and its resumption, want up to %d", got, last)
	}
}

// TestEtcdWatchLagCharged: what a watch served from etcd holds of etcd's
// events its client has not taken (etcdFeed, up to
// Config.EtcdWatchLagBytes) is charged to the watch budget, so that a
// client's stalled watches hold no more than the budget together. Eight
// watches of one client that read nothing after their headers, each
// offered 48 updates of 128 KiB ConfigMaps (12 MiB with the previous
// values, under the 16 MiB lag bound; the socket and the writer take
// about 7 MiB of it), beside a watch budget of 4 MiB: all eight are ended
// as lagging, the watch reservations grow with what the feeds hold, past
// what the blocked writers hold (a pooled buffer of 256 KiB each at most,
// recorded as before), but not past the budget plus that, and another
// client's watch is admitted afterwards. Before, the feeds' bytes were not
// charged: no watch was cut and the reservations stayed at what the
// writers hold, while each feed held several MiB beyond the budget (times
// the thousands of watches a client may hold: unbounded in practice).
// !race: etcd takes ~300 ms a put of 128 KiB under -race on 2 loaded
// cores (15-20 s for the test); without it 2-5 s.
func TestEtcdWatchLagCharged(t *testing.T) {
	const (
		size    = 128 << 10
		updates = 48
		writer  = idleWatchReserve + 256<<10 // what a blocked writer holds: idle, a pooled buffer
	)
	watches, budget := 8, int64(4<<20)
	lcfg := ratelimit.DefaultConfig()
	lcfg.MaxInflightBytes = 1 << 30
	lcfg.MaxWatchBytes = budget
	lcfg.MaxQueued = 0
	lim, err := ratelimit.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(pc *proxy.Config) {
		pc.Limiter = lim
		pc.WriteTimeout = time.Minute // the stalled clients are not cut for their stall
	})
	payload := strings.Repeat("y", size)
	var rev int64
	put := func(i int) { rev = putLagConfigMap(t, e, i, 2, payload) }
	put(0)
	put(1)
	addr := strings.TrimPrefix(e.url, "http://")
	for range watches {
		conn, _ := stalledWatch(t, addr, rev)
		defer conn.Close()
	}
	const lagged = "lazyapi_watchers_closed_lagging_total"
	before, _ := metricValue(e.ms, lagged)
	var peak int64
	sample := func() {
		if r := lim.Stats().WatchReservedBytes; r > peak {
			peak = r
		}
	}
	for i := range updates {
		put(2 + i)
		sample()
	}
	deadline := time.Now().Add(20 * time.Second)
	for v, _ := metricValue(e.ms, lagged); v < before+float64(watches) && time.Now().Before(deadline); v, _ = metricValue(e.ms, lagged) {
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	v, _ := metricValue(e.ms, lagged)
	t.Logf("%d stalled watches offered %d MiB each: %v cut as lagging; watch reservations peaked at %.1f MiB of a %d MiB budget",
		watches, 2*updates*size>>20, v-before, float64(peak)/(1<<20), budget>>20)
	if v < before+float64(watches) {
		t.Errorf("%s rose by %v, want %d: every stalled watch ends once the budget has no room for what its feed holds", lagged, v-before, watches)
	}
	if peak <= int64(watches*writer) {
		t.Errorf("the watch reservations peaked at %d bytes, want more than the blocked writers hold, %d (the feeds' bytes charged)", peak, watches*writer)
	}
	if peak > budget+int64(watches*writer) {
		t.Errorf("the watch reservations peaked at %d bytes, want at most the budget and the writers' frames, %d", peak, budget+int64(watches*writer))
	}
	// The cut watches' charges are given back: another client's watch
	// is admitted.
	waitFor(t, "the feeds' charges given back", func() error {
		if r := lim.Stats().WatchReservedBytes; r > int64(watches*writer) {
			return fmt.Errorf("%d bytes reserved for watches", r)
		}
		return nil
	})
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	resp, err := hc.Get(fmt.Sprintf("%s/api/v1/namespaces/lag/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=1", e.url, rev))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("another client's watch after the cuts: %d, want 200", resp.StatusCode)
	}
}

// readWatchRevs reads a JSON watch stream until it ends, or until an event
// at revision until when not 0, and returns its events' resource versions.
func readWatchRevs(t *testing.T, body io.Reader, until int64) []int64 {
	t.Helper()
	var revs []int64
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   string
			Object struct {
				Metadata struct{ ResourceVersion string }
			}
		}
		if err := dec.Decode(&ev); err != nil {
			if err != io.EOF {
				t.Fatalf("after %d events: %v", len(revs), err)
			}
			return revs
		}
		if ev.Type != "MODIFIED" {
			t.Fatalf("event %q, want MODIFIED", ev.Type)
		}
		r, err := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, r)
		if until != 0 && r >= until {
			return revs
		}
	}
}
