package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// TestWatchChargesQueuedFrames (issue 29): an idle watch reserves what an
// idle watch holds (proxy's watchIdleBytes, 25 KiB), not a multiple of the
// average object for its life; the frames queued for it are charged while
// its client does not take them, and given back once they are written.
// Before, every watch of these 1 MiB objects reserved 3 MiB from the start
// to the end, however idle.
func TestWatchChargesQueuedFrames(t *testing.T) {
	const idle = 25 << 10
	size := 1 << 20
	if raceEnabled {
		size = 512 << 10
	}
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 256 << 20
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var c *cache.Cache
	e := startEnv(t, func(pc *proxy.Config) {
		pc.Limiter = lim
		pc.WriteTimeout = time.Minute
		c, err = cache.New(cache.Config{Client: pc.Client, MemoryBytes: 256 << 20, DefaultHistory: 100, WatcherLagBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		pc.Cache = c
	})
	payload := strings.Repeat("y", size)
	put := func(i int) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "frames", Name: fmt.Sprintf("cm-%05d", i%4)},
			Data: map[string]string{"payload": payload, "i": fmt.Sprint(i)}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "frames", cm.Name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		put(i)
	}
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitCached(t, r, "configmaps")
	rev, err := e.cli.Get(context.Background(), "/registry/configmaps/frames/cm-00000")
	if err != nil {
		t.Fatal(err)
	}
	// A watch from now whose client reads nothing until the socket's
	// buffers are full (a few MiB on loopback; a receive buffer shrunk
	// after the connection opened stalls the sender's window probes).
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/v1/namespaces/frames/configmaps?watch=1&resourceVersion=%d HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n", rev.Header.Revision)
	waitFor(t, "the watch admitted, idle", func() error {
		if st := lim.Stats(); st.InflightWatches != 1 || st.WatchReservedBytes != idle {
			return fmt.Errorf("%d watches, %d bytes reserved, want 1 and %d", st.InflightWatches, st.WatchReservedBytes, idle)
		}
		return nil
	})
	// Updates of the 1 MiB objects: their frames fill the socket's
	// buffers, then wait in the watch's buffer, charged.
	for i := range 32 {
		put(i)
	}
	var peak int64
	waitFor(t, "the queued frames charged", func() error {
		st := lim.Stats()
		peak = max(peak, st.WatchReservedBytes)
		if st.WatchReservedBytes < idle+int64(size) {
			return fmt.Errorf("%d bytes reserved, want at least %d (idle + one queued frame)", st.WatchReservedBytes, idle+size)
		}
		return nil
	})
	// The client reads: the frames are written and given back.
	go io.Copy(io.Discard, conn)
	waitFor(t, "the written frames given back", func() error {
		if st := lim.Stats(); st.WatchReservedBytes != idle {
			lag, _ := metricValue(e.ms, "lazyapi_watchers_closed_lagging_total")
			return fmt.Errorf("%d bytes reserved, want %d (%d watches; closed lagging %v)", st.WatchReservedBytes, idle, st.InflightWatches, lag)
		}
		return nil
	})
	t.Logf("an idle watch reserves %d bytes; with frames of %d KiB objects queued, %d", idle, size>>10, peak)
}
