package shared

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Chunk is one published chunk of a shared read. A read's chunk type
// embeds it (Chunked).
type Chunk struct {
	seq      int64 // order of publication in its window
	part     int   // which part of the answer it is
	Data     []byte
	readers  int  // members writing it
	inWindow bool // in the window (else held only by its readers)
}

func (c *Chunk) chunk() *Chunk { return c }

// Chunked is a chunk type of a read: a pointer to a struct that embeds
// Chunk.
type Chunked interface{ chunk() *Chunk }

// window is a shared read's window and its signals. It is not safe for
// concurrent use: the read's mutex guards it, and the methods ending in
// Locked expect it held.
type window[C Chunked] struct {
	chunks   []C   // oldest first
	nextSeq  int64 // the seq of the next chunk published
	held     int64 // bytes of the chunks in the window or being written
	limit    int64 // held bytes past which the window is full
	overhead int64 // bytes counted for a chunk beside its data's capacity
	total    *atomic.Int64
	changed  chan struct{} // closed and replaced: a chunk was published, or the read ended
	wake     chan struct{} // closed and replaced: a member took or wrote a chunk, joined or left
}

// newWindow returns an empty window full at limit bytes, whose held
// bytes are also added to total (its reads' gauge).
func newWindow[C Chunked](limit, overhead int64, total *atomic.Int64) window[C] {
	return window[C]{limit: limit, overhead: overhead, total: total,
		changed: make(chan struct{}), wake: make(chan struct{})}
}

func (w *window[C]) size(c *Chunk) int64 { return int64(cap(c.Data)) + w.overhead }

func (w *window[C]) addHeld(n int64) {
	w.held += n
	w.total.Add(n)
}

// pushLocked publishes c: the next seq, in the window, held.
func (w *window[C]) pushLocked(c C) {
	b := c.chunk()
	b.seq = w.nextSeq
	w.nextSeq++
	b.inWindow = true
	w.chunks = append(w.chunks, c)
	w.addHeld(w.size(b))
}

// popLocked drops the oldest chunk from the window; a member writing it
// holds it until it releases it.
func (w *window[C]) popLocked() {
	x := w.chunks[0]
	var none C
	w.chunks[0] = none
	w.chunks = w.chunks[1:]
	w.leftLocked(x.chunk())
}

// clearLocked drops every chunk from the window.
func (w *window[C]) clearLocked() {
	for _, x := range w.chunks {
		w.leftLocked(x.chunk())
	}
	w.chunks = nil
}

func (w *window[C]) leftLocked(c *Chunk) {
	c.inWindow = false
	if c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// releaseLocked unpins a chunk a member took (and wrote).
func (w *window[C]) releaseLocked(c *Chunk) {
	c.readers--
	if !c.inWindow && c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// roomLocked reports whether the window has room for a chunk once trim
// dropped the chunks no member waits for (trim(false)) and, when that
// leaves it full, those only lagging members wait for (trim(true)).
func (w *window[C]) roomLocked(trim func(full bool)) bool {
	trim(false)
	if w.held < w.limit {
		return true
	}
	trim(true)
	return w.held < w.limit
}

// broadcastLocked wakes the members waiting for a chunk.
func (w *window[C]) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// wakeLocked wakes the reader waiting for room or for members (a member
// took or wrote a chunk, joined or left). Members are not woken: hundreds
// of them would contend for the read's mutex after every write.
func (w *window[C]) wakeLocked() {
	close(w.wake)
	w.wake = make(chan struct{})
}

// waitChangeLocked waits, mu unlocked, until a chunk is published or the
// read ends (broadcastLocked); ctx's error if ctx ends first.
func (w *window[C]) waitChangeLocked(mu *sync.Mutex, ctx context.Context) error {
	ch := w.changed
	mu.Unlock()
	select {
	case <-ch:
		mu.Lock()
		return nil
	case <-ctx.Done():
		mu.Lock()
		return ctx.Err()
	}
}

// waitWakeLocked waits, mu unlocked, for a wakeLocked, d or the end of
// ctx; false when ctx ended.
func (w *window[C]) waitWakeLocked(mu *sync.Mutex, ctx context.Context, d time.Duration) bool {
	ch := w.wake
	mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	mu.Lock()
	return ctx.Err() == nil
}
