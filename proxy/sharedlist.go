package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/shared"
	"github.com/lazyapi/lazyapi/resource"
)

// Shared LISTs (issue 15): one etcd read for concurrent identical LISTs.
//
// The LIST of a LIST+WATCH informer (client-go's reflector) of a
// collection the watch cache does not hold is read from etcd. Hundreds of
// informers starting at once sent hundreds of identical LISTs, each
// admitted alone on the bulk seat and reading and encoding the whole
// collection, one after the other (as the WatchLists before shared scans,
// sharedscan.go).
//
// Identical LISTs (same resource, output, namespace and parameters) that
// arrive while a listGroup is forming join it: the group is admitted once
// (as a LIST, plus its window), runs the ordinary LIST (newLister,
// firstPage, plan, write: the same code, so the same bytes) into chunks
// of the response body, and every member writes the same chunks, in
// order, to its connection. A LIST response is in key order from its
// first byte: a member must have every chunk from the first, so it may
// join only while the group's first chunk is still in the window. A
// consistent read (resourceVersion="") joins only a group that has not
// read its revision yet (the revision is then read after its arrival);
// resourceVersion="0" and the other forms (the same parameters, so the
// same semantics) join any group whose first chunk they can still take.
// A request that cannot join starts the next group.
//
// Memory is bounded by the window (the shared read's window), counted in the
// group's admission: chunks written by every member leave it; when it is
// full the group waits for its members, and a member that has not taken
// its next chunk for shared.LagWait while another member is active is ended (its response is aborted as a
// LIST whose write fails: the client sees an incomplete response, never a
// short or reordered list) so that a stalled client neither stalls the
// others nor holds more than the chunk it is writing.
//
// Compression (proxy/conn/gzip.go). client-go asks every server for gzip, so an
// informer storm's LISTs do. A LIST that accepts gzip groups only with
// LISTs that accept it too (listKey.gzip); since every member writes the
// body from its first byte, the group compresses it once, as the
// unshared path (conn.ServeGzipStream) does for one request: the body is
// collected until it is larger than conn.GzipThreshold, then compressed with
// the same compressor and level, the collected bytes flushed as the first
// chunk and the compressed stream published in chunks of about flushSize
// (shared.List.Stream); a body that ends at or below the threshold is sent
// uncompressed with a Content-Length, and a body encoded whole (inline)
// is compressed when larger than the threshold, as setBody does. The
// members learn which (shared.List.Gzip) when the group is ready: every
// member's response has the headers (Content-Encoding: gzip, Vary:
// Accept-Encoding) and, decompressed, the bytes of an unshared LIST of
// the same request. The compressor is counted in the group's admission
// (conn.GzipBytes); its window holds compressed chunks.

// listGroupMembers bounds a group's members (a variable for tests). Each
// member still writes the whole response on its connection: a group's
// time grows with its members (their TLS writes; the read and the encoding
// are shared), and every member must finish within its --request-timeout
// (a LIST, unlike a watch, has one). 256 members of one 400 MiB LIST did
// not finish in the minute (storm at 1Gi, 2 cores: 0/256 synced, all cut
// by the request timeout); 64 per group run one after another on the bulk
// seat.
var listGroupMembers = 64

// listKey identifies the LISTs whose responses are byte-identical.
type listKey struct {
	r    *resource.Resource
	out  encoding.Output
	ns   string
	q    Params
	gzip bool // the requests accept gzip (reqState.gzip)
}

// listGroups is the server's registry of forming or running groups.
type listGroups = shared.Reads[listKey, *listGroup]

func newListGroups(ms *metrics.Set) *listGroups {
	return shared.NewReads[listKey, *listGroup](ms, "lazyapi_list_shared_reads_total",
		"lazyapi_list_shared_read_members_total", "lazyapi_list_shared_read_chunks_total",
		"lazyapi_list_shared_read_members_lagged_total", "lazyapi_list_shared_read_bytes")
}

// listMember is one LIST of a group.
type listMember = shared.Member[*shared.ListChunk, *listGroup]

// listGroup is one shared LIST: an ordered shared read of the response
// body (shared.List: its answer, whole or streamed body and compression).
// Its window's limit is the shared window, reserved in the group's
// admission.
type listGroup struct {
	shared.List[*StatusError]
	s   *Server
	key listKey
	st  reqState // the first member's request, with the group's own encoder

	pinned bool // the list's revision was read (under the read's lock)
}

