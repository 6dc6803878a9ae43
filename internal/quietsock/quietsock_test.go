package quietsock_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/quietsock"
	"github.com/lazyapi/lazyapi/internal/testing/loopback"
)

// tcpPair returns the two ends of a loopback TCP connection, the first
// wrapped.
func tcpPair(t *testing.T) (wrapped, peer net.Conn) {
	t.Helper()
	c, p := loopback.TCPPair(t)
	w := quietsock.Wrap(c)
	t.Cleanup(func() { w.Close() })
	return w, p
}

// TestWrapReads: what the peer writes is read whole and in order, in
// reads of at most MaxQuiet bytes, then io.EOF; the wrapped connection
// writes as before.
func TestWrapReads(t *testing.T) {
	w, p := tcpPair(t)
	if runtime.GOOS == "linux" {
		if _, ok := w.(*net.TCPConn); ok {
			t.Fatal("Wrap returned the TCP connection itself on Linux")
		}
	}
	want := make([]byte, 1<<20+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+len(rest)%70000)
			if _, err := p.Write(rest[:n]); err != nil {
				return
			}
			rest = rest[n:]
		}
		p.(*net.TCPConn).CloseWrite()
	}()
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := w.Read(buf)
		if runtime.GOOS == "linux" && n > quietsock.MaxQuiet {
			t.Fatalf("read %d bytes at once, more than MaxQuiet", n)
		}
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
	if _, err := w.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(p, b); err != nil || string(b) != "back" {
		t.Fatalf("peer read %q, %v", b, err)
	}
}

// TestWrapReadDeadlineAndClose: a read waiting for bytes ends at its
// deadline (a timeout, as net's) and when the connection is closed (net.ErrClosed).
func TestWrapReadDeadlineAndClose(t *testing.T) {
	w, _ := tcpPair(t)
	w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := w.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	w.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := w.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	w.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read of a closed connection: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read not ended by Close")
	}
}

// TestWrapOther: a connection that is not TCP is returned as it is.
func TestWrapOther(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if quietsock.Wrap(a) != a {
		t.Fatal("Wrap changed a pipe")
	}
}

// TestWrapReadAllocs: a quiet read allocates nothing, as a read of the
// TCP connection itself does not.
func TestWrapReadAllocs(t *testing.T) {
	w, p := tcpPair(t)
	msg := []byte("event")
	buf := make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(w, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations a write and read, want 0", allocs)
	}
}
