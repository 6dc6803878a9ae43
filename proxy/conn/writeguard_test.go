package conn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/loopback"
)

// TestWriteGuardMeasuresProgress: a write to a client that reads slowly
// but steadily goes on past --write-timeout (here 1 s: 128 KiB read 16
// KiB per 300 ms take 2.4 s), and a write to a client that stops reading
// fails with the deadline about --write-timeout after its last read.
// net.Pipe has no buffers: every byte written is a byte read.

func TestWriteGuardMeasuresProgress(t *testing.T) {
	const timeout = time.Second
	guarded := func() (*WriteGuard, *Progress, net.Conn) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		pc := NewProgress(server, false)
		return GuardWrites(context.Background(), pc, timeout, nil, "", ""), pc, client
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
	g.Arm()
	start := time.Now()
	if _, err := pc.Write(make([]byte, 8*progressChunk)); err != nil {
		t.Fatalf("write to a slow, steady reader failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("the slow reader took %s, want > 2 × the timeout (the test would show nothing)", d)
	}
	g.Done(nil)

	g, pc, client = guarded()
	go func(client net.Conn) {
		buf := make([]byte, progressChunk)
		for range 2 { // then it stops reading
			if _, err := io.ReadFull(client, buf); err != nil {
				return
			}
		}
	}(client)
	g.Arm()
	start = time.Now()
	_, err := pc.Write(make([]byte, 8*progressChunk))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a client that stopped reading = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 3*timeout {
		t.Errorf("a stalled client held the write %s, want about the timeout (%s)", d, timeout)
	}
	g.Done(nil)
}

// tcpPair returns the two ends of a loopback TCP connection with small
// socket buffers (64 KiB, no autotuning: a write blocks soon after the
// client stops reading; with less, loopback TCP, whose segments are up to
// 64 KiB, crawls at ~40 KB/s).
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	server, client = loopback.TCPPair(t)
	_ = server.SetWriteBuffer(64 << 10)
	_ = client.SetReadBuffer(64 << 10)
	return server, client
}

// TestCoalescedWriteGuard: the write guard measures progress through a
// coalescing connection (CountWrites, under TLS) on a real socket: a held
// chunk of 1.5 MiB, written as TLS records of 16 KiB and sent in writes of
// CoalesceBytes, goes on past --write-timeout while its client reads
// slowly but steadily (64 KiB every 250 ms), and fails with the deadline about --write-timeout
// after a client stops reading; the connection then fails every write
// (crypto/tls took the buffered records as sent) and the buffer is given
// back.
func TestCoalescedWriteGuard(t *testing.T) {
	const timeout = time.Second
	const records, readSize = 96, 64 << 10
	record := make([]byte, progressChunk)
	chunk := func(pc *Progress) error {
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
	inUse := CoalesceInUse()

	server, client := tcpPair(t)
	pc := NewProgress(server, true)
	g := GuardWrites(context.Background(), pc, timeout, nil, "", "")
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
	g.Arm()
	start := time.Now()
	if err := chunk(pc); err != nil {
		t.Fatalf("coalesced write to a slow, steady reader failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("the slow reader took %s, want > 2 × the timeout (the test would show nothing)", d)
	}
	g.Done(nil)
	if w := pc.Written(); w != records*progressChunk {
		t.Errorf("counted %d bytes written, want %d", w, records*progressChunk)
	}
	server.CloseWrite()
	if n := <-read; n != records*progressChunk {
		t.Errorf("the client read %d bytes, want %d", n, records*progressChunk)
	}
	if n := CoalesceInUse(); n != inUse {
		t.Errorf("coalescing buffers in use %d after the write, want %d", n, inUse)
	}

	server, client = tcpPair(t)
	pc = NewProgress(server, true)
	g = GuardWrites(context.Background(), pc, timeout, nil, "", "")
	go func() {
		buf := make([]byte, readSize)
		for range 2 { // then it stops reading
			if _, err := io.ReadFull(client, buf); err != nil {
				return
			}
		}
	}()
	g.Arm()
	start = time.Now()
	err := chunk(pc)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("coalesced write to a client that stopped reading = %v, want the deadline", err)
	}
	if d := time.Since(start); d > 3*timeout {
		t.Errorf("a stalled client held the write %s, want about the timeout (%s)", d, timeout)
	}
	g.Done(nil)
	_ = server.SetWriteDeadline(time.Time{})
	if _, err := pc.Write(record); err == nil {
		t.Error("a write after the failed flush succeeded, want the flush's error")
	}
	if n := CoalesceInUse(); n != inUse {
		t.Errorf("coalescing buffers in use %d after the failed write, want %d", n, inUse)
	}
}

// TestProgressConnRawWrite: on a socket, writes outside a hold go out as
// they come and arrive whole and in order; a connection that does not
// coalesce never buffers.
func TestProgressConnRawWrite(t *testing.T) {
	for _, coalesce := range []bool{false, true} {
		server, client := tcpPair(t)
		pc := NewProgress(server, coalesce)
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

// abortLog records what an Aborter is told.
type abortLog struct {
	mu  sync.Mutex
	got []string
}

func (a *abortLog) Aborted(reason AbortReason, stream, client string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, fmt.Sprintf("%d %s %s", reason, stream, client))
}

func (a *abortLog) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.got, "; ")
}

