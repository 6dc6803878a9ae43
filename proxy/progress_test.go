package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestWriteGuardMeasuresProgress: a write to a client that reads slowly
// but steadily goes on past --write-timeout (here 1 s: 128 KiB read 16
// KiB per 300 ms take 2.4 s), and a write to a client that stops reading
// fails with the deadline about --write-timeout after its last read.
// net.Pipe has no buffers: every byte written is a byte read.
func TestWriteGuardMeasuresProgress(t *testing.T) {
	const timeout = time.Second
	guarded := func() (*writeGuard, *progressConn, net.Conn) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		pc := &progressConn{Conn: server}
		return &writeGuard{conn: pc, pc: pc, timeout: timeout}, pc, client
	}

	g, pc, client := guarded()
	go func(client net.Conn) {
		buf := make([]byte, progressChunk)
		for {
			time.Sleep(300 * time.Millisecond) // the slow client's pace, not synchronisation
			if _, err := io.ReadFull(client, buf); err != nil {
				return
			}
		}
	}(client)
	g.arm()
	start := time.Now()
	if _, err := pc.Write(make([]byte, 8*progressChunk)); err != nil {
		t.Fatalf("write to a slow, steady reader failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("the slow reader took %s, want > 2 × the timeout (the test would show nothing)", d)
	}
	g.done(nil)

	g, pc, client = guarded()
	go func(client net.Conn) {
		buf := make([]byte, progressChunk)
		for range 2 { // then it stops reading
			if _, err := io.ReadFull(client, buf); err != nil {
				return
			}
		}
	}(client)
	g.arm()
	start = time.Now()
	_, err := pc.Write(make([]byte, 8*progressChunk))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a client that stopped reading = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 3*timeout {
		t.Errorf("a stalled client held the write %s, want about the timeout (%s)", d, timeout)
	}
	g.done(nil)
}
