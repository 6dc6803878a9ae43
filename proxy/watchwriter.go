package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
	"go.uber.org/zap"
)

// watchWriter is the write side of a watch stream. It holds no buffer
// while idle: frames are appended to a small pooled buffer (take,
// watchIdleBuf), or, while a batch of events is pending, to a pooled
// flushSize buffer (batch), all given back at the next flush. An idle
// watch used to keep its own 2 KiB buffer (bench/RESULTS.md ## idle
// watch cost).
type watchWriter struct {
	guard *conn.WriteGuard // write deadlines, on the connection (never rc, which may be recycled)
	w     *bufio.Writer
	buf   []byte
	m     watchMetrics
	small *[]byte // the small pooled buffer taken (take), or nil
	// yield, for a watch with initial events, pauses after a flush of
	// initial events while short requests are in flight (like a bulk
	// LIST: a reconnect storm's initial events must not starve GETs).
	yield  func()
	pooled *[]byte // the pooled buffer buf is, or nil
	big    *[]byte // the large pooled buffer buf is (getBigBuf), or nil

	// ticket is the watch's admission (nil without a limiter), of base
	// bytes (watchIdleBytes, plus the initial phase's reservation while
	// initial) plus charged: the pooled buffer holding the frames queued
	// for the watch, charged when it is taken and given back when its
	// frames are written (flush). During the initial phase the initial
	// reservation covers the buffers.
	//
	// A watch served from etcd charges fed too, the bytes of etcd's
	// events queued for it (etcdFeed, chargeFed), from the feed's
	// goroutine: mu guards the ticket, base, charged and fed.
	ticket  *ratelimit.Ticket
	idle    int64 // watchReq.idleB
	mu      sync.Mutex
	base    int64
	charged int64
	fed     int64
	initial bool
}

// charge sets the bytes of queued frames the watch holds beside base.
func (sw *watchWriter) charge(n int64) {
	if sw.ticket == nil || sw.initial {
		return
	}
	sw.mu.Lock()
	if n != sw.charged {
		sw.charged = n
		sw.ticket.Resize(sw.base + n + sw.fed)
	}
	sw.mu.Unlock()
}