// sharesList reports whether a LIST may share its read: not a Table (its
// rows read the clock), from etcd (the watch cache does not serve the
// resource and the request does not wait for it).
func (s *Server) sharesList(st *reqState) bool {
	if s.lists == nil || st.enc.Output().Target == encoding.TargetTable {
		return false
	}
	cr := s.cacheResource(st.r)
	return cr == nil || (!cr.Ready() && !cr.Filling())
}

// serveSharedList serves the LIST as a member of a group (joined or
// started). The group holds the admission; the member holds none.
func (s *Server) serveSharedList(rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format) {
	q := st.q
	q.TimeoutSeconds = 0
	key := listKey{r: st.r, out: st.enc.Output(), ns: st.p.Namespace, q: q, gzip: st.gzip}
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.RequestTimeout)
	if s.cfg.Admit != nil {
		// The admission hook, per request (the group holds the
		// limiter's admission).
		release, err := s.cfg.Admit(rc, st.ri)
		if err != nil {
			cancel()
			st.fail(rc, ef, admissionStatus(err))
			return
		}
		st.release = release
	}
	g, m := s.joinList(st, key, clientKey(rc))
	select {
	case <-g.Ready():
	case <-ctx.Done():
		m.Leave()
		cancel()
		st.fail(rc, ef, storeStatus(ctx.Err(), false, 0))
		return
	}
	if se, ok := g.Answered(); ok {
		m.Leave()
		cancel()
		st.fail(rc, ef, se)
		return
	}
	rc.SetStatusCode(200)
	rc.SetContentType(st.enc.Output().ContentType(true))
	if g.Inline() {
		respondWhole(m, ctx, cancel, rc, st, ef)
		return
	}
	if g.Gzip() {
		conn.SetGzipHeaders(rc)
	}
	rc.SetBodyStream(memberBody(m, ctx, cancel, rc, st), -1)
}

// respondWhole answers with the group's one chunk, the whole body, sent
// with a Content-Length.
func respondWhole(m *listMember, ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format) {
	c, _, err := m.Take(ctx)
	if err != nil || c == nil {
		m.Leave()
		cancel()
		if err == nil {
			err = shared.ErrEnded
		}
		st.fail(rc, ef, statusOf(err))
		return
	}
	// The group decided: c.data is the body as sent.
	st.gzip = false
	ok := st.setBody(rc, ef, c.Data)
	if ok && m.Group().Gzip() {
		conn.SetGzipHeaders(rc)
	}
	m.Release(c)
	m.Leave()
	cancel()
	if ok {
		st.finish(200, c.Raw)
	}
}

// memberBody is the member's streamed body: the group's chunks as they
// come.
func memberBody(m *listMember, ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, st *reqState) *listBody {
	s := m.Group().s
	guard := s.guardWrites(ctx, rc, "list")
	body := &listBody{done: func(n int) {
		guard.Done(nil)
		m.Leave()
		cancel()
		st.finish(200, n)
	}, pc: guard.Progress()}
	body.write = func(w *bufio.Writer) (n int, err error) {
		held := guard.Progress()
		held.Hold()
		n, err = writeChunks(m, ctx, w, guard)
		if rerr := held.Release(); err == nil && rerr != nil {
			err = fmt.Errorf("cannot write response: %w", rerr)
		}
		m.Leave() // before the guard ends: the group does not wait for it
		if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			// The member's request timed out while it waited for a
			// chunk (not in a write): counted as the guard counts it.
			guard.MarkExpired()
		}
		guard.Done(err)
		if err != nil {
			s.logListError(string(rc.RequestURI()), err)
		}
		return n, err
	}
	return body
}

// writeChunks writes the member's chunks to w, each flushed (one HTTP
// chunk), until the last; n counts the body's bytes before compression.
func writeChunks(m *listMember, ctx context.Context, w *bufio.Writer, guard *conn.WriteGuard) (n int, err error) {
	for {
		c, end, err := m.Take(ctx)
		if err != nil || end {
			return n, err
		}
		guard.Arm()
		_, werr := w.Write(c.Data)
		if werr == nil {
			werr = w.Flush()
		}
		n += c.Raw
		m.Release(c)
		if werr != nil {
			return n, fmt.Errorf("cannot write response: %w", werr)
		}
	}
}

