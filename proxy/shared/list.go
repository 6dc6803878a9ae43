package shared

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/klauspost/compress/gzip"

	"github.com/lazyapi/lazyapi/proxy/conn"
)

// ErrEnded ends a member whose read stopped before the member had every
// part (a read failed, its answer is a Status, or the server shuts down),
// and the reader of a read no member is left in.
var ErrEnded = errors.New("shared scan ended")

// ListChunk is a chunk of a shared LIST's response body.
type ListChunk struct {
	Chunk
	Raw int // the body's bytes Data carries (compressed: before compression)
}

// List is an ordered read of one response body, a shared LIST: every
// member answers with the same Status A before the first byte (Answer),
// or with the body, whole (Inline: one chunk, sent with a Content-Length)
// or streamed (Stream), compressed (Gzip) when the members accept gzip
// and the body is larger than conn.GzipThreshold, as an unshared LIST's
// response would be. The read's own goroutine publishes it; members learn
// which once Ready is closed.
type List[A any] struct {
	Read[*ListChunk]
	accepts bool         // the members accept gzip
	bufs    conn.Buffers // a compressed stream's buffers
	ready   chan struct{}
	answer  A
	// answered: the members answer with answer. inline: the whole body
	// is chunk 0. gzip: the chunks are the body compressed.
	answered, inline, gzip bool
	started                bool // ready is closed (the read's goroutine only)
}

// StartList prepares l, the List of g, and registers g as the read of
// key as Start does, ordered and with no overhead per chunk; accepts says
// the members accept gzip, bufs are the buffers a compressed stream
// collects and compresses into (bufs.Size: the compressed bytes of a
// chunk).
func StartList[K comparable, G comparable, A any](r *Reads[K, G], l *List[A], key K, g G, limit int64, base context.Context, accepts bool, bufs conn.Buffers) {
	Start(r, &l.Read, key, g, true, limit, 0, base)
	l.accepts, l.bufs, l.ready = accepts, bufs, make(chan struct{})
}

// Ready is closed once the members' responses may start: Answered,
// Inline and Gzip are then set.
func (l *List[A]) Ready() <-chan struct{} { return l.ready }

// Answered returns the Status every member answers with, if any.
func (l *List[A]) Answered() (A, bool) { return l.answer, l.answered }

// Inline reports whether the body is one chunk, sent whole.
func (l *List[A]) Inline() bool { return l.inline }

// Gzip reports whether the chunks are the body compressed.
func (l *List[A]) Gzip() bool { return l.gzip }

// Started reports whether Ready is closed (the read's goroutine only).
func (l *List[A]) Started() bool { return l.started }

// publish adds a chunk (data, carrying raw bytes of the body) to the
// window once there is room; false when no member is left.
func (l *List[A]) publish(data []byte, raw int) bool {
	if !l.waitRoom() {
		return false
	}
	l.Lock()
	ok := l.pushLocked(&ListChunk{Chunk: Chunk{Data: data}, Raw: raw}, true)
	l.Unlock()
	if ok {
		l.chunks.Inc()
	}
	return ok
}

// open starts the members' responses (ready).
func (l *List[A]) open() {
	l.started = true
	close(l.ready)
}

// Answer makes a every member's answer, before the first byte.
func (l *List[A]) Answer(a A) {
	l.answer, l.answered = a, true
	l.End(ErrEnded)
	l.open()
}

// PublishWhole answers with b, the whole body, in one chunk: compressed
// when the members accept gzip and b is larger than conn.GzipThreshold.
func (l *List[A]) PublishWhole(b []byte) {
	raw := len(b)
	if l.accepts && len(b) > conn.GzipThreshold {
		var zb []byte
		conn.GzipWhole((*conn.AppendWriter)(&zb), b)
		b, l.gzip = zb, true
	}
	l.inline = true
	l.open()
	if !l.publish(b, raw) {
		l.End(ErrEnded)
		return
	}
	l.End(nil)
}

