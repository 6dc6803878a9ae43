package proxy

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/resource"
)

// Shared watch frames.
//
// The watchers of a resource read the same events (from the watch cache's
// history, or from their etcd watches when the resource is served from
// etcd), and most of them write the same bytes for an event: same framing, same event type
// after their selector, same object at the same resourceVersion. The JSON
// transcode of one event costs far more than copying its frame, so
// frameCache encodes such a frame once and every watcher that would write
// it copies the bytes (kube-apiserver's cacher does the same with its
// per-serializer cachingObject).
//
// Why a small cache here rather than an encoding attached to the history
// event (charged to the watch cache's budget): the cache package holds
// stored bytes and knows no output formats; a history event stays until
// --watch-cache-sizes newer events push it out, long after the watchers
// that keep up have read it, and may be wanted in several framings, so
// encodings attached to it would multiply the history's memory, and the
// budget (charged by the resource's own goroutine) would have to be charged
// from every watcher's. Watchers that keep up read an event within moments
// of each other, so a FIFO of the most recent frames, bounded in bytes for
// all resources together (frameCacheBytes), gets the hits with a small,
// fixed footprint. A watcher far behind (Backlog >= frameShareBacklog: it
// replays a long history) takes a frame that is there but encodes a
// missing one itself without keeping it, so a long replay cannot flush the
// frames the live watchers share. The threshold is high on purpose: after
// a burst of writes (a rollout) every watcher is behind by the burst, and
// the herd reads the same events moments apart; if none of them kept its
// frames, each would encode every event, the costliest case. A watcher
// replaying up to frameShareBacklog events evicts older frames, which the
// live watchers (reading near the newest event) have already written.
// Initial events are always encoded by their watcher.
//
// Which frames are shared: the key is (resource, etcd key, revision, event
// type, output). For one etcd key and revision the stored value is fixed
// (ADDED and MODIFIED carry the value written at that revision, DELETED
// the last value before the deletion at that revision), so the key
// determines the bytes. Frames that depend on more than the key are never
// shared: Table rows (their age column reads the clock, and a watch's first
// row carries the column definitions). Protobuf passthrough frames are not
// shared either: encoding one is a copy of the stored bytes, as cheap as
// copying a shared frame.

const (
	// frameCacheBytes bounds the frames kept for sharing (all resources).
	frameCacheBytes = 4 << 20
	// frameShareBacklog: a watcher this many events or more behind the
	// newest does not add the frames it encodes to the cache (above the
	// default history of 1,000 events: only replays of longer
	// --watch-cache-sizes histories are that far behind).
	frameShareBacklog = 4096
	// frameOverhead approximates a kept frame's cost besides its bytes and
	// key: the frame struct, its channel, its map entry and FIFO slot.
	frameOverhead = 200
)

// frameKey identifies the bytes of one watch event frame.
type frameKey struct {
	r   *resource.Resource
	out encoding.Output
	t   codec.EventType
	rev int64
	key string
}

// frame is one shared encoding. b, ok and size are written once, before
// ready is closed; b is empty when the event could not be encoded (the
// encoder logged it and every watcher skips it, as each would have); ok is
// false when the encoder panicked (then each watcher encodes for itself).
type frame struct {
	k     frameKey
	ready chan struct{}
	b     []byte
	ok    bool
	size  int64 // charged to frameCache.bytes; 0 until ready
	gone  bool  // evicted (guarded by frameCache.mu)
}

// frameCache holds the most recent shared watch frames, at most maxBytes
// of them (frames being encoded are not counted until they are done). It
// is safe for concurrent use.
type frameCache struct {
	maxBytes atomic.Int64 // 0: nothing is shared

	mu    sync.Mutex
	m     map[frameKey]*frame // guarded by mu
	fifo  []*frame            // guarded by mu: insertion order, fifo[head:] are in m
	head  int                 // guarded by mu
	bytes int64               // guarded by mu

	shared, encoded, private *metrics.Counter
}