// joinList adds a member to the group of key that it may join, or starts
// one.
func (s *Server) joinList(st *reqState, key listKey, client string) (*listGroup, *listMember) {
	r := s.lists
	consistent := st.q.ResourceVersion == "" && st.q.Continue == ""
	r.Lock()
	defer r.Unlock()
	if g := r.GetLocked(key); g != nil {
		g.Lock()
		if g.FromStartLocked(listGroupMembers) && !(consistent && g.pinned) {
			m := shared.AddMember(&g.Read, g, true)
			g.Unlock()
			r.JoinedLocked()
			return g, m
		}
		g.CloseLocked()
		g.Unlock()
	}
	g := &listGroup{s: s, key: key, st: *st}
	// The group lives while it has members (each with its request's
	// timeout): the last one out cancels it.
	shared.StartList(r, &g.List, key, g, scanWindowBytes, s.baseCtx, key.gzip, connBufs)
	g.st.enc = encoding.NewEncoder(s.schema, st.r, key.out, nil, includeObject(st.q.IncludeObject), time.Now())
	g.st.release, g.st.drain, g.st.reserve, g.st.yield = nil, nil, nil, nil
	m := shared.AddMember(&g.Read, g, false)
	go g.run(client)
	return g, m
}

// run admits the group and runs the LIST into chunks: the lister's own
// phases (prepare, delivery, then its encoded or inline body or its
// stream), as serveList runs them for one request.
func (g *listGroup) run(client string) {
	s := g.s
	defer g.Cancel()
	defer func() {
		if v := recover(); v != nil {
			s.panics.Inc()
			s.log.Error("panic in a shared list", zap.Any("panic", v), zap.Stack("stack"))
			if !g.Started() {
				g.Answer(internalErr("shared list failed"))
			} else {
				g.End(errStreamAborted)
			}
		}
	}()
	ctx := g.Context()
	st := &g.st
	var buffers int64
	if g.key.gzip {
		buffers = conn.GzipBytes // its compressor, as an unshared gzip LIST's (admit)
	}
	window := s.sharedWindowBytes()
	g.SetLimit(window)
	release, yield, _, err := s.admitEtcdList(ctx, client, st.r, st.p.Namespace, window, buffers)
	if err != nil {
		g.Answer(readAdmissionStatus(ctx, err))
		return
	}
	defer release()
	// From here a consistent read may read the revision: a request
	// that needs a revision read after its arrival no longer joins.
	g.Lock()
	g.pinned = true
	g.Unlock()
	l, se := s.prepareList(ctx, nil, st)
	if se != nil {
		g.Answer(se)
		return
	}
	defer l.releasePre()
	if d := l.delivery(); d != deliverStreamed {
		g.runWhole(ctx, l, d)
		return
	}
	g.runStream(ctx, l, yield)
}

// runWhole publishes an answer the unshared LIST sends with a
// Content-Length: one chunk, the whole body, compressed when it accepts
// gzip and is larger than conn.GzipThreshold, as setBody does.
func (g *listGroup) runWhole(ctx context.Context, l *lister, d listDelivery) {
	var b []byte
	var err error
	if d == deliverEncoded {
		if b, err = l.encodedBody(nil); err != nil {
			g.Answer(internalErr(err.Error()))
			return
		}
		l.countEncoded()
	} else if b, err = l.inlineBody(ctx, nil); err != nil {
		g.Answer(statusOf(err))
		return
	}
	g.PublishWhole(b)
}

// runStream publishes a streamed answer in chunks: each streamWriter
// flush, or for gzip the compressed stream (shared.List.Stream). A gzip
// body that ends at or below conn.GzipThreshold is answered whole and
// uncompressed (or with its Status), as conn.ServeGzipStream answers it.
func (g *listGroup) runStream(ctx context.Context, l *lister, yield func(written int)) {
	ls := l.stream()
	out := g.Stream()
	defer out.Abort() // after a panic
	sw := streamWriter{w: bufio.NewWriterSize(out, 512), buf: make([]byte, 0, flushSize+64<<10), yield: yield}
	started, err := out.End(ls.write(ctx, &sw))
	if err != nil && (!started || !errors.Is(err, shared.ErrEnded)) {
		g.s.logListError(l.uri, err)
	}
	if !started && err != nil {
		g.Answer(statusOf(err))
	}
}
