package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// The window of a shared read (sharedscan.go, sharedlist.go): the chunks
// one read published, in order, that its members may still take. A
// chunk is held (counted in the read's admission) while it is in the
// window or a member writes it (a member pins the one chunk it writes).
// Which chunks leave a full window, and what happens to the members that
// did not take them, is the read's own policy (its trimLocked).

// sharedChunk is one published chunk of a shared read. A read's chunk
// type embeds it (windowChunk).
type sharedChunk struct {
	seq      int64 // order of publication in its window
	data     []byte
	readers  int  // members writing it
	inWindow bool // in the window (else held only by its readers)
}

func (c *sharedChunk) chunk() *sharedChunk { return c }

// windowChunk is a chunk type of a window: a pointer to a struct that
// embeds sharedChunk.
type windowChunk interface{ chunk() *sharedChunk }

// chunkWindow is a shared read's window and its signals. It is not safe
// for concurrent use: the read's group mutex guards it, and the methods
// ending in Locked expect it held.
type chunkWindow[C windowChunk] struct {
	chunks   []C   // oldest first
	nextSeq  int64 // the seq of the next chunk published
	held     int64 // bytes of the chunks in the window or being written
	limit    int64 // held bytes past which the window is full
	overhead int64 // bytes counted for a chunk beside its data's capacity
	total    *atomic.Int64
	changed  chan struct{} // closed and replaced: a chunk was published, or the read ended
	wake     chan struct{} // closed and replaced: a member took or wrote a chunk, joined or left
}

// newChunkWindow returns an empty window full at limit bytes, whose held
// bytes are also added to total (its reads' gauge).
func newChunkWindow[C windowChunk](limit, overhead int64, total *atomic.Int64) chunkWindow[C] {
	return chunkWindow[C]{limit: limit, overhead: overhead, total: total,
		changed: make(chan struct{}), wake: make(chan struct{})}
}

func (w *chunkWindow[C]) size(c *sharedChunk) int64 { return int64(cap(c.data)) + w.overhead }

func (w *chunkWindow[C]) addHeld(n int64) {
	w.held += n
	w.total.Add(n)
}

// pushLocked publishes c: the next seq, in the window, held.
func (w *chunkWindow[C]) pushLocked(c C) {
	b := c.chunk()
	b.seq = w.nextSeq
	w.nextSeq++
	b.inWindow = true
	w.chunks = append(w.chunks, c)
	w.addHeld(w.size(b))
}

// popLocked drops the oldest chunk from the window; a member writing it
// holds it until it releases it.
func (w *chunkWindow[C]) popLocked() {
	x := w.chunks[0]
	var none C
	w.chunks[0] = none
	w.chunks = w.chunks[1:]
	w.leftLocked(x.chunk())
}

// clearLocked drops every chunk from the window.
func (w *chunkWindow[C]) clearLocked() {
	for _, x := range w.chunks {
		w.leftLocked(x.chunk())
	}
	w.chunks = nil
}

func (w *chunkWindow[C]) leftLocked(c *sharedChunk) {
	c.inWindow = false
	if c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// releaseLocked unpins a chunk a member took (and wrote).
func (w *chunkWindow[C]) releaseLocked(c *sharedChunk) {
	c.readers--
	if !c.inWindow && c.readers == 0 {
		w.addHeld(-w.size(c))
	}
}

// roomLocked reports whether the window has room for a chunk once trim
// dropped the chunks no member waits for (trim(false)) and, when that
// leaves it full, those only lagging members wait for (trim(true)).
func (w *chunkWindow[C]) roomLocked(trim func(full bool)) bool {
	trim(false)
	if w.held < w.limit {
		return true
	}
	trim(true)
	return w.held < w.limit
}

// broadcastLocked wakes the members waiting for a chunk.
func (w *chunkWindow[C]) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// wakeLocked wakes the reader waiting for room or for members (a member
// took or wrote a chunk, joined or left). Members are not woken: hundreds
// of them would contend for the group's mutex after every write.
func (w *chunkWindow[C]) wakeLocked() {
	close(w.wake)
	w.wake = make(chan struct{})
}

// waitChangeLocked waits, mu unlocked, until a chunk is published or the
// read ends (broadcastLocked); ctx's error if ctx ends first.
func (w *chunkWindow[C]) waitChangeLocked(mu *sync.Mutex, ctx context.Context) error {
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
func (w *chunkWindow[C]) waitWakeLocked(mu *sync.Mutex, ctx context.Context, d time.Duration) bool {
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
