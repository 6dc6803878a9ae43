package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/proxy/conn"
)

// TestWriteGuardMeasuresProgress: a write to a client that reads slowly
// but steadily goes on past --write-timeout (here 1 s: 128 KiB read 16
// KiB per 300 ms take 2.4 s), and a write to a client that stops reading
// fails with the deadline about --write-timeout after its last read.
// net.Pipe has no buffers: every byte written is a byte read.
// progressChunk is the most a conn.Progress writes at once to a
// connection that is not a socket: about one TLS record.
const progressChunk = 16 << 10

func TestWriteGuardMeasuresProgress(t *testing.T) {
	const timeout = time.Second
	guarded := func() (*writeGuard, *conn.Progress, net.Conn) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		pc := conn.NewProgress(server, false)
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

// tcpPair returns the two ends of a loopback TCP connection with small
// socket buffers (64 KiB, no autotuning: a write blocks soon after the
// client stops reading; with less, loopback TCP, whose segments are up to
// 64 KiB, crawls at ~40 KB/s).
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	server, client = sc.(*net.TCPConn), cc.(*net.TCPConn)
	_ = server.SetWriteBuffer(64 << 10)
	_ = client.SetReadBuffer(64 << 10)
	t.Cleanup(func() { server.Close(); client.Close() })
	return server, client
}

// TestCoalescedWriteGuard: the write guard measures progress through a
// coalescing connection (CountWrites, under TLS) on a real socket: a held
// chunk of 1.5 MiB, written as TLS records of 16 KiB and sent in writes of
// conn.CoalesceBytes, goes on past --write-timeout while its client reads
// slowly but steadily (64 KiB every 250 ms), and fails with the deadline about --write-timeout
// after a client stops reading; the connection then fails every write
// (crypto/tls took the buffered records as sent) and the buffer is given
// back.
func TestCoalescedWriteGuard(t *testing.T) {
	const timeout = time.Second
	const records, readSize = 96, 64 << 10
	record := make([]byte, progressChunk)
	chunk := func(pc *conn.Progress) error {
		pc.Hold()
		var err error
		for range records {
			if _, err = pc.Write(record); err != nil {
				break
			}
		}
		if rerr := pc.Release(); err == nil {
			err = rerr
		}
		return err
	}
	inUse := conn.CoalesceInUse()

	server, client := tcpPair(t)
	pc := conn.NewProgress(server, true)
	g := &writeGuard{conn: pc, pc: pc, timeout: timeout}
	read := make(chan int64, 1)
	go func() {
		buf := make([]byte, readSize)
		var n int64
		defer func() { read <- n }()
		for {
			time.Sleep(250 * time.Millisecond) // the slow client's pace, not synchronisation
			m, err := io.ReadFull(client, buf)
			n += int64(m)
			if err != nil {
				return
			}
		}
	}()
	g.arm()
	start := time.Now()
	if err := chunk(pc); err != nil {
		t.Fatalf("coalesced write to a slow, steady reader failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("the slow reader took %s, want > 2 × the timeout (the test would show nothing)", d)
	}
	g.done(nil)
	if w := pc.Written(); w != records*progressChunk {
		t.Errorf("counted %d bytes written, want %d", w, records*progressChunk)
	}
	server.CloseWrite()
	if n := <-read; n != records*progressChunk {
		t.Errorf("the client read %d bytes, want %d", n, records*progressChunk)
	}
	if n := conn.CoalesceInUse(); n != inUse {
		t.Errorf("coalescing buffers in use %d after the write, want %d", n, inUse)
	}

	server, client = tcpPair(t)
	pc = conn.NewProgress(server, true)
	g = &writeGuard{conn: pc, pc: pc, timeout: timeout}
	go func() {
		buf := make([]byte, readSize)
		for range 2 { // then it stops reading
			if _, err := io.ReadFull(client, buf); err != nil {
				return
			}
		}
	}()
	g.arm()
	start = time.Now()
	err := chunk(pc)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("coalesced write to a client that stopped reading = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 3*timeout {
		t.Errorf("a stalled client held the write %s, want about the timeout (%s)", d, timeout)
	}
	g.done(nil)
	_ = server.SetWriteDeadline(time.Time{})
	if _, err := pc.Write(record); err == nil {
		t.Error("a write after the failed flush succeeded, want the flush's error")
	}
	if n := conn.CoalesceInUse(); n != inUse {
		t.Errorf("coalescing buffers in use %d after the failed write, want %d", n, inUse)
	}
}

// TestProgressConnRawWrite: on a socket, writes outside a hold go out as
// they come and arrive whole and in order; a connection that does not
// coalesce never buffers.
func TestProgressConnRawWrite(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		server, client := tcpPair(t)
		pc := conn.NewProgress(server, coalesce)
		want := make([]byte, 1<<20+123)
		for i := range want {
			want[i] = byte(i * 7)
		}
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(client)
			got <- b
		}()
		for off := 0; off < len(want); {
			n := min(len(want)-off, 5000+off%70000)
			if off%3 == 0 {
				pc.Hold()
			}
			if _, err := pc.Write(want[off : off+n]); err != nil {
				t.Fatal(err)
			}
			if off%3 == 0 {
				if err := pc.Release(); err != nil {
					t.Fatal(err)
				}
			}
			off += n
		}
		server.CloseWrite()
		if b := <-got; !bytes.Equal(b, want) {
			t.Fatalf("coalesce=%v: the client read %d bytes, not the %d written", coalesce, len(b), len(want))
		}
		if w := pc.Written(); w != int64(len(want)) {
			t.Errorf("coalesce=%v: counted %d bytes, want %d", coalesce, w, len(want))
		}
	}
}
