package proxy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// TestClientDisconnectStopsReads: a client that reads the head of a large
// streamed list and hangs up stops the etcd reads of that request.
func TestClientDisconnectStopsReads(t *testing.T) {
	e := startEnv(t, withStore(func(sc *store.Config) { sc.PageBytes = 64 << 10; sc.PageSize = 500 }))
	const n, size = 4000, 8 << 10
	seedConfigMaps(t, e, "ns", n, size)
	rangesBefore, _ := metricValue(e.ms, `lazyapi_etcd_request_duration_seconds_count{op="range"}`)

	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	fmt.Fprintf(conn, "GET /api/v1/namespaces/ns/configmaps HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n")
	br := bufio.NewReader(conn)
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("read head: %v", err)
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200") || !strings.Contains(string(head), "Transfer-Encoding: chunked") {
		t.Fatalf("response head = %.300q", head)
	}
	conn.Close()
	// The request ends (its metrics are recorded) once the writer sees the
	// closed connection.
	waitFor(t, "streamed list to end after disconnect", func() error {
		if _, err := metricValue(e.ms, `lazyapi_apiserver_request_total{verb="LIST",resource="configmaps",code="200",format="json"}`); err != nil {
			return err
		}
		return nil
	})
	ranges, _ := metricValue(e.ms, `lazyapi_etcd_request_duration_seconds_count{op="range"}`)
	full := float64(n*size) / float64(64<<10) // pages a full read needs
	if got := ranges - rangesBefore; got > full/2 {
		t.Errorf("etcd ranges after disconnect = %v, a full read is ~%v: reads did not stop", got, full)
	}
	bytes, _ := metricValue(e.ms, `lazyapi_apiserver_response_bytes_total{verb="LIST",resource="configmaps"}`)
	t.Logf("after disconnect: %v etcd ranges (full read ~%v), %v bytes written of ~%d", ranges-rangesBefore, full, bytes, n*size)
	if bytes >= float64(n*size) {
		t.Errorf("wrote %v bytes to a client that left, the whole list is %d", bytes, n*size)
	}
}

func TestRequestTimeout(t *testing.T) {
	e := startEnv(t, func(c *proxy.Config) { c.RequestTimeout = 300 * time.Millisecond })
	seedConfigMaps(t, e, "ns", 3, 10)
	start := time.Now()
	code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps?resourceVersion=999999&resourceVersionMatch=NotOlderThan", "")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if code != 504 || st.Reason != metav1.StatusReasonTimeout || !strings.Contains(st.Message, "request did not complete within requested timeout") {
		t.Fatalf("request past --request-timeout = %d %s", code, body)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timeout answered after %v, want ~300ms", d)
	}
	// Normal requests still work.
	if code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps", ""); code != 200 {
		t.Fatalf("list = %d %s", code, body)
	}
}

// TestLimiter: with one request slot and no queue, a second request while
// one is in flight gets 429 with Retry-After; after it ends, requests pass.
func TestLimiter(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	cfg.MaxRequestsInflight = 1
	cfg.MaxQueued = 0
	cfg.MaxInflightBytes = 1 << 30
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	rev := seedConfigMaps(t, e, "ns", 3, 10)
	slow := make(chan int, 1)
	go func() {
		// Waits ~3s for a future resourceVersion, holding the slot.
		code, _, _ := e.raw(t, http.MethodGet, fmt.Sprintf("/api/v1/namespaces/ns/configmaps?resourceVersionMatch=NotOlderThan&resourceVersion=%d", rev+1000), "")
		slow <- code
	}()
	waitFor(t, "slow request admitted", func() error {
		if s := lim.Stats(); s.InflightRequests != 1 {
			return fmt.Errorf("in flight = %d", s.InflightRequests)
		}
		return nil
	})
	code, hdr, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps", "")
	var st metav1.Status
	json.Unmarshal(body, &st)
	if code != 429 || st.Reason != metav1.StatusReasonTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("second request = %d %v %s, want 429 TooManyRequests with Retry-After", code, hdr, body)
	}
	if c := <-slow; c != 504 {
		t.Fatalf("slow request = %d, want 504", c)
	}
	waitFor(t, "slot released", func() error {
		if s := lim.Stats(); s.InflightRequests != 0 {
			return fmt.Errorf("in flight = %d", s.InflightRequests)
		}
		return nil
	})
	if code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps", ""); code != 200 {
		t.Fatalf("after release = %d %s", code, body)
	}
	// A streamed list releases its slot when the stream ends.
	seedConfigMaps(t, e, "big", 300, 4<<10)
	if code, _, _ := e.raw(t, http.MethodGet, "/api/v1/namespaces/big/configmaps", ""); code != 200 {
		t.Fatalf("big list = %d", code)
	}
	waitFor(t, "streamed list released", func() error {
		if s := lim.Stats(); s.InflightRequests != 0 {
			return fmt.Errorf("in flight = %d", s.InflightRequests)
		}
		return nil
	})
}

// TestAdmitHook: a Config.Admit error that is not a *StatusError is 429
// with Retry-After (client-go retries a 429 only with it); a *StatusError
// keeps its code; the release runs when the response is complete.
func TestAdmitHook(t *testing.T) {
	var released atomic.Int32
	e := startEnv(t, func(c *proxy.Config) {
		c.Admit = func(rc *fasthttp.RequestCtx, req *proxy.RequestInfo) (func(), error) {
			switch req.Namespace {
			case "busy":
				return nil, errors.New("busy")
			case "forbidden":
				return nil, &proxy.StatusError{Status: codec.Status{Code: 403, Reason: "Forbidden", Message: "no"}}
			}
			return func() { released.Add(1) }, nil
		}
	})
	seedConfigMaps(t, e, "ns", 3, 10)
	code, hdr, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/busy/configmaps", "")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || code != 429 || st.Reason != metav1.StatusReasonTooManyRequests ||
		hdr.Get("Retry-After") != "1" || st.Details == nil || st.Details.RetryAfterSeconds != 1 {
		t.Errorf("refused by the hook = %d %v %s, want 429 TooManyRequests with Retry-After 1", code, hdr, body)
	}
	if code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/forbidden/configmaps", ""); code != 403 {
		t.Errorf("hook's StatusError = %d %s, want 403", code, body)
	}
	if code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps", ""); code != 200 {
		t.Fatalf("admitted = %d %s", code, body)
	}
	waitFor(t, "hook's release", func() error {
		if n := released.Load(); n != 1 {
			return fmt.Errorf("released %d times, want 1", n)
		}
		return nil
	})
}
