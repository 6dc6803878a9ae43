package cache

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestStreamCost measures what the cache's etcd watches cost with n
// ready, idle resources (LAZYAPI_STREAMCOST=n, e.g. 60): goroutines (by
// the packages on their stacks), heap in use after a GC, gRPC streams
// etcd serves and the watch-stream messages etcd receives and sends over
// a window of 10 progress intervals (1 s each). Embedded etcd runs in the
// test's process: its side is counted too, apart where the stacks say.
// Figures: bench/RESULTS.md, ## stream: one etcd watch stream per
// cached resource.
func TestStreamCost(t *testing.T) {
	var n int
	if _, err := fmt.Sscan(os.Getenv("LAZYAPI_STREAMCOST"), &n); err != nil || n <= 0 {
		t.Skip("set LAZYAPI_STREAMCOST=<resources> (about 20 s)")
	}
	srv := etcdtest.Start(t)
	cli := srv.Client
	for i := range n {
		put(t, cli, fmt.Sprintf("/registry/r%02d/ns/a", i), []byte("a"))
	}
	before := goroutines()
	heap0 := heapInuse()
	c := newTestCache(t, cli, func(c *Config) { c.ProgressInterval = time.Second })
	rs := make([]*Resource, n)
	for i := range rs {
		rs[i] = c.Resource(Spec{Name: fmt.Sprintf("r%02d", i), Prefix: fmt.Sprintf("/registry/r%02d/", i), Namespaced: true})
	}
	for _, r := range rs {
		waitState(t, r, StateReady)
	}
	rev := put(t, cli, "/registry/other/x", []byte("x"))
	for _, r := range rs {
		poll(t, "progress", func() error {
			if r.Revision() < rev {
				return fmt.Errorf("%s at %d, want %d", r.name, r.Revision(), rev)
			}
			return nil
		})
	}
	after := goroutines()
	heap1 := heapInuse()
	recv0, sent0, streams := watchMsgs(t, srv.Endpoint)
	time.Sleep(10 * time.Second) // the measurement window, not synchronisation
	recv1, sent1, _ := watchMsgs(t, srv.Endpoint)
	t.Logf("%d resources: goroutines %s -> %s (+%d); heap in use +%.1f MiB (%.1f KiB per resource); etcd watch streams open %v; in 10 s idle (ProgressInterval 1s): etcd received %v watch-stream messages, sent %v",
		n, before, after, after.total-before.total, float64(heap1-heap0)/(1<<20), float64(heap1-heap0)/1024/float64(n), streams, recv1-recv0, sent1-sent0)
}

type goroutineCount struct{ total, client, server, other int }

func (g goroutineCount) String() string {
	return fmt.Sprintf("%d (etcd client %d, etcd server %d, other %d)", g.total, g.client, g.server, g.other)
}

func goroutines() goroutineCount {
	runtime.GC()
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var g goroutineCount
	for _, st := range strings.Split(string(buf), "\n\n") {
		g.total++
		switch {
		case strings.Contains(st, "go.etcd.io/etcd/client/v3"):
			g.client++
		case strings.Contains(st, "go.etcd.io/etcd/server/"):
			g.server++
		default:
			g.other++
		}
	}
	return g
}

// watchMsgs reads etcd's metrics (on its client URL): Watch messages
// received and sent, and the watch streams etcd holds open.
func watchMsgs(t *testing.T, endpoint string) (recv, sent, streams float64) {
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		watch := strings.Contains(line, `grpc_method="Watch"`)
		switch {
		case watch && strings.HasPrefix(line, "grpc_server_msg_received_total{"):
			recv += v
		case watch && strings.HasPrefix(line, "grpc_server_msg_sent_total{"):
			sent += v
		case strings.HasPrefix(line, "etcd_debugging_mvcc_watch_stream_total"):
			streams += v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recv, sent, streams
}
