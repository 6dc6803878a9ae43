package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/store"
)

// A prepared LIST's answer (list.go): whole, with a Content-Length (the
// size pass's encoding, or the first page encoded inline), or streamed
// item by item (listStream, written by write). A shared LIST's group
// (sharedlist.go) runs the same phases into its chunks.

// listDelivery is how a prepared LIST sends its answer.
type listDelivery uint8

const (
	// deliverEncoded: the size pass's encoding is the whole answer.
	deliverEncoded listDelivery = iota
	// deliverInline: the first page is the whole, small answer, encoded
	// whole before the first byte.
	deliverInline
	// deliverStreamed: written item by item (listStream).
	deliverStreamed
)

// delivery returns how the prepared list sends its answer: whole, with a
// Content-Length, or streamed.
func (l *lister) delivery() listDelivery {
	switch {
	case l.pre != nil && !l.ws.partial:
		return deliverEncoded
	case l.firstComplete && l.pageBytes <= inlineBytes:
		return deliverInline
	}
	return deliverStreamed
}

// respond writes the 200 as delivery says. It reports whether it streams
// (the stream writer then ends the request).
func (l *lister) respond(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, ef encoding.Format) (streaming bool) {
	rc.SetStatusCode(200)
	rc.SetContentType(l.enc.Output().ContentType(true))
	switch l.delivery() {
	case deliverEncoded:
		l.respondEncoded(rc, ef)
	case deliverInline:
		l.respondInline(ctx, rc, ef)
	default:
		l.respondStream(ctx, cancel, rc, ef)
		return true
	}
	return false
}

// encodedBody appends the answer of deliverEncoded to dst: the items the
// size pass encoded between the list's head and tail.
func (l *lister) encodedBody(dst []byte) ([]byte, error) {
	lm := l.lm
	if l.layout == encoding.LayoutMetaLast {
		if err := l.setContinue(&lm, &l.ws); err != nil {
			return dst, err
		}
	}
	dst = l.enc.ListHead(dst, lm, l.ws.size)
	dst = append(dst, *l.pre...)
	return l.enc.ListTail(dst, lm), nil
}

// countEncoded counts the served answer of deliverEncoded.
func (l *lister) countEncoded() {
	l.s.countServed(l.enc, codec.Object{Format: l.preFormat}, int(l.ws.n))
}

// inlineBody appends the answer of deliverInline to dst: the first page,
// encoded.
func (l *lister) inlineBody(ctx context.Context, dst []byte) ([]byte, error) {
	sw := streamWriter{buf: dst}
	err := l.write(ctx, &sw, l.pg, l.page, nil, l.lm, l.ws, true)
	if err != nil {
		l.s.logListError(l.uri, err)
	}
	return sw.buf, err
}

// respondEncoded answers with the items encoded by the size pass.
func (l *lister) respondEncoded(rc *fasthttp.RequestCtx, ef encoding.Format) {
	buf := getBuf()
	b, err := l.encodedBody((*buf)[:0])
	if err != nil {
		putBuf(buf)
		l.st.fail(rc, ef, internalErr(err.Error()))
		return
	}
	ok := l.st.setBody(rc, ef, b)
	*buf = b
	putBuf(buf)
	if ok {
		l.countEncoded()
		l.st.finish(200, len(b))
	}
}

// respondInline encodes the whole answer, all in the first page and small,
// in the handler: sent with a Content-Length.
func (l *lister) respondInline(ctx context.Context, rc *fasthttp.RequestCtx, ef encoding.Format) {
	buf := getBuf()
	defer putBuf(buf)
	b, err := l.inlineBody(ctx, (*buf)[:0])
	*buf = b
	if err != nil {
		l.st.fail(rc, ef, statusOf(err))
		return
	}
	if l.st.setBody(rc, ef, b) {
		l.st.finish(200, len(b))
	}
}

// listStream is the write pass of deliverStreamed, taken from its lister
// before the response starts (the body is written later, on the
// connection's goroutine or a shared LIST's).
type listStream struct {
	l       *lister
	pg      pager
	page    []*mvccpb.KeyValue
	pre     *[]byte // the stream's: the first page's items, encoded (YAML)
	lm      codec.ListMeta
	planned walkState
}

