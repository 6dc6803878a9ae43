package conn

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/valyala/fasthttp"
)

// Response compression, as kube-apiserver's (k8s.io/apiserver
// endpoints/handlers/responsewriters: deferredResponseWriter and
// ContentEncodingSupported, feature gate APIResponseCompression, on by
// default; --enable-response-compression here):
//
//   - only GET and LIST responses (never watches, never errors below the
//     threshold), and only when Accept-Encoding lists the token "gzip"
//     exactly (comma-separated, spaces trimmed: "gzip;q=1" is not it, as
//     there);
//   - only when the response is larger than 128 KiB. kube-apiserver
//     compares the first write with the threshold; its streamed lists
//     (JSON and protobuf since 1.33) start with a write of at most 4 bytes,
//     which makes it buffer until more than 128 KiB are written (then
//     compress) or the response ends (then send it as it is). lazyapi does
//     the same for streamed LISTs, whose size is not known up front
//     (gzipStream): the encoder writes into a buffer until it holds more
//     than 128 KiB; a list that ends below is sent uncompressed with a
//     Content-Length (and an error before that point is still a Status),
//     a larger one is compressed chunk by chunk. A GET or a list encoded
//     whole (inline) is compressed when its body is larger than 128 KiB.
//   - Content-Encoding: gzip and Vary: Accept-Encoding.
//
// The compressor is klauspost/compress's gzip at level 1 (kube-apiserver
// uses compress/gzip at level 1, "least CPU ... similar ratios"): on
// LISTs of config text it compresses about twice as fast as compress/gzip
// at level 1, to a slightly smaller size. Its state is ~810 KiB per
// response (measured: gzip.NewWriterLevel(_, 1) after a write), pooled;
// it is part of the request's admission estimate (GzipBytes).

// GzipThreshold is kube-apiserver's defaultGzipThresholdBytes: a response
// larger than this is compressed.
const GzipThreshold = 128 << 10

// GzipBytes is the memory one compressing response holds besides its
// write buffers: the compressor's state (~810 KiB), its 64 KiB output
// buffer, and the ~128 KiB of output collected before the decision.
const GzipBytes = 1 << 20

// AcceptsGzip reports whether an Accept-Encoding header asks for gzip,
// as kube-apiserver's ContentEncodingSupported reads it.
func AcceptsGzip(h []byte) bool {
	for len(h) > 0 {
		tok := h
		if i := bytes.IndexByte(h, ','); i >= 0 {
			tok, h = h[:i], h[i+1:]
		} else {
			h = nil
		}
		if string(bytes.TrimSpace(tok)) == "gzip" {
			return true
		}
	}
	return false
}

var gzipPool sync.Pool

func GetGzip(w io.Writer) *gzip.Writer {
	if v := gzipPool.Get(); v != nil {
		z := v.(*gzip.Writer)
		z.Reset(w)
		return z
	}
	z, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		panic("BUG: gzip.NewWriterLevel(BestSpeed): " + err.Error())
	}
	return z
}

func PutGzip(z *gzip.Writer) {
	z.Reset(io.Discard)
	gzipPool.Put(z)
}

func SetGzipHeaders(rc *fasthttp.RequestCtx) {
	rc.Response.Header.Set("Content-Encoding", "gzip")
	rc.Response.Header.Add("Vary", "Accept-Encoding")
}

// GzipWhole compresses b, a whole body, into w (a buffer: its writes
// cannot fail) with the pooled compressor.
func GzipWhole(w io.Writer, b []byte) {
	z := GetGzip(w)
	_, _ = z.Write(b)
	_ = z.Close()
	PutGzip(z)
}

// AppendWriter appends what is written to a byte slice.
type AppendWriter []byte

func (w *AppendWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}

// gzipStream serves a streamed LIST body that may be compressed. The
// body's writer (write, the LIST encoder and its flushes) runs on a
// goroutine of its own; its first flushes are collected until they hold
// more than GzipThreshold bytes, which decides: a body that ends before is
// answered whole and uncompressed from the handler; otherwise the response
// is compressed and the connection's goroutine (WriteTo) compresses the
// collected bytes, then each further flush, handed over without a copy
// (the writer waits until its flush is compressed). One goroutine runs at
// a time; memory is the collected bytes, one flush and the compressor.
type gzipStream struct {
	collected *[]byte       // output before the decision (a pooled buffer)
	put       func(*[]byte) // gives collected back to its pool
	large     bool          // decided: compress

	decided chan error  // the writer decided (nil) or ended below the threshold (its error)
	chunks  chan []byte // after the decision: one flush of the writer
	acks    chan error  // WriteTo's answer to each chunk
	done    chan error  // the writer's end after the decision
	gone    chan struct{}
	goneMu  sync.Once
	n       int // bytes the writer wrote (set before decided or done)
}

var errResponseGone = errors.New("response abandoned")

// Write is the writer side (the body writer's flushes).
func (g *gzipStream) Write(p []byte) (int, error) {
	if !g.large {
		*g.collected = append(*g.collected, p...)
		if len(*g.collected) > GzipThreshold {
			g.large = true
			g.decided <- nil
		}
		return len(p), nil
	}
	select {
	case g.chunks <- p:
	case <-g.gone:
		return 0, errResponseGone
	}
	select {
	case err := <-g.acks:
		if err != nil {
			return 0, err
		}
		return len(p), nil
	case <-g.gone:
		return 0, errResponseGone
	}
}

