package proxy_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/proxy"
)

// rawConn dials url (http://host:port) with a deadline on everything.
func rawConn(t *testing.T, url string, d time.Duration) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(d))
	return c, bufio.NewReader(c)
}

func readResponse(t *testing.T, br *bufio.Reader, what string) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// TestBodyReadAfterAuthentication: a request's body is not read before
// the request is authenticated and authorized, and only by the handlers
// that need it (the self reviews), as kube-apiserver: a POST declaring
// 1 MiB with one byte sent and no credentials is answered 401 at once
// (it waited for the body until the read timeout, holding a 1 MiB buffer:
// 500 such connections took 500 MiB, issue 23) and its connection closed;
// with credentials it is 405, also without the body.
func TestBodyReadAfterAuthentication(t *testing.T) {
	e, _ := startTLSEnv(t, false, nil)
	for _, tc := range []struct{ auth, want string }{{"", "401"}, {"Authorization: Bearer token-alice\r\n", "405"}} {
		c, br := rawConn(t, e.httpURL, 10*time.Second)
		fmt.Fprintf(c, "POST /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n{", tc.auth)
		code, body := readResponse(t, br, "POST declaring 1 MiB")
		if fmt.Sprint(code) != tc.want {
			t.Errorf("POST declaring 1 MiB (%q) = %d %s, want %s", tc.auth, code, body, tc.want)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("after a response with 1 MiB of body unread: %v, want the connection closed", err)
		}
	}

	// A small unread body is skipped: the next request on the connection
	// is served.
	c, br := rawConn(t, e.httpURL, 10*time.Second)
	fmt.Fprintf(c, "GET /api/v1/namespaces/a/configmaps HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-alice\r\nContent-Length: 11\r\n\r\nhello world"+
		"GET /version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-alice\r\n\r\n")
	for i, want := range []int{200, 200} {
		if code, body := readResponse(t, br, "pipelined"); code != want {
			t.Errorf("pipelined response %d = %d %s, want %d", i, code, body, want)
		}
	}

	// The self reviews read their bodies: Content-Length, chunked, and
	// Expect: 100-continue (the 100 is sent when the handler reads).
	review := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	user := func(what, body string) {
		t.Helper()
		var r struct {
			Status struct {
				UserInfo struct{ Username string }
			}
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.Status.UserInfo.Username != "alice" {
			t.Errorf("%s: %s (%v), want user alice", what, body, err)
		}
	}
	const ssr = "POST /apis/authentication.k8s.io/v1/selfsubjectreviews HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer token-alice\r\nContent-Type: application/json\r\n"
	c, br = rawConn(t, e.httpURL, 10*time.Second)
	fmt.Fprintf(c, ssr+"Content-Length: %d\r\n\r\n%s", len(review), review)
	code, body := readResponse(t, br, "self review")
	if code != 201 {
		t.Errorf("self review = %d %s, want 201", code, body)
	}
	user("self review", body)
	// The connection is reused.
	fmt.Fprintf(c, ssr+"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(review), review)
	code, body = readResponse(t, br, "chunked self review")
	if code != 201 {
		t.Errorf("chunked self review = %d %s, want 201", code, body)
	}
	user("chunked self review", body)

	c, br = rawConn(t, e.httpURL, 10*time.Second)
	fmt.Fprintf(c, ssr+"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(review))
	if code, _ := readResponse(t, br, "100 Continue"); code != 100 {
		t.Errorf("Expect: 100-continue: first response %d, want 100", code)
	}
	io.WriteString(c, review)
	code, body = readResponse(t, br, "self review after 100")
	if code != 201 {
		t.Errorf("self review after 100 Continue = %d %s, want 201", code, body)
	}
	user("self review after 100 Continue", body)

	// Over the 1 MiB a request body may have: 413, as kube-apiserver
	// (RequestEntityTooLarge), without reading it.
	c, br = rawConn(t, e.httpURL, 10*time.Second)
	fmt.Fprintf(c, ssr+"Content-Length: %d\r\n\r\n{", 2<<20)
	if code, body := readResponse(t, br, "2 MiB self review"); code != 413 || !strings.Contains(body, "RequestEntityTooLarge") {
		t.Errorf("2 MiB self review = %d %s, want 413 RequestEntityTooLarge", code, body)
	}
}

// TestHeaderReadTimeout: a request header trickled byte by byte is cut
// ReadTimeout after its first byte; it was cut after twice that (the gate
// read under fasthttp's deadline, which fasthttp then armed again when
// the gate handed over what had arrived).
func TestHeaderReadTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	e := startEnv(t, func(c *proxy.Config) { c.ReadTimeout = timeout })
	c, br := rawConn(t, e.url, 20*time.Second)
	start := time.Now()
	io.WriteString(c, "GET /version HTTP/1.1\r\nHost: x\r\n")
	go func() {
		tick := time.NewTicker(50 * time.Millisecond) // the slow client's pace, not synchronisation
		defer tick.Stop()
		for range tick.C {
			if _, err := io.WriteString(c, "X"); err != nil {
				return
			}
		}
	}()
	// The server answers 408 or closes: either way the read returns.
	resp, err := http.ReadResponse(br, nil)
	elapsed := time.Since(start)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("trickled header: %d, want 408 or the connection closed", resp.StatusCode)
		}
	}
	if elapsed < timeout || elapsed > timeout+timeout/2 {
		t.Errorf("a trickled header was cut after %v, want %v from its first byte", elapsed.Round(10*time.Millisecond), timeout)
	}
}

