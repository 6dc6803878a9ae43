package ratelimit_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/valyala/fasthttp"
)

// TestStalledReaderReleases shows the contract documented for the proxy with a
// real fasthttp server: a streamed response that Releases in its stream writer
// and sets a write deadline before every flush gives its reservation back when
// the client stops reading. (Only this test imports fasthttp; the package does
// not.)
func TestStalledReaderReleases(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 64 << 20
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const writeTimeout = 300 * time.Millisecond
	chunk := make([]byte, 64<<10)
	handler := func(ctx *fasthttp.RequestCtx) {
		tk, err := lim.Admit(ctx, ratelimit.Request{Client: ctx.RemoteIP().String(), Class: "list/test",
			Bytes: 8*int64(len(chunk)) + 256}) // a page of one chunk (two copies and 256 bytes) and six chunks of buffers
		if err != nil {
			ctx.Error(err.Error(), fasthttp.StatusTooManyRequests)
			return
		}
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer tk.Release(0)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				if err := ctx.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
					return
				}
				if err := w.Flush(); err != nil {
					return
				}
			}
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: handler}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
	})

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	if _, err := conn.Write([]byte("GET /api/v1/configmaps HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Read a little to see the response start, then stall.
	if _, err := conn.Read(make([]byte, 1024)); err != nil {
		t.Fatal(err)
	}
	if st := lim.Stats(); st.InflightRequests != 1 {
		t.Fatalf("while streaming Stats() = %+v, want 1 in flight", st)
	}
	deadline := time.Now().Add(30 * time.Second)
	start := time.Now()
	for lim.Stats().InflightRequests != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("stalled reader still holds its reservation after 30s: %+v", lim.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("reservation released %v after the reader stalled (write timeout %v)", time.Since(start).Round(time.Millisecond), writeTimeout)
	if st := lim.Stats(); st.ReservedBytes != 0 {
		t.Fatalf("after release Stats() = %+v", st)
	}
}
