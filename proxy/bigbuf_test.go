//go:build !race

// Not under the race detector: its sync.Pool drops a quarter of the
// buffers put back (to expose misuse), so reuse cannot be counted. CI
// runs this file without -race (.ci/run).

package proxy

import (
	"bufio"
	"io"
	"runtime"
	"testing"
)

// TestWatchWriterReusesLargeFrames: a watch writing 1 MiB frames (a
// Secret's event) takes its buffer from the large-buffer pools and gives
// it back at the flush, instead of growing a new buffer per event (16
// watchers of 100 such Secrets allocated 1.6 GB and the heap grew to 6
// times its live size, bench/RESULTS.md ## storm: large objects).
func TestWatchWriterReusesLargeFrames(t *testing.T) {
	sw := &watchWriter{w: bufio.NewWriterSize(io.Discard, 512)}
	value := make([]byte, 1<<20)
	frame := func() {
		sw.batch(frameBytes(len(value)))
		before := cap(sw.buf)
		sw.buf = append(sw.buf, value...)
		if cap(sw.buf) != before {
			t.Fatalf("the frame grew its buffer (%d -> %d bytes): batch reserved too little", before, cap(sw.buf))
		}
		if err := sw.flush(); err != nil {
			t.Fatal(err)
		}
		// An idle watch holds no buffer (issue 26).
		if sw.big != nil || sw.pooled != nil || sw.small != nil || cap(sw.buf) != 0 {
			t.Fatalf("after the flush: big %v, pooled %v, small %v, buffer cap %d; want no buffer held", sw.big != nil, sw.pooled != nil, sw.small != nil, cap(sw.buf))
		}
	}
	frame() // the pool's first buffer
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 50
	for range n {
		frame()
	}
	runtime.ReadMemStats(&after)
	// A GC during the loop may empty the pool: allow a few buffers.
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("%d frames of 1 MiB allocated %d MiB, want their buffer reused (< 8 MiB)", n, got>>20)
	}
	// Small frames after a large one still use the small buffers.
	sw.batch(100)
	sw.buf = append(sw.buf, value[:100]...)
	if sw.big != nil || sw.pooled != nil || cap(sw.buf) != watchIdleBuf {
		t.Errorf("a 100-byte frame: big %v, pooled %v, buffer cap %d; want a small pooled %d-byte buffer", sw.big != nil, sw.pooled != nil, cap(sw.buf), watchIdleBuf)
	}
}

// TestBigBufClasses: getBigBuf returns at least n bytes, putBigBuf files a
// buffer under the class its capacity fills.
func TestBigBufClasses(t *testing.T) {
	for _, n := range []int{1, 300 << 10, 1 << 20, 1<<20 + 1, 32 << 20, 33 << 20} {
		b := getBigBuf(n)
		if cap(*b) < n || len(*b) != 0 {
			t.Errorf("getBigBuf(%d): len %d cap %d", n, len(*b), cap(*b))
		}
		putBigBuf(b)
	}
	odd := make([]byte, 10, 3<<20) // class 2 MiB
	putBigBuf(&odd)
	if b := getBigBuf(2 << 20); cap(*b) < 2<<20 || len(*b) != 0 {
		t.Errorf("getBigBuf(2 MiB) after putting a 3 MiB buffer: len %d cap %d", len(*b), cap(*b))
	}
}