// stream returns the list's write pass. A YAML list whose first page the
// size pass encoded (lister.pre, the first page not the whole answer)
// starts from that encoding: pg reads on after the first page. The stream
// owns the buffer.
func (l *lister) stream() *listStream {
	ls := &listStream{l: l, pg: l.pg, page: l.page, lm: l.lm, planned: l.ws}
	if l.pre != nil && l.layout == encoding.LayoutMetaLast && ls.planned.partial {
		ls.pre, ls.page = l.pre, nil
		l.pre = nil
	}
	return ls
}

// write writes the whole list to sw and flushes it (once).
func (ls *listStream) write(ctx context.Context, sw *streamWriter) error {
	var encoded []byte
	if ls.pre != nil {
		defer putBuf(ls.pre)
		encoded = *ls.pre
	}
	mark := len(sw.buf)
	err := ls.l.write(ctx, sw, ls.pg, ls.page, encoded, ls.lm, ls.planned, false)
	for i := 0; i < listRestarts && encoded == nil && sw.n == 0 && ls.l.restartable(err); i++ {
		// Nothing of the list has left yet: read it again at etcd's
		// new revision (prepareList), instead of cutting it off.
		sw.buf = sw.buf[:mark]
		err = ls.restart(ctx, sw)
	}
	if err == nil {
		err = sw.flush()
	}
	return err
}

// restartable reports whether a write pass that failed with err may read
// the list again from its start at etcd's current revision: etcd compacted
// the revision lazyapi chose (prepareList), and no metadata planned before
// the first byte depends on it (no limit; not protobuf, whose head holds the
// items' size).
func (l *lister) restartable(err error) bool {
	return l.rereadable(errors.Is(err, store.ErrCompacted)) && l.limit == 0 && l.layout != encoding.LayoutSized
}

// rereadable is the one rule of both restarts (prepareList before the
// first byte, listStream.write after it was prepared): a read etcd
// compacted may start again at etcd's current revision only when lazyapi
// chose its revision from etcd (no continue token, no Exact revision, not
// the watch cache's snapshot).
func (l *lister) rereadable(compacted bool) bool {
	return compacted && l.ownRev && l.snap == nil
}

// restart writes the list again from a first page read at etcd's current
// revision.
func (ls *listStream) restart(ctx context.Context, sw *streamWriter) error {
	l := ls.l
	l.s.listRestarts.Inc()
	opts := l.opts
	opts.Rev = 0
	pg := l.newPager(opts)
	page, err := pg.Next(ctx)
	if err != nil {
		pg.Close()
		return err
	}
	l.rev, l.opts.Rev = pg.Rev(), pg.Rev()
	lm := ls.lm
	lm.ResourceVersion = l.rev
	return l.write(ctx, sw, pg, page, nil, lm, walkState{}, false)
}

