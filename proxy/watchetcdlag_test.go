//go:build !race

package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/proxy"
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
