package proxy

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/valyala/fasthttp"
)

// A streamed LIST's body as fasthttp writes it (listBody), and the
// writer that keeps each HTTP chunk's records together (conn.ChunkWriter).

// listBody is a streamed LIST body. fasthttp writes it by calling WriteTo
// on the connection's goroutine, so that each flush of the streamWriter
// (flushSize bytes) becomes one HTTP chunk; SetBodyStreamWriter would copy
// the body through a pipe in 4 KiB chunks, one write syscall each, which
// made a large LIST cost several times its encoding. Read (for fasthttp
// paths that read the stream) runs write through fasthttp's pipe.
type listBody struct {
	write func(w *bufio.Writer) (int, error) // writes the whole body, returns its size
	done  func(n int)                        // called once: the body is written or dropped
	pc    *conn.Progress                     // the connection's, coalescing each chunk's records; may be nil
	once  sync.Once
	ran   bool
	r     io.Reader
	err   error // the stream's failure on the Read path
}

var _ fasthttp.BodyWriterTo = (*listBody)(nil)

func (b *listBody) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the body to w, once.
func (b *listBody) WriteTo(w io.Writer) (int64, error) {
	if b.ran {
		return 0, nil
	}
	b.ran = true
	cw := conn.NewChunkWriter(w, b.pc)
	// Writes of a full buffer (len >= 512) bypass bw's buffer: one chunk
	// per streamWriter flush.
	bw := bufio.NewWriterSize(cw, 512)
	n, err := b.write(bw)
	_ = bw.Flush()
	b.once.Do(func() { b.done(n) })
	if err == nil {
		err = cw.Err()
	}
	return int64(n), err
}

func (b *listBody) Read(p []byte) (int, error) {
	if b.r == nil {
		if b.ran {
			return 0, io.EOF
		}
		b.ran = true
		b.r = fasthttp.NewStreamReader(func(w *bufio.Writer) {
			n, err := b.write(w)
			b.err = err // read by Read after the pipe's EOF
			b.once.Do(func() { b.done(n) })
		})
	}
	n, err := b.r.Read(p)
	if err == io.EOF && b.err != nil {
		// Not EOF: fasthttp then writes no terminating chunk.
		err = b.err
	}
	return n, err
}

// Close releases the request when the body was never written.
func (b *listBody) Close() error {
	var err error
	if c, ok := b.r.(io.Closer); ok {
		err = c.Close()
	}
	if !b.ran {
		b.ran = true
		b.once.Do(func() { b.done(0) })
	}
	return err
}

// errStreamAborted reports a list stream ended by a panic.
var errStreamAborted = errors.New("list stream aborted")
