package proxy_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// TestEtcdWatchLagCharged: what a watch served from etcd holds of etcd's
// events its client has not taken (etcdFeed, up to
// Config.EtcdWatchLagBytes) is charged to the watch budget, so that a
// client's stalled watches hold no more than the budget together. Eight
// watches of one client that read nothing after their headers, each offered
// 48 updates of 128 KiB ConfigMaps (12 MiB with the previous values, under
// the 16 MiB lag bound; the kernel's socket buffers take 4 MiB of it at
// most), beside a watch budget of 4 MiB: all eight are ended as lagging, the watch reservations grow with what the feeds hold
// but not past the budget (plus the frame each blocked writer holds, 256
// KiB at most, recorded as before), and another client's watch is
// admitted afterwards. Before, the feeds' bytes were not charged: no watch
// was cut, the reservations stayed at what the writers hold, and the eight
// held about 8 × 12 MiB beyond the budget (× the thousands of watches a
// client may hold: unbounded in practice).
func TestEtcdWatchLagCharged(t *testing.T) {
	const (
		watches = 8
		budget  = 4 << 20
		size    = 128 << 10
		updates = 48
		writer  = idleWatchReserve + 256<<10 // what a blocked writer holds: idle, a pooled buffer
	)
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
	for v, _ := metricValue(e.ms, lagged); v < before+watches && time.Now().Before(deadline); v, _ = metricValue(e.ms, lagged) {
		sample()
		time.Sleep(10 * time.Millisecond)
	}
	v, _ := metricValue(e.ms, lagged)
	t.Logf("%d stalled watches offered %d MiB each: %v cut as lagging; watch reservations peaked at %.1f MiB of a %d MiB budget",
		watches, 2*updates*size>>20, v-before, float64(peak)/(1<<20), budget>>20)
	if v < before+watches {
		t.Errorf("%s rose by %v, want %d: every stalled watch ends once the budget has no room for what its feed holds", lagged, v-before, watches)
	}
	if peak <= budget/2 {
		t.Errorf("the watch reservations peaked at %d bytes, want more than half the budget (the feeds' bytes charged; the writers hold %d at most)", peak, watches*writer)
	}
	if peak > budget+watches*writer {
		t.Errorf("the watch reservations peaked at %d bytes, want at most the budget and the writers' frames, %d", peak, budget+watches*writer)
	}
	// The cut watches' charges are given back: another client's watch
	// is admitted.
	waitFor(t, "the feeds' charges given back", func() error {
		if r := lim.Stats().WatchReservedBytes; r > watches*writer {
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

// putLagConfigMap stores update i of the ConfigMap lag/cm-(i%names), its
// data payload and i, and returns its revision.
func putLagConfigMap(t testing.TB, e *env, i, names int, payload string) int64 {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "lag", Name: fmt.Sprintf("cm-%d", i%names)},
		Data: map[string]string{"payload": payload, "i": strconv.Itoa(i)}}
	val, err := storagefmt.Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	return e.putRaw(t, storagefmt.Key("/registry", "configmaps", "lag", cm.Name), val)
}

// stalledWatch opens a JSON watch of the ConfigMaps of namespace lag from
// rev on addr whose client reads the response's header, then nothing (a
// 16 KiB receive buffer: the socket takes little). The caller closes the
// connection; the response's body reads on.
func stalledWatch(t *testing.T, addr string, rev int64) (net.Conn, *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.(*net.TCPConn).SetReadBuffer(16 << 10); err != nil {
		conn.Close()
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /api/v1/namespaces/lag/configmaps?watch=1&resourceVersion=%d HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n", rev)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		conn.Close()
		t.Fatalf("watch from %d: %v, status %v", rev, err, resp)
	}
	return conn, resp
}
