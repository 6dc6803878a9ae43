package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/proxy"
)

// getWithHeaders sends a GET with extra header bytes and returns the code.
func (e *env) getWithHeaders(t *testing.T, target string, headers string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	go io.WriteString(conn, "GET "+target+" HTTP/1.1\r\nHost: lazyapi\r\nAccept: application/json\r\n"+headers+"Connection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %.80s: %v", target, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestLargeHeaders: request headers up to 1 MiB in total are accepted, as
// Go's server with kube-apiserver's MaxHeaderBytes (1 << 20, plus the 4 KiB
// Go allows on top): long label selectors and large bearer tokens work.
func TestLargeHeaders(t *testing.T) {
	e := startEnv(t)
	// A 3.9 KB label selector in the request line (431 with fasthttp's
	// default 4 KiB read buffer).
	vals := make([]string, 0, 400)
	for i := range 400 {
		vals = append(vals, fmt.Sprintf("v%04d", i))
	}
	sel := "app+in+(" + strings.Join(vals, ",") + ")"
	if code := e.getWithHeaders(t, "/api/v1/namespaces/a/configmaps?labelSelector="+sel, ""); code != 200 {
		t.Errorf("LIST with a %d-byte label selector = %d, want 200", len(sel), code)
	}
	// Headers just under 1 MiB in total (many large cookies, say).
	big := "X-Pad: " + strings.Repeat("a", 64<<10) + "\r\n"
	if code := e.getWithHeaders(t, "/api/v1/namespaces/a/configmaps", strings.Repeat(big, 15)); code != 200 {
		t.Errorf("GET with 960 KiB of headers = %d, want 200", code)
	}
	// Over 1 MiB + 4 KiB: 431, as Go's server.
	if code := e.getWithHeaders(t, "/api/v1/namespaces/a/configmaps", strings.Repeat(big, 17)); code != 431 {
		t.Errorf("GET with 1.06 MiB of headers = %d, want 431", code)
	}
}

// TestIdleConnectionMemory (LAZYAPI_HEADERBENCH=1) measures what idle
// connections cost now that a request may carry 1 MiB of headers: RSS and
// heap growth for N connections that connected and sent nothing, N
// keep-alive connections idle after one request, and N connections that
// sent half a request line. Figures: bench/RESULTS.md ## request headers.
func TestIdleConnectionMemory(t *testing.T) {
	if os.Getenv("LAZYAPI_HEADERBENCH") == "" {
		t.Skip("LAZYAPI_HEADERBENCH=1 runs the idle-connection memory measurement")
	}
	const n = 1000
	e := startEnv(t)
	addr := strings.TrimPrefix(e.url, "http://")
	measure := func(what string, open func(c net.Conn)) {
		runtime.GC()
		rss0, heap0 := rssBytes(t), heapBytes()
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			open(c)
			conns = append(conns, c)
		}
		// Poll until the server's RSS stops moving (each connection's
		// goroutine has reached its idle read), at most 10 s.
		last := rssBytes(t)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			time.Sleep(250 * time.Millisecond)
			cur := rssBytes(t)
			if cur-last < 64<<10 && last-cur < 64<<10 {
				break
			}
			last = cur
		}
		runtime.GC()
		rss1, heap1 := rssBytes(t), heapBytes()
		for _, c := range conns {
			c.Close()
		}
		t.Logf("%s: %d connections (client and server side): live heap %+.1f MiB (%.1f KiB each), RSS %+.1f MiB", what, n,
			float64(heap1-heap0)/(1<<20), float64(heap1-heap0)/n/1024, float64(rss1-rss0)/(1<<20))
	}
	measure("connected, nothing sent", func(net.Conn) {})
	measure("keep-alive, idle after one GET", func(c net.Conn) {
		io.WriteString(c, "GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
	measure("half a request line sent", func(c net.Conn) {
		io.WriteString(c, "GET /api/v1/namespaces/a/configmaps?labelSelector=app")
	})
}

func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// heapBytes is the live heap after a full collection.
func heapBytes() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestHeaderGatePipelining: requests pipelined on one connection, with and
// without Content-Length bodies, are each answered once; a chunked body is
// answered and the connection closed.
func TestHeaderGatePipelining(t *testing.T) {
	e := startEnv(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	reqs := "GET /version HTTP/1.1\r\nHost: x\r\n\r\n" +
		"GET /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world" +
		"\r\nGET /version HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	// Byte by byte: the gate must assemble headers across reads.
	go func() {
		for i := range len(reqs) {
			if _, err := conn.Write([]byte{reqs[i]}); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(conn)
	for i, want := range []int{200, 200, 200, 405} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("response %d = %d, want %d", i, resp.StatusCode, want)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the chunked request: %v, want the connection closed", err)
	}
}

// TestServeAfterShutdown: Serve called after Shutdown (a signal right after
// start, before the serving goroutine ran) returns instead of accepting
// forever.
func TestServeAfterShutdown(t *testing.T) {
	e := startEnv(t)
	srv, err := proxy.New(proxy.Config{Client: e.cli, Resources: e.table})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Shutdown = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		ln.Close()
		t.Fatal("Serve after Shutdown did not return")
	}
}