func newFrameCache(ms *metrics.Set, maxBytes int64) *frameCache {
	c := &frameCache{m: make(map[frameKey]*frame)}
	c.maxBytes.Store(maxBytes)
	ms.GetOrCreateGauge("lazyapi_watch_frame_cache_bytes", func() float64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return float64(c.bytes)
	})
	c.shared = ms.GetOrCreateCounter(`lazyapi_watch_frames_total{result="shared"}`)
	c.encoded = ms.GetOrCreateCounter(`lazyapi_watch_frames_total{result="encoded"}`)
	c.private = ms.GetOrCreateCounter(`lazyapi_watch_frames_total{result="private"}`)
	return c
}

// appendEvent appends the frame of a change event (type t of the object
// value stored at key, sent at resourceVersion rev) to dst: a copy of the
// shared frame when another watcher encoded it, else encoded by e, and kept
// for the others unless backlog (how many newer events the watcher has
// pending) is frameShareBacklog or more. backlog < 0 means "do not share"
// (initial events).
func (c *frameCache) appendEvent(dst []byte, e *watchEncoder, t codec.EventType, key string, value, plain []byte, rev int64, backlog int) []byte {
	if backlog < 0 || !e.enc.Shareable() || c.maxBytes.Load() <= 0 || e.s.keepsNoPlaintext(value) {
		return e.event(dst, t, key, value, plain, rev)
	}
	k := frameKey{r: e.r, out: e.enc.Output(), t: t, rev: rev, key: key}
	c.mu.Lock()
	if f := c.m[k]; f != nil {
		c.mu.Unlock()
		<-f.ready
		if !f.ok {
			c.private.Inc()
			return e.event(dst, t, key, value, plain, rev)
		}
		c.shared.Inc()
		return append(dst, f.b...)
	}
	if backlog >= frameShareBacklog {
		c.mu.Unlock()
		c.private.Inc()
		return e.event(dst, t, key, value, plain, rev)
	}
	// key may borrow the watch cache's entry: a kept key must not pin it.
	k.key = strings.Clone(k.key)
	f := &frame{k: k, ready: make(chan struct{})}
	c.m[k] = f
	c.fifo = append(c.fifo, f)
	c.mu.Unlock()
	c.encoded.Inc()
	return c.encode(f, dst, e, value, plain)
}

// encode appends f's frame, encoded from value, to dst, publishes a copy in
// f and charges it. f.ready is closed also when the encoder panics, so that
// the watchers waiting on f go on (each encoding the event itself).
func (c *frameCache) encode(f *frame, dst []byte, e *watchEncoder, value, plain []byte) []byte {
	defer close(f.ready)
	start := len(dst)
	dst = e.event(dst, f.k.t, f.k.key, value, plain, f.k.rev)
	if e.failed {
		return dst // not shared (f.ok false): every watcher meets the failure itself
	}
	f.b = append([]byte(nil), dst[start:]...)
	f.ok = true
	c.mu.Lock()
	if !f.gone {
		f.size = int64(cap(f.b)+len(f.k.key)) + frameOverhead
		c.bytes += f.size
		c.evictLocked()
	}
	c.mu.Unlock()
	return dst
}

// evictLocked drops the oldest frames until the cache fits maxBytes. c.mu
// must be held.
func (c *frameCache) evictLocked() {
	for (c.bytes > c.maxBytes.Load() || c.maxBytes.Load() <= 0) && c.head < len(c.fifo) {
		f := c.fifo[c.head]
		c.fifo[c.head] = nil
		c.head++
		f.gone = true
		c.bytes -= f.size
		if c.m[f.k] == f {
			delete(c.m, f.k)
		}
	}
	if c.head > 64 && c.head > len(c.fifo)/2 {
		n := copy(c.fifo, c.fifo[c.head:])
		clear(c.fifo[n:])
		c.fifo, c.head = c.fifo[:n], 0
	}
}

// setMaxBytes changes the bound (0 stops sharing) and evicts what no
// longer fits.
func (c *frameCache) setMaxBytes(n int64) {
	c.maxBytes.Store(n)
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
}