// TestWriteGuardReportsAborts: a write that fails because its request's
// context ended is reported once as AbortRequestTimeout at once (the
// deadline moved into the past); a write to a client that reads nothing
// for the write timeout as AbortStalled; a stream that ended without
// error is not reported.
func TestWriteGuardReportsAborts(t *testing.T) {
	const timeout = 200 * time.Millisecond
	var log abortLog
	server, client := net.Pipe()
	t.Cleanup(func() { server.Close(); client.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	g := GuardWrites(ctx, server, time.Hour, &log, "list", "alice")
	g.Arm()
	cancel()
	start := time.Now()
	_, err := server.Write(make([]byte, 1024))
	if !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("write after the request's end = %v after %s, want the deadline at once", err, time.Since(start))
	}
	g.Done(err)
	g.Done(nil) // nothing more: the guard is done

	server2, client2 := net.Pipe()
	t.Cleanup(func() { server2.Close(); client2.Close() })
	g = GuardWrites(context.Background(), server2, timeout, &log, "watch", "bob")
	g.Arm()
	_, err = server2.Write(make([]byte, 1024))
	g.Done(err)
	g = GuardWrites(context.Background(), server2, timeout, &log, "watch", "carol")
	g.Done(nil)
	if got, want := log.String(), "1 list alice; 0 watch bob"; got != want {
		t.Errorf("reported %q, want %q", got, want)
	}
}

// TestHeldBodyReleasesOnce: a HeldBody writes its bytes, and Close (any
// number of times, with or without the write's error) releases once and
// puts the buffer back once; a write that ran out of its deadline is
// reported as a stalled "body", another error is not.
func TestHeldBodyReleasesOnce(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{{nil, ""}, {io.ErrClosedPipe, ""}, {os.ErrDeadlineExceeded, "0 body dave"}} {
		var log abortLog
		releases, puts := 0, 0
		buf := []byte("0123456789")
		h := NewHeldBody(&buf, func(*[]byte) { puts++ }, func() { releases++ }, &log, "dave")
		var out bytes.Buffer
		if n, err := h.WriteTo(&out); n != 10 || err != nil || out.String() != "0123456789" {
			t.Fatalf("WriteTo = %d, %v (%q), want the 10 bytes", n, err, out.String())
		}
		if n, err := h.Read(make([]byte, 4)); n != 0 || err != io.EOF {
			t.Errorf("Read after the body = %d, %v, want EOF", n, err)
		}
		if tc.err == nil {
			_ = h.Close()
		} else {
			_ = h.CloseWithError(tc.err)
		}
		_ = h.Close()
		if releases != 1 || puts != 1 || log.String() != tc.want {
			t.Errorf("close with %v: %d releases, %d puts, reported %q; want 1, 1, %q", tc.err, releases, puts, log.String(), tc.want)
		}
	}
}
