package bench

import (
	"context"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestProcCPU(t *testing.T) {
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the 10 ms clock moves (bounded by a deadline).
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ProcCPU did not advance in 5 s of work (%v, x=%d)", before, x)
		}
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Error("ProcCPU(-1) = nil error")
	}
	if got := MiBPerCPUSecond(3<<20, 2*time.Second); got != 1.5 {
		t.Errorf("MiBPerCPUSecond = %v, want 1.5", got)
	}
}

// TestLinkThrottle: a link of 1 MB/s takes about 0.5 s to deliver 512 KiB
// and counts every byte read.
func TestLinkThrottle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const n = 512 << 10
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(make([]byte, n))
	}()
	l := newLink(1e6)
	c, err := l.dial(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	got, err := io.Copy(io.Discard, c)
	if err != nil || got != n {
		t.Fatalf("read %d, %v; want %d", got, err, n)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Errorf("512 KiB over a 1 MB/s link took %v, want >= 0.4 s", d)
	}
	if l.read.Load() != n {
		t.Errorf("link counted %d bytes, want %d", l.read.Load(), n)
	}
}