// TestBodyFraming: the gate frames a withheld body as fasthttp would
// have, and leaves the framings fasthttp refuses to it (400, connection
// closed before any body is read).
func TestBodyFraming(t *testing.T) {
	e := startEnv(t)
	const next = "GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, req string
		want      []int // responses before the connection closes
	}{
		{"identity", "GET /version HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 5\r\n\r\nhello" + next, []int{200, 200}},
		{"lower case", "GET /version HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello" + next, []int{200, 200}},
		{"plus sign", "GET /version HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello" + next, []int{400}},
		{"two lengths", "GET /version HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello" + next, []int{400}},
		{"gzip", "GET /version HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nhello" + next, []int{400}},
		{"two encodings", "GET /version HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + next, []int{400}},
		{"chunked on 1.0", "GET /version HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + next, []int{400}},
		{"chunked", "GET /version HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + next, []int{200}},
		{"long unread", "GET /version HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\nhello", []int{200}},
	} {
		c, br := rawConn(t, e.url, 10*time.Second)
		io.WriteString(c, tc.req)
		for i, want := range tc.want {
			if code, body := readResponse(t, br, tc.name); code != want {
				t.Errorf("%s: response %d = %d %s, want %d", tc.name, i, code, body, want)
			}
		}
		if len(tc.want) == 2 {
			continue // kept open: the second request was served
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s: after %d responses: %v, want the connection closed", tc.name, len(tc.want), err)
		}
	}
}

// TestHeaderBudget: connections that send part of a large header hold
// header buffers only within Config.HeaderBufferBytes; the one whose
// header cannot grow gets 429 with Retry-After, and once the others are
// gone a large header is read again. Before the budget, every
// connection's buffer grew to 1 MiB (1,000 such connections: 1 GiB).
func TestHeaderBudget(t *testing.T) {
	const budget = 1 << 20
	e := startEnv(t, func(c *proxy.Config) { c.HeaderBufferBytes = budget })
	// Each holder's header needs a 256 KiB buffer (200 KiB sent); four
	// fill the budget.
	big := "GET /version HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 200<<10)
	var holders []net.Conn
	for i := 0; i < 4; i++ {
		c, _ := rawConn(t, e.url, 20*time.Second)
		if _, err := io.WriteString(c, big); err != nil {
			t.Fatal(err)
		}
		holders = append(holders, c)
	}
	// Wait until the server read them all (the gauge), then a fifth.
	waitHeaderBytes(t, e, func(n int) bool { return n >= budget })
	c, br := rawConn(t, e.url, 20*time.Second)
	io.WriteString(c, big)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("fifth large header: %v, want 429", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fifth large header: %d (Retry-After %q), want 429 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// A small request is not affected.
	if r, err := http.Get(e.url + "/version"); err != nil || r.StatusCode != 200 {
		t.Errorf("small request while the budget is full: %v %v, want 200", r, err)
	} else {
		r.Body.Close()
	}
	for _, h := range holders {
		h.Close()
	}
	waitHeaderBytes(t, e, func(n int) bool { return n == 0 })
	c, br = rawConn(t, e.url, 20*time.Second)
	io.WriteString(c, big+"\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("large header after the others left: %d, want 200", resp.StatusCode)
	}
}

// waitHeaderBytes polls lazyapi_header_buffer_bytes until ok.
func waitHeaderBytes(t *testing.T, e *env, ok func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for n := metricInt(t, e, "lazyapi_header_buffer_bytes"); !ok(n); n = metricInt(t, e, "lazyapi_header_buffer_bytes") {
		if time.Now().After(deadline) {
			t.Fatalf("lazyapi_header_buffer_bytes = %d", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
