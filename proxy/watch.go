package proxy

import (
	"bufio"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
)

// WATCH.
//
// A watch is served from the watch cache (Config.Cache) when the resource is
// cached and ready, else from a direct etcd watch on the collection's prefix
// (with an initial paged list at one revision when the request asks for the
// current state). Both sources yield (type, stored value, resourceVersion)
// and share the framing: JSON lines, protobuf length-prefixed
// metav1.WatchEvent, Table rows (kubectl get -w) or PartialObjectMetadata
// (metadata informers). The response is chunked and flushed after each batch
// of events (when no further event is ready), each flush under a write
// deadline so that a stalled client cannot hold its watch (and its
// admission) for longer than --write-timeout past its last read
// (proxy/conn/writeguard.go).
//
// A watch ends cleanly (the client re-watches) at its timeout, when the
// cache closes the watcher for lag or a re-list, when the etcd watch breaks,
// and at server shutdown (fasthttp's RequestCtx.Done).

const (
	// minRequestTimeout is kube-apiserver's --min-request-timeout default:
	// a watch without timeoutSeconds lasts a random duration in
	// [minRequestTimeout, 2*minRequestTimeout), as kube-apiserver does.
	minRequestTimeout = 1800 * time.Second
	// etcdBookmarkInterval is how often an etcd-backed watch that allows
	// bookmarks asks etcd for a progress notification while idle.
	etcdBookmarkInterval = time.Minute
	// watchIdleBytes is what an open, idle watch holds, reserved for its
	// whole life: its goroutines' stacks (the connection's, the one that
	// notices a hang-up), fasthttp's connection state and buffers, its own
	// small write buffer (watchIdleBuf), its cache cursor or etcd watch,
	// its context and timer. Measured on the real binary with 10,000 idle
	// watches from distinct clients over plain HTTP
	// (TestIdleWatchesDefaultFlags; bench/RESULTS.md ## idle watches):
	// heap in use after a GC + stacks grew by 24.8 KiB per watch, RSS by
	// 24.4 KiB. A watch over TLS holds watchTLSBytes more. A busy watch
	// charges the frames queued for it on top (watchWriter.charge) until
	// they are written.
	watchIdleBytes = 25 << 10
	// watchTLSBytes is what an idle watch over TLS holds besides
	// watchIdleBytes: the connection's crypto/tls state and record
	// buffers. Measured with 4,000 idle TLS watches
	// (TestWatchSharesManyIdentities, two runs): heap in use after a GC +
	// stacks grew by 46.3 and 48.7 KiB per watch, up to 24 KiB more than
	// over plain HTTP.
	watchTLSBytes = 24 << 10
	// watchIdleBuf is the small pooled buffer a watch appends its frames
	// to between flushes (watchWriter.take); an idle watch holds none.
	watchIdleBuf = 2 << 10
)

// watchMetrics are the watch metrics in the server's set.
type watchMetrics struct {
	open     *metrics.Gauge
	events   *metrics.Counter
	lagging  *metrics.Counter
	fallback *metrics.Counter
}

func (s *Server) watchMetrics() watchMetrics {
	return watchMetrics{
		open:     s.ms.GetOrCreateGauge("lazyapi_watchers_open", nil),
		events:   s.ms.GetOrCreateCounter("lazyapi_watch_events_sent_total"),
		lagging:  s.ms.GetOrCreateCounter("lazyapi_watchers_closed_lagging_total"),
		fallback: s.ms.GetOrCreateCounter("lazyapi_watch_etcd_fallback_total"),
	}
}