// Stream returns the writer of a streamed body: each write is a chunk;
// when the members accept gzip, the body is collected until it is larger
// than conn.GzipThreshold, then compressed once for all (gzipChunks). The
// response starts at once, or for gzip when the collected body passes the
// threshold. End it with End; Abort frees it after a panic.
func (l *List[A]) Stream() *ListStream[A] {
	s := &ListStream[A]{l: l}
	if l.accepts {
		s.gz = &gzipChunks{publish: l.publish, collected: l.bufs.Get(), bufs: l.bufs, open: func() {
			l.gzip = true
			l.open()
		}}
		return s
	}
	l.open()
	return s
}

// ListStream is the writer of a List's streamed body (Stream). Used by
// the read's goroutine only.
type ListStream[A any] struct {
	l  *List[A]
	gz *gzipChunks // nil: uncompressed
}

func (s *ListStream[A]) Write(p []byte) (int, error) {
	if s.gz != nil {
		return s.gz.Write(p)
	}
	if !s.l.publish(append([]byte(nil), p...), len(p)) {
		return 0, ErrEnded
	}
	return len(p), nil
}

// End ends the body after its writer returned err. started is false when
// the response has not started (a compressible body that ended at or
// below conn.GzipThreshold): then, err nil, it is published whole and
// uncompressed; err not nil, the caller answers err (Answer). Else the
// read ends with err or the compressor's, returned.
func (s *ListStream[A]) End(err error) (started bool, _ error) {
	if s.gz != nil && !s.gz.large {
		if err != nil {
			return false, err
		}
		s.l.PublishWhole(append([]byte(nil), *s.gz.collected...))
		return false, nil
	}
	if s.gz != nil {
		if cerr := s.gz.close(err != nil); err == nil {
			err = cerr
		}
	}
	s.l.End(err)
	return true, err
}

// Abort frees the compressor and buffers (after a panic; nothing after
// End).
func (s *ListStream[A]) Abort() {
	if s.gz != nil {
		_ = s.gz.close(true)
	}
}

// gzipChunks is the writer of a compressed shared body (the decision
// conn.ServeGzipStream makes for one response, made once for the read):
// it collects the body until it is larger than conn.GzipThreshold, then
// opens the response compressed (open) and publishes the compressed
// stream: the collected bytes flushed as the first chunk (the headers and
// first bytes go out now, as unshared), then a chunk each time about
// bufs.Size compressed bytes are out. close ends the stream; a body that
// ended before the threshold is left in collected (large false) to be
// sent whole and uncompressed.
type gzipChunks struct {
	publish   func(data []byte, raw int) bool
	open      func() // the response starts compressed
	bufs      conn.Buffers
	collected *[]byte
	large     bool
	z         *gzip.Writer
	out       []byte // compressed bytes not yet published
	raw       int    // body bytes written since the last chunk
}

func (w *gzipChunks) Write(p []byte) (int, error) {
	n := len(p)
	if !w.large {
		*w.collected = append(*w.collected, p...)
		if len(*w.collected) <= conn.GzipThreshold {
			return n, nil
		}
		w.large = true
		w.open()
		w.z = conn.GetGzip((*conn.AppendWriter)(&w.out))
		_, _ = w.z.Write(*w.collected) // into w.out: cannot fail
		_ = w.z.Flush()
		w.raw = len(*w.collected)
		w.bufs.Put(w.collected)
		w.collected = nil
		return n, w.flush()
	}
	_, _ = w.z.Write(p)
	w.raw += n
	if len(w.out) < w.bufs.Size {
		return n, nil
	}
	return n, w.flush()
}

// flush publishes the compressed bytes out so far as a chunk.
func (w *gzipChunks) flush() error {
	ok := w.publish(bytes.Clone(w.out), w.raw)
	w.out, w.raw = w.out[:0], 0
	if !ok {
		return ErrEnded
	}
	return nil
}

// close ends a compressed stream (its last chunk); after a failure it
// only frees the compressor.
func (w *gzipChunks) close(failed bool) error {
	if w.collected != nil {
		w.bufs.Put(w.collected)
		w.collected = nil
	}
	if w.z == nil {
		return nil
	}
	var err error
	if !failed {
		_ = w.z.Close() // into w.out: cannot fail
		err = w.flush()
	}
	conn.PutGzip(w.z)
	w.z = nil
	return err
}

var _ io.Writer = (*ListStream[int])(nil)
