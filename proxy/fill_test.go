package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// seedBig writes n ConfigMaps of size bytes each in namespace ns.
func seedBig(t *testing.T, e *env, ns string, n, size int) {
	t.Helper()
	payload := strings.Repeat("x", size)
	for i := 0; i < n; i += 10 {
		var ops []clientv3.Op
		for j := i; j < min(i+10, n); j++ {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", j)},
				Data: map[string]string{"payload": payload}}
			val, err := storagefmt.Protobuf(cm)
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(storagefmt.Key("/registry", "configmaps", ns, cm.Name), string(val)))
		}
		if _, err := e.cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatalf("cannot seed: %v", err)
		}
	}
}

const watchListQuery = "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"

// readInitialEvents reads a JSON watch until the initial-events-end
// bookmark and returns the number of ADDED events before it.
func readInitialEvents(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	added := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, `{"type":"ADDED"`):
			added++
		case strings.HasPrefix(line, `{"type":"BOOKMARK"`) && strings.Contains(line, "initial-events-end"):
			return added, nil
		}
	}
	return added, fmt.Errorf("stream ended after %d ADDED without the initial-events-end bookmark: %v", added, sc.Err())
}

// TestWatchStormColdCacheOneList: 20 watches with initial events arrive at
// once at a proxy whose ConfigMap cache was never asked for (cold, as
// after a restart). Every one gets all objects, and none is served from
// etcd: they all wait for the cache's one fill.
func TestWatchStormColdCacheOneList(t *testing.T) {
	ms := metrics.NewSet()
	e := startEnv(t, func(cfg *proxy.Config) {
		c, err := cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 64 << 20, Metrics: ms})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	seedBig(t, e, "storm", 40, 20<<10)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			added, err := readInitialEvents(e.url + "/api/v1/namespaces/storm/configmaps" + watchListQuery + "&timeoutSeconds=10")
			if err == nil && added != 40 {
				err = fmt.Errorf("%d initial ADDED events, want 40", added)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if v, _ := metricValue(e.ms, "lazyapi_watch_etcd_fallback_total"); v != 0 {
		t.Errorf("lazyapi_watch_etcd_fallback_total = %v, want 0: a watch listed etcd on its own", v)
	}
	waitFor(t, "every watch closed", func() error {
		if v, _ := metricValue(e.ms, "lazyapi_watchers_open"); v != 0 {
			return fmt.Errorf("lazyapi_watchers_open = %v after every client left, want 0", v)
		}
		return nil
	})
}

// TestFillTimeout429: while a resource's cache cannot fill (its etcd
// client reaches nothing), a watch and a resourceVersion=0 LIST wait
// Config.FillWait and get kube-apiserver's 429 "storage is
// (re)initializing" with Retry-After 1; a consistent LIST is read from etcd.
func TestFillTimeout429(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there
	deadCli, err := clientv3.New(clientv3.Config{Endpoints: []string{dead}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deadCli.Close() })
	e := startEnv(t, func(cfg *proxy.Config) {
		c, err := cache.New(cache.Config{Client: deadCli, MemoryBytes: 64 << 20, FillWait: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	e.put(t, "configmaps", cm("a", "x", "1"))
	for _, path := range []string{
		"/api/v1/namespaces/ns/configmaps" + watchListQuery,
		"/api/v1/namespaces/ns/configmaps?resourceVersion=0",
	} {
		code, h, body := e.raw(t, "GET", path, "application/json")
		if code != 429 || h.Get("Retry-After") != "1" || !strings.Contains(string(body), "storage is (re)initializing") {
			t.Errorf("GET %s = %d Retry-After %q %s, want 429 Retry-After 1 storage is (re)initializing", path, code, h.Get("Retry-After"), body)
		}
	}
	if code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps", "application/json"); code != 200 {
		t.Errorf("consistent LIST = %d %s, want 200 from etcd", code, body)
	}
	if v, _ := metricValue(e.ms, `lazyapi_cache_fill_waits_total{result="timeout"}`); v != 2 {
		t.Errorf(`lazyapi_cache_fill_waits_total{result="timeout"} = %v, want 2`, v)
	}
}

// stalledList sends a LIST on a connection with a small receive buffer and
// never reads the response. It returns the connection.
func stalledList(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStalledReaderAborted: LISTs of 24 MiB whose clients never read are
// aborted after --write-timeout (reason write_stalled) or, with a long
// write timeout, at --request-timeout even while their write is blocked
// (reason request_timeout); either way the limiter's seats and bytes
// return to zero.
func TestStalledReaderAborted(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 24 MiB")
	}
	for _, tc := range []struct {
		name                  string
		writeTimeout, request time.Duration
		reason                string
	}{
		{"write_stalled", 300 * time.Millisecond, 20 * time.Second, "write_stalled"},
		{"request_timeout", 30 * time.Second, time.Second, "request_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ratelimit.DefaultConfig()
			cfg.MaxInflightBytes = 64 << 20
			cfg.MaxBulkInflight = 3
			cfg.ClientShare = 1 // the three streams are one client's
			cfg.Metrics = metrics.NewSet()
			lim, err := ratelimit.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			e := startEnv(t, func(c *proxy.Config) {
				c.Limiter = lim
				c.WriteTimeout = tc.writeTimeout
				c.RequestTimeout = tc.request
			})
			seedBig(t, e, "big", 240, 100<<10)
			addr := strings.TrimPrefix(e.url, "http://")
			for range 3 {
				stalledList(t, addr, "/api/v1/namespaces/big/configmaps")
			}
			metric := `lazyapi_streams_aborted_total{reason="` + tc.reason + `"}`
			waitFor(t, "3 stalled streams aborted", func() error {
				if v, _ := metricValue(e.ms, metric); v != 3 {
					return fmt.Errorf("%s = %v, want 3", metric, v)
				}
				if st := lim.Stats(); st.InflightRequests+st.InflightBulk != 0 || st.ReservedBytes != 0 || st.Queued != 0 {
					return fmt.Errorf("limiter holds %+v", st)
				}
				return nil
			})
			// Another client is served meanwhile and after.
			if code, _, body := e.raw(t, "GET", "/api/v1/namespaces/big/configmaps/cm-00001", "application/json"); code != 200 {
				t.Fatalf("GET = %d %s", code, body)
			}
		})
	}
}