func (g *gzipStream) abandon() { g.goneMu.Do(func() { close(g.gone) }) }

// ServeGzipStream answers a streamed LIST whose request accepts gzip
// (AcceptsGzip). write writes the whole body through the bufio.Writer it
// is given and returns its size; done is called once when the response
// is complete or dropped. fail answers an error that came before any byte
// was sent. The bytes collected before the decision are in a buffer of
// bufs, and the compressed output is written in chunks of bufs.Size.
func ServeGzipStream(rc *fasthttp.RequestCtx, bufs Buffers, write func(w *bufio.Writer) (int, error),
	done func(n int), fail func(err error)) {
	g := &gzipStream{collected: bufs.Get(), put: bufs.Put, decided: make(chan error, 1), chunks: make(chan []byte),
		acks: make(chan error), done: make(chan error, 1), gone: make(chan struct{})}
	go func() {
		// Writes of a full buffer (>= 512 bytes) reach g.Write as they are.
		n, err := write(bufio.NewWriterSize(g, 512))
		g.n = n
		if !g.large {
			g.decided <- err
			return
		}
		g.done <- err
	}()
	if err := <-g.decided; !g.large {
		if err != nil {
			g.put(g.collected)
			fail(err)
			return
		}
		rc.SetBody(*g.collected)
		g.put(g.collected)
		done(g.n)
		return
	}
	SetGzipHeaders(rc)
	rc.SetBodyStream(&gzipBody{g: g, done: done, pc: ProgressOf(rc.Conn()), size: bufs.Size}, -1)
}

// gzipBody is the compressed body of a gzipStream, written by fasthttp on
// the connection's goroutine.
type gzipBody struct {
	g    *gzipStream
	done func(n int)
	pc   *Progress // the connection's, coalescing each chunk's records; may be nil
	once sync.Once
	ran  bool
	size int // bytes of compressed output per chunk
}

var _ fasthttp.BodyWriterTo = (*gzipBody)(nil)

func (b *gzipBody) SupportsBodyWriteTo() bool { return true }

// WriteTo compresses the collected bytes and every further flush into w
// (one HTTP chunk per 64 KiB of compressed bytes).
func (b *gzipBody) WriteTo(w io.Writer) (int64, error) {
	if b.ran {
		return 0, nil
	}
	b.ran = true
	g := b.g
	cw := NewChunkWriter(w, b.pc)
	bw := bufio.NewWriterSize(cw, b.size)
	z := GetGzip(bw)
	_, err := z.Write(*g.collected)
	g.put(g.collected)
	g.collected = nil
	if err == nil {
		// Send the headers and the first bytes now (time to first byte;
		// and a stream that fails later is then a 200 cut short, as an
		// uncompressed one, not a connection closed without an answer).
		if err = z.Flush(); err == nil {
			err = bw.Flush()
		}
	}
	ended := false // the writer's end was received
	for err == nil && !ended {
		select {
		case p := <-g.chunks:
			if _, err = z.Write(p); err == nil {
				err = cw.Err()
			}
			g.acks <- err
		case err = <-g.done:
			ended = true
		}
	}
	if err == nil {
		if err = z.Close(); err == nil {
			err = bw.Flush()
		}
		if err == nil {
			err = cw.Err()
		}
	}
	if !ended {
		// Free the writer if it still writes: its next flush fails.
		g.abandon()
		if werr := <-g.done; err == nil {
			err = werr
		}
	}
	PutGzip(z)
	b.once.Do(func() { b.done(g.n) })
	return 0, err
}

// Read is not used: fasthttp calls WriteTo for a BodyWriterTo.
func (b *gzipBody) Read([]byte) (int, error) {
	return 0, errors.New("BUG: gzipBody is written with WriteTo")
}

// Close releases the writer when the body was never written.
func (b *gzipBody) Close() error {
	if !b.ran {
		b.ran = true
		b.g.abandon()
		<-b.g.done
		b.once.Do(func() { b.done(b.g.n) })
	}
	return nil
}

// Buffers is the pool of write buffers ServeGzipStream collects into:
// Get returns an empty buffer, Put gives one back, Size is the bytes of
// one chunk of a stream.
type Buffers struct {
	Get  func() *[]byte
	Put  func(*[]byte)
	Size int
}

// ChunkWriter keeps the first write error. Each Write is one HTTP chunk
// (fasthttp's chunkedBodyWriter writes its size line, the bytes and the CRLF
// in three writes to the TLS connection, each one record or more): on a
// connection that coalesces (pc, under TLS) the chunk's records reach the
// socket in one write.
type ChunkWriter struct {
	w   io.Writer
	pc  *Progress // nil: no coalescing
	err error
}

// NewChunkWriter writes to w, coalescing each write's records on pc
// (ProgressOf the connection; nil for none).
func NewChunkWriter(w io.Writer, pc *Progress) *ChunkWriter {
	return &ChunkWriter{w: w, pc: pc}
}

// Err is the first write error.
func (w *ChunkWriter) Err() error { return w.err }

func (w *ChunkWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.pc.Hold()
	n, err := w.w.Write(p)
	if rerr := w.pc.Release(); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		w.err = err
	}
	return n, err
}