// validateWatch applies kube-apiserver's validateWatchOptions rules.
func validateWatch(q *Params) error {
	if q.SendInitialEvents != nil {
		if q.ResourceVersionMatch != request.MatchNotOlderThan {
			return request.Errorf("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
		}
		if !q.AllowWatchBookmarks {
			return request.Errorf("allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true")
		}
		return nil
	}
	if q.ResourceVersionMatch != "" {
		return request.Errorf("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
	}
	return nil
}

// watchTimeout returns how long a watch lasts, computed as kube-apiserver's
// handleWatch does: timeoutSeconds times a second in time.Duration, which
// wraps for a timeoutSeconds above 9,223,372,036 (292 years); 0 is the
// random default. A result <= 0 (a negative timeoutSeconds, or one that
// wrapped negative) is a watch whose context is over before it starts:
// see expiredWatch.
func watchTimeout(q *Params) time.Duration {
	if q.TimeoutSeconds != 0 {
		if d := time.Duration(q.TimeoutSeconds) * time.Second; d != 0 {
			return d
		}
	}
	return minRequestTimeout + time.Duration(rand.Int64N(int64(minRequestTimeout)))
}

// expiredWatch answers a watch whose timeout is not positive as
// kube-apiserver v1.37 does: 200, and the watch cache's error for the
// expired context as the one event (instead of 429 from an admission that
// could not wait).
func expiredWatch(rc *fasthttp.RequestCtx, enc encoding.Encoder) {
	rc.SetStatusCode(200)
	rc.SetContentType(enc.Output().WatchContentType())
	rc.SetBody(enc.WatchStatus(nil, &codec.Status{Code: 500, Reason: "InternalError", Message: "context deadline exceeded"}))
}

// watchStart is where a watch starts, from its parameters.
type watchStart struct {
	initial    bool  // send the current state as ADDED first
	initialEnd bool  // then a BOOKMARK annotated initial-events-end
	rv         int64 // the resourceVersion parameter
	any        bool  // rv "0": any (serializable / cached) state will do
	fromNow    bool  // no initial state and no rv: changes from now
}

func parseWatchStart(q *Params) watchStart {
	rv, _ := request.ParseRV(q.ResourceVersion) // validated
	ws := watchStart{rv: rv, any: q.ResourceVersion == "0"}
	if q.SendInitialEvents != nil {
		ws.initial = *q.SendInitialEvents
		ws.initialEnd = ws.initial
		ws.fromNow = !ws.initial && rv == 0
		return ws
	}
	ws.initial = rv == 0
	return ws
}

// serveWatch serves a WATCH in its phases: newWatch (validate, negotiate,
// filter, where to start), admit (the limiter), source (the watch cache
// when it can serve the watch, else etcd) and stream (the response). The
// request is recorded when the response starts.
func (s *Server) serveWatch(rc *fasthttp.RequestCtx, st *reqState, accept string, ef encoding.Format) {
	defer func() { st.finish(rc.Response.StatusCode(), 0) }()
	w, se := s.newWatch(rc, st, accept)
	if se != nil {
		s.writeStatus(rc, ef, se)
		return
	}
	w.releases = append(w.releases, s.auditWatchEnd(rc))
	streaming := false
	defer func() {
		if !streaming {
			w.end()
		}
	}()
	if watchTimeout(&st.q) <= 0 {
		expiredWatch(rc, st.enc)
		return
	}
	se = w.admit()
	var run func(sw *watchWriter) error
	if se == nil {
		run, se = w.source()
	}
	if se != nil {
		s.writeStatus(rc, ef, se)
		return
	}
	w.stream(run)
	streaming = true
}

// watchReq is one WATCH request's state.
type watchReq struct {
	s       *Server
	rc      *fasthttp.RequestCtx
	r       *resource.Resource
	q       *Params
	ns      string // the namespace of the path, "" for all
	prefix  string // the collection's key prefix, ending in "/"
	f       request.Filter
	ws      watchStart
	enc     *watchEncoder
	ctx     context.Context // the watch's: its timeout, shutdown, the end of the stream
	cancel  context.CancelFunc
	release func() // the limiter's admission, or nil
	// ticket is the limiter's admission (nil without a limiter): during
	// the initial phase of a watch the cache serves it holds
	// watchIdleBytes plus a cache LIST's estimate (initial), afterwards
	// watchIdleBytes plus the frames queued (watchWriter).
	ticket  *ratelimit.Ticket
	initial int64
	idleB   int64 // what the watch holds idle: watchIdleBytes, plus watchTLSBytes over TLS
	// releases run at the end: the initial list's admission (fill.go)
	// and lazyapi_watchers_open, which counts the watch from newWatch on.
	releases []func()
}

// newWatch validates a watch request, negotiates its encoder and starts
// its context.
func (s *Server) newWatch(rc *fasthttp.RequestCtx, st *reqState, accept string) (*watchReq, *StatusError) {
	q, r := &st.q, st.r
	f, err := request.ParseFilter(q.LabelSelector, q.FieldSelector, r.ConvertFieldLabel)
	if err != nil {
		return nil, badRequestErr(err.Error())
	}
	if err := validateWatch(q); err != nil {
		return nil, badRequestErr(err.Error())
	}
	out, ok := encoding.Negotiate(accept, encoding.AnswerStream, r.JSONStorage)
	if !ok {
		return nil, statusErr(406, "NotAcceptable",
			"only the following media types are accepted: application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch")
	}
	if st.p.Name != "" { // legacy /watch/.../{name}
		f.Fields = append(f.Fields, request.FieldReq{Field: "metadata.name", Value: st.p.Name})
	}
	cc, err := encoding.TableColumns(r, out)
	if err != nil {
		return nil, internalErr(err.Error())
	}
	st.enc = encoding.NewEncoder(s.schema, r, out, cc, includeObject(q.IncludeObject), time.Time{})
	w := &watchReq{s: s, rc: rc, r: r, q: q, ns: st.p.Namespace, prefix: s.listPrefix(r, st.p.Namespace), f: f,
		ws: parseWatchStart(q), enc: &watchEncoder{s: s, r: r, enc: st.enc}}
	// The watch's context: its timeout, server shutdown (watchCtx ends
	// when Shutdown starts), and the end of the stream.
	w.ctx, w.cancel = context.WithTimeout(s.watchCtx, watchTimeout(q))
	w.enc.ctx, w.enc.gr = w.ctx, r.GroupResource()
	// The watch counts as open from here on: while it waits for a cache
	// fill or reads its initial list from etcd too.
	m := s.watchMetrics()
	m.open.Inc()
	w.releases = append(w.releases, m.open.Dec)
	return w, nil
}

// end ends the watch's context and releases its admission.
func (w *watchReq) end() {
	w.cancel()
	if w.release != nil {
		w.release()
	}
	for _, f := range w.releases {
		f()
	}
}

// admit asks the limiter for the watch's seat (ratelimit.Watch): what an
// idle watch holds (watchIdleBytes) for its life and, for a watch with
// initial events that the watch cache serves, its initial phase, admitted
// as the LIST of the collection it is (watchInitialEstimate) and given
// back once the initial events are written (watchWriter.endInitial). A
// watch whose initial events etcd serves reserves them apart, as a LIST
// (admitEtcdWatchList, or its shared scan's admission).
func (w *watchReq) admit() *StatusError {
	cr := w.s.cacheResource(w.r)
	if se := w.s.waitCacheFill(w.ctx, w.rc, cr); se != nil {
		return se
	}
	l := w.s.cfg.Limiter
	if l == nil {
		return nil
	}
	if w.ws.initial && cr != nil && cr.Ready() {
		w.initial = w.s.watchInitialEstimate(w.r, cr)
	}
	w.idleB = watchIdleBytes
	if w.rc.IsTLS() {
		w.idleB += watchTLSBytes
	}
	t, err := l.Admit(w.ctx, ratelimit.Request{Client: clientKey(w.rc), Class: "watch/" + w.r.GroupResource(),
		Kind: ratelimit.Watch, Bytes: w.idleB + w.initial, Exempt: exempt(w.rc)})
	if err != nil {
		return tooManyRequests(err)
	}
	w.ticket = &t
	w.release = func() { t.Release(0) }
	return nil
}

// idle gives back the initial phase's reservation of a watch the cache
// does not serve after all (etcd's initial list is admitted apart).
func (w *watchReq) idle() {
	if w.ticket != nil && w.initial > 0 {
		w.initial = 0
		w.ticket.Resize(w.idleB)
	}
}

// source opens the watch's events: the watch cache's when it can serve
// them, else an etcd watch's. run streams them.
func (w *watchReq) source() (run func(sw *watchWriter) error, se *StatusError) {
	s := w.s
	cr := s.cacheResource(w.r)
	if cr != nil {
		if run, se, ok := w.fromCache(cr); ok {
			return run, se
		}
	}
	s.watchMetrics().fallback.Inc()
	w.idle()
	ew := &etcdWatch{s: s, enc: w.enc, f: &w.f, prefix: w.prefix, ws: w.ws, bookmarks: w.q.AllowWatchBookmarks}
	if w.ws.initial && cr != nil && !cr.Ready() {
		// Logged once per client and minute: why the cache did not serve it.
		st, why := cr.Status()
		s.rateLog.warn(clientKey(w.rc), "etcdlist", "watch reads its initial list from etcd: its resource is not in the watch cache",
			zap.String("resource", w.r.GroupResource()), zap.String("cache", st.String()+": "+why))
	}
	if w.ws.initial {
		// Concurrent watches of the collection share one scan
		// (sharedscan.go).
		if ok, se := w.joinScan(ew); ok {
			if se != nil {
				return nil, se
			}
			ctx := w.ctx
			return func(sw *watchWriter) error { return ew.run(ctx, sw) }, nil
		}
		if se := s.admitEtcdWatchList(w.ctx, w.rc, w.r, w.ns, ew); se != nil {
			return nil, se
		}
		w.releases = append(w.releases, ew.listDone)
	}
	if err := ew.prepare(w.ctx); err != nil {
		return nil, storeStatus(err, false, w.ws.rv)
	}
	ctx := w.ctx
	return func(sw *watchWriter) error { return ew.run(ctx, sw) }, nil
}

// fromCache opens a watch of the watch cache; ok is false when the cache
// cannot serve it (not cached or not caught up: etcd serves it).
func (w *watchReq) fromCache(cr *cache.Resource) (run func(sw *watchWriter) error, se *StatusError, ok bool) {
	ws, q, ctx, enc := w.ws, w.q, w.ctx, w.enc
	o := cache.WatchOptions{Initial: ws.initial, InitialEventsEnd: ws.initialEnd, Bookmarks: q.AllowWatchBookmarks}
	if w.prefix != w.s.listPrefix(w.r, "") {
		o.From, o.To = w.prefix, clientv3.GetPrefixRangeEnd(w.prefix)
	}
	if !w.f.Empty() {
		f := &w.f
		// Attributes the cache could not derive (a value it cannot peek,
		// e.g. encrypted, or a field that is not a scalar: every Pod, for
		// status.podIPs) are read from the value, as an etcd watch does;
		// MatchesAttrs alone would select none of those objects. Called
		// from the watcher's Next goroutine only (ew.meta is its scratch).
		ew := &etcdWatch{s: w.s, enc: enc, f: f}
		o.Filter = func(a cache.Attrs) bool {
			if a.Valid() {
				return f.MatchesAttrs(a)
			}
			_, ok := ew.match(&mvccpb.KeyValue{Key: a.Key(), Value: a.Value()})
			return ok
		}
		o.Index = f.IndexTerms()
	}
	switch {
	case ws.initial && q.ResourceVersion == "":
		o.Mode = cache.ReadConsistent
	case ws.initial && ws.any:
		o.Mode = cache.ReadAny
	case ws.initial:
		o.Mode, o.RV = cache.ReadNotOlderThan, ws.rv
	case ws.fromNow:
		o.RV = 0
	default:
		o.RV = ws.rv
	}
	cw, err := cr.Watch(ctx, o)
	var tooOld *cache.TooOldError
	switch {
	case err == nil:
		return func(sw *watchWriter) error { return enc.fromCache(ctx, sw, cw) }, nil, true
	case errors.As(err, &tooOld) && tooOld.RV >= w.s.compactRev.Load():
		// Older than the cache's history (it started at a fill after a
		// restart, a re-list or an eviction) but not compacted: etcd's
		// watch serves it, as kube-apiserver's cacher would not (410), so
		// that a client resumes where it was instead of re-listing; etcd
		// answers 410 itself if it compacted the revision meanwhile (the
		// robustness suite: 410 only for a compacted revision).
		return nil, nil, false
	case errors.As(err, &tooOld):
		return func(sw *watchWriter) error {
			sw.buf = enc.enc.WatchStatus(sw.buf, &expired(tooOld.Message()).Status)
			return nil
		}, nil, true
	case errors.Is(err, cache.ErrTooLarge):
		return nil, tooLargeRV(o.RV, cr.Revision()), true
	case errors.Is(err, cache.ErrNotCached), errors.Is(err, cache.ErrNotCaughtUp), errors.Is(err, cache.ErrSnapshotUnavailable):
		return nil, nil, false
	}
	return nil, storeStatus(err, false, 0), true
}

// stream starts the 200 response and hands fasthttp a body that runs the
// watch on the connection's goroutine; the body ends the watch.
func (w *watchReq) stream(run func(sw *watchWriter) error) {
	s, rc, prefix, cancel := w.s, w.rc, w.prefix, w.cancel
	rc.SetStatusCode(200)
	rc.SetContentType(w.enc.enc.Output().WatchContentType())
	// Headers go out now, as kube-apiserver's: a watch may stay quiet.
	rc.Response.ImmediateHeaderFlush = true
	// The stream writer sets write deadlines on the connection itself
	// (rc may be recycled by fasthttp while the writer still runs, when
	// the client went away), so the connection serves this watch only.
	rc.SetConnectionClose()
	conn := rc.Conn()
	// The watch's own end (timeout, shutdown) is not an abort: its guard
	// only bounds each flush.
	g := s.guardWrites(context.Background(), rc, "watch")
	// The body is written by fasthttp on the connection's goroutine
	// (listBody.WriteTo): each flush of the watchWriter is one HTTP
	// chunk and one write, with no copy through SetBodyStreamWriter's
	// pipe and goroutine per event (measured: bench/RESULTS.md
	// ## watch fan-out).
	body := &listBody{done: func(int) { w.end() }, pc: g.Progress()}
	body.write = func(bw *bufio.Writer) (int, error) {
		m := s.watchMetrics()
		defer func() {
			if v := recover(); v != nil {
				s.panics.Inc()
				s.log.Error("panic streaming watch", zap.String("key", prefix), zap.Any("panic", v), zap.Stack("stack"))
			}
		}()
		// The client's hang-up ends the watch: noticed by the server's
		// one epoll goroutine (conn.Hangups), or where it cannot watch
		// this connection by a goroutine reading it.
		if stop, ok := s.hangups().Notify(conn, cancel); ok {
			defer stop()
		} else {
			go watchHangup(conn, cancel)
		}
		// A watch is long-lived and mostly idle: it holds a buffer only
		// while it has frames to write (watchWriter.take).
		sw := &watchWriter{guard: g, w: bw, m: m,
			ticket: w.ticket, idle: w.idleB, base: w.idleB + w.initial, initial: w.initial > 0}
		if l := s.cfg.Limiter; l != nil && w.ws.initial {
			ctx := w.ctx
			sw.yield = func() { l.Yield(ctx) }
		}
		err := run(sw)
		if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			err = sw.flush()
		}
		g.Done(err)
		if err != nil {
			s.log.Debug("watch ended", zap.String("key", prefix), zap.Error(err))
		}
		// A watch that ended (timeout, lag, re-list, shutdown, broken
		// etcd watch) ends its response cleanly: the client re-watches.
		return 0, nil
	}
	rc.SetBodyStream(body, -1)
}

// hangups is the server's conn.Hangups, started by the first watch (nil
// when epoll is not available: each watch then reads its connection).
func (s *Server) hangups() *conn.Hangups {
	s.hangOnce.Do(func() {
		h, err := conn.NewHangups()
		if err != nil {
			s.log.Warn("cannot watch connections for hang-ups with epoll; each watch reads its own", zap.Error(err))
		}
		s.hang.Store(h)
	})
	return s.hang.Load()
}

// watchHangup cancels a watch when its client closes the connection,
// where conn.Hangups cannot notice it (not Linux, not a socket).
// fasthttp does not tell a stream writer that the client left, and a quiet
// watch writes nothing that could fail, so the watch reads the connection
// itself: the response has Connection: close and the client sends nothing
// more, so a read returns only when the connection closes (or fasthttp's
// request read deadline passes: then it reads on without one).
func watchHangup(c net.Conn, cancel context.CancelFunc) {
	if c == nil {
		return
	}
	c = conn.Unwrap(c)
	var b [64]byte
	for {
		_, err := c.Read(b[:])
		if err == nil {
			continue // unexpected bytes: ignored
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			if c.SetReadDeadline(time.Time{}) == nil {
				continue
			}
		}
		cancel()
		return
	}
}

// doneCtx is an ended context: Watcher.Next(doneCtx) returns an event
// only if one is ready, without waiting.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()