// chargeFed sets the bytes of etcd's events queued for the watch
// (etcdFeed) beside base and its frames. Unlike the frames, which are
// recorded once held, they are asked for before they are held: the
// reservation grows only as a new watch of the client would be admitted
// (ratelimit.Ticket.Grow), and chargeFed reports whether it did (else the
// feed ends the watch as lagging); less always succeeds.
func (sw *watchWriter) chargeFed(n int64) bool {
	if sw.ticket == nil {
		return true
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if n == sw.fed {
		return true
	}
	if !sw.ticket.Grow(sw.base + sw.charged + n) {
		return false
	}
	sw.fed = n
	return true
}

// endInitial gives back the initial phase's reservation once its events
// are written: the watch keeps watchIdleBytes and its queued frames.
func (sw *watchWriter) endInitial() {
	if !sw.initial {
		return
	}
	sw.initial = false
	if sw.ticket == nil {
		return
	}
	sw.mu.Lock()
	sw.base, sw.charged = sw.idle, sw.borrowed()
	sw.ticket.Resize(sw.base + sw.charged + sw.fed)
	sw.mu.Unlock()
}

// borrowed is the capacity of the pooled buffer buf is, or 0 for the
// small buffer (part of watchIdleBytes).
func (sw *watchWriter) borrowed() int64 {
	if sw.pooled != nil || sw.big != nil {
		return int64(cap(sw.buf))
	}
	return 0
}

// batch is called before a frame of about n bytes is appended: when
// frames are pending already, buf moves to a pooled buffer, so that a watch
// that fell behind does not regrow its small buffer (garbage on every burst
// of every watcher); a frame too large for it moves buf to a pooled large
// buffer (getBigBuf), returned at the next flush, so that large objects'
// frames reuse buffers rather than allocate one per event and watcher.
func (sw *watchWriter) batch(n int) {
	sw.take()
	need := len(sw.buf) + n
	switch {
	case need <= cap(sw.buf):
		return
	case need <= bufPoolCap:
		if sw.pooled == nil && sw.big == nil {
			// The small buffer: a flushSize one (grown by append up
			// to what putBuf keeps) for the batch.
			sw.pooled = getBuf()
			sw.buf = append((*sw.pooled)[:0], sw.buf...)
		}
		// The frame may grow the pooled buffer by append, up to
		// bufPoolCap.
		sw.charge(max(sw.borrowed(), int64(need)))
		return
	}
	b := getBigBuf(need)
	*b = append(*b, sw.buf...)
	switch {
	case sw.big != nil:
		*sw.big = sw.buf
		putBigBuf(sw.big)
	case sw.pooled != nil:
		*sw.pooled = sw.buf
		putBuf(sw.pooled)
		sw.pooled = nil
	}
	sw.big, sw.buf = b, *b
	sw.charge(int64(cap(sw.buf)))
}

// frameBytes estimates the frame of an event whose stored value is n
// bytes: JSON of a protobuf value is up to about 4/3 of it (base64 of
// bytes fields) plus field names and the event's framing.
func frameBytes(n int) int { return n + n/2 + 512 }

// smallBufs pools the small buffers watches append their frames to
// between flushes (take).
var smallBufs = sync.Pool{New: func() any { b := make([]byte, 0, watchIdleBuf); return &b }}

// take gives the watch a small pooled buffer to append frames to, when it
// holds none.
func (sw *watchWriter) take() {
	if sw.buf == nil {
		sw.small = smallBufs.Get().(*[]byte)
		sw.buf = (*sw.small)[:0]
	}
}

// giveBack returns the buffers buf is or was (the small one, a pooled or
// large one) to their pools: the watch holds none until its next frame.
func (sw *watchWriter) giveBack() {
	switch {
	case sw.big != nil:
		*sw.big = sw.buf
		putBigBuf(sw.big)
	case sw.pooled != nil:
		*sw.pooled = sw.buf
		putBuf(sw.pooled)
	}
	if sw.small != nil {
		*sw.small = (*sw.small)[:0]
		smallBufs.Put(sw.small)
	}
	sw.big, sw.pooled, sw.small, sw.buf = nil, nil, nil, nil
}

// flush writes buf to the client under a write deadline and gives the
// buffers back.
func (sw *watchWriter) flush() error {
	if len(sw.buf) == 0 {
		sw.giveBack()
		return nil
	}
	sw.guard.Arm()
	_, err := sw.w.Write(sw.buf)
	sw.giveBack()
	sw.charge(0)
	if err == nil {
		err = sw.w.Flush()
	}
	if err != nil {
		return fmt.Errorf("cannot write watch events: %w", err)
	}
	return nil
}

// watchEncoder writes the events of one watch with its encoder.
type watchEncoder struct {
	s   *Server
	r   *resource.Resource
	enc encoding.Encoder
	// For decryption (decrypt.go): the watch's context, the resource's
	// "resource[.group]", whether events come from the watch cache; failed
	// is set when a value did not decrypt: the ERROR event went out and
	// the watch ends.
	ctx    context.Context
	gr     string
	cached bool
	failed bool
}

// event appends one ADDED/MODIFIED/DELETED frame for a stored value. A value
// that cannot be decoded is skipped (logged and counted). plain, when not
// nil, is value's plaintext (decrypted already, to evaluate a filter).
func (e *watchEncoder) event(dst []byte, t codec.EventType, key string, value, plain []byte, rv int64) []byte {
	if plain == nil {
		var err error
		plain, err = e.s.plaintext(e.ctx, e.gr, bytesutil.ToUnsafeBytes(key), value, e.cached)
		if err != nil {
			// kube-apiserver's etcd watcher: an ERROR event, then the end.
			e.failed = true
			e.s.log.Error("cannot decrypt watch event; ending the watch", zap.Error(err))
			se, _ := decryptStatus(err)
			return e.enc.WatchStatus(dst, &se.Status)
		}
	}
	obj, err := codec.Unwrap(plain)
	if err == nil {
		obj = typeMeta(e.r, obj)
	}
	if err == nil {
		start := len(dst)
		if dst, err = e.s.watchEvent(e.enc, dst, bytesutil.ToUnsafeBytes(key), value, t, obj, rv); err != nil {
			dst = dst[:start]
		}
	}
	if err != nil {
		e.s.decodeErrs.Inc()
		e.s.log.Error("cannot encode watch event; skipped", zap.String("key", key), zap.Error(err))
	}
	return dst
}

func codecType(t cache.EventType) codec.EventType {
	switch t {
	case cache.Added:
		return codec.EventAdded
	case cache.Modified:
		return codec.EventModified
	case cache.Deleted:
		return codec.EventDeleted
	}
	return codec.EventBookmark
}

// fromCache streams a cache watcher's events until it ends. It flushes when
// no event is ready (Next would wait); Watcher.More says true for the whole
// initial phase, so the non-blocking Next(doneCtx) decides.
func (e *watchEncoder) fromCache(ctx context.Context, sw *watchWriter, w *cache.Watcher) error {
	defer w.Close()
	e.cached = true
	// Initial events are encoded holding a slot of Server.initialRun
	// (never while writing: a client that does not read must not hold
	// it).
	gate, held := e.s.initialRun, false
	release := func() {
		if held {
			<-gate
			held = false
		}
	}
	defer release()
	for {
		ev, err := w.Next(doneCtx)
		if errors.Is(err, context.Canceled) && ctx.Err() == nil {
			release()
			if err := sw.flush(); err != nil {
				return err
			}
			if w.InitialDone() {
				sw.endInitial()
			}
			ev, err = w.Next(ctx)
		}
		if err != nil {
			if errors.Is(err, cache.ErrLagging) {
				sw.m.lagging.Inc()
			}
			return err
		}
		if ev.Initial && !held && gate != nil && sw.yield != nil {
			select {
			case gate <- struct{}{}:
				held = true
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if ev.Type == cache.Bookmark {
			if !ev.InitialEventsEnd && !e.enc.Bookmarks() {
				continue
			}
			sw.take()
			sw.buf = e.enc.WatchBookmark(sw.buf, ev.Rev, ev.InitialEventsEnd)
		} else {
			sw.batch(frameBytes(len(ev.Value)))
			backlog := ev.Backlog
			if ev.Initial {
				backlog = -1
			}
			sw.buf = e.s.frames.appendEvent(sw.buf, e, codecType(ev.Type), ev.Key, ev.Value, nil, ev.Rev, backlog)
			if e.failed {
				return nil
			}
		}
		sw.m.events.Inc()
		if !ev.Initial {
			release()
		}
		if len(sw.buf) >= flushSize {
			release()
			if err := sw.flush(); err != nil {
				return err
			}
			if w.InitialDone() {
				sw.endInitial()
			}
			if ev.Initial && sw.yield != nil {
				sw.yield()
			}
		}
	}
}