// respondStream hands the list to fasthttp as a streamed body, written
// item by item on the connection's goroutine.
// A request that accepts gzip is answered by conn.ServeGzipStream (proxy/conn/gzip.go).
func (l *lister) respondStream(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, ef encoding.Format) {
	s, st := l.s, l.st
	ls := l.stream()
	guard := s.guardWrites(ctx, rc, "list")
	body := &listBody{done: func(n int) {
		// The guard ends before the request's context: a body never
		// written (HEAD, a connection closed first) never reached
		// guard.Done in write, and the context's end would otherwise
		// move the connection's write deadline into the past while
		// fasthttp still has this response's headers to flush (the
		// client then saw a closed connection and retried the HEAD).
		guard.Done(nil)
		cancel()
		st.finish(200, n)
	}, pc: guard.Progress()}
	body.write = func(w *bufio.Writer) (n int, err error) {
		defer func() {
			if v := recover(); v != nil {
				s.panics.Inc()
				s.log.Error("panic streaming list", zap.String("uri", l.uri), zap.Any("panic", v), zap.Stack("stack"))
				err = errStreamAborted
			}
		}()
		// Uncompressed, the list's chunks are held together: under TLS
		// their records reach the socket in writes of up to
		// conn.CoalesceBytes (about two chunks), not one write per chunk. The
		// last bytes go out before the guard ends.
		var held *conn.Progress
		if !st.gzip {
			held = guard.Progress()
			held.Hold()
			defer func() {
				if held != nil { // a panic
					_ = held.Release()
				}
			}()
		}
		buf := getBuf()
		sw := streamWriter{w: w, buf: (*buf)[:0], yield: st.yield, guard: guard}
		defer func() { n = sw.n }()
		err = ls.write(ctx, &sw)
		if held != nil {
			if rerr := held.Release(); err == nil && rerr != nil {
				err = fmt.Errorf("cannot write response: %w", rerr)
			}
			held = nil
		}
		guard.Done(err)
		*buf = sw.buf
		putBuf(buf)
		if err != nil {
			// Headers are out: abort the stream. WriteTo returns the
			// error, so fasthttp writes no terminating chunk and closes
			// the connection: the client sees an incomplete response
			// (as kube-apiserver's http.ErrAbortHandler gives), never a
			// well-formed 200 missing items.
			s.logListError(l.uri, err)
		}
		return sw.n, err
	}
	if st.gzip {
		conn.ServeGzipStream(rc, connBufs, body.write, body.done, func(err error) {
			cancel()
			st.fail(rc, ef, statusOf(err))
		})
		return
	}
	rc.SetBodyStream(body, -1)
}

// write writes the list: head, the items of page and of the following
// pages of pg, tail. page is the already-read first page (nil: read from
// pg). planned holds the metadata known before the first byte (for YAML it
// is completed by this walk). encoded, when not nil, is the first page's
// items as the size pass encoded them (YAML, page nil): written as they
// are, the walk goes on from the next page with planned's count.
func (l *lister) write(ctx context.Context, sw *streamWriter, pg pager, page []*mvccpb.KeyValue, encoded []byte,
	lm codec.ListMeta, planned walkState, inline bool) error {
	defer pg.Close()
	if !inline {
		// Read the next etcd page while this one is written: up to two
		// pages held, etcd round trips overlap the encoding.
		pg.SetPrefetch(ctx, true)
	}
	enc := l.enc
	sw.buf = enc.ListHead(sw.buf, lm, planned.size)
	var (
		ws      walkState
		lastObj codec.Object
		err     error
	)
	written := 0 // items' bytes, checked against the size pass's
	if encoded != nil {
		sw.buf = append(sw.buf, encoded...)
		written = len(encoded)
		ws = walkState{n: planned.n}
		lastObj.Format = l.preFormat
	}
	emit := func(it *walkItem, kv *mvccpb.KeyValue) error {
		start := len(sw.buf)
		sw.buf, err = l.appendItem(sw.buf, it, kv, ws.n == 0)
		if err != nil {
			l.s.decodeErrs.Inc()
			return &decodeError{key: string(kv.Key), err: err}
		}
		written += len(sw.buf) - start
		lastObj = it.obj
		if l.snap == nil && l.layout == encoding.LayoutSized && it.decoded && l.s.sizes != nil && encryption.Encrypted(kv.Value) {
			// For the size pass of the next LIST of this value.
			l.s.sizes.Put(kv.Key, kv.ModRevision, codec.SizesOf(it.obj))
		}
		if inline {
			return nil
		}
		return sw.maybeFlush()
	}
	if page == nil {
		page, err = pg.Next(ctx)
		if err != nil {
			return err
		}
	}
	if len(page) > 0 {
		if err := l.walk(ctx, pg, page, &ws, passWrite, emit); err != nil {
			return err
		}
	}
	if l.layout == encoding.LayoutSized && written != planned.size {
		// The head announced planned.size bytes: a client would read a
		// corrupt list. Abort instead (never expected: the sizes of the
		// size pass are those of the same objects).
		return fmt.Errorf("BUG: list items took %d bytes, the size pass counted %d", written, planned.size)
	}
	l.s.countServed(enc, lastObj, int(ws.n))
	if l.layout == encoding.LayoutMetaLast {
		if err := l.setContinue(&lm, &ws); err != nil {
			return err
		}
	}
	sw.buf = enc.ListTail(sw.buf, lm)
	return nil
}
