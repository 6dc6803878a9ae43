package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// notOlderThanWait is how long a request for a future resourceVersion waits
// before 504 ResourceVersionTooLarge, as kube-apiserver's watch cache.
const notOlderThanWait = 3 * time.Second

// inlineBytes: a list whose first page holds everything and whose values
// total at most this many bytes is encoded in the handler and sent with a
// Content-Length instead of streamed.
const inlineBytes = 256 << 10

// decodeError is a stored value that cannot be decoded.
type decodeError struct {
	key string
	err error
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("cannot decode object stored at %q: %v", e.key, e.err)
}

func (e *decodeError) Unwrap() error { return e.err }

// reqState is one resource request's routing result, shared by get and
// list.
type reqState struct {
	s       *Server
	r       *resource.Resource
	ri      *RequestInfo     // the resolved request; nil for a cache fill
	p       request.Route    // ri's route
	q       Params           // ri's parameters
	enc     encoding.Encoder // the negotiated representation; nil before negotiation
	verb    string
	start   time.Time
	release func()
	// drain, set by admit with release, gives back the request's seat
	// while keeping its bytes (ratelimit.Ticket.Drain) once its body is
	// handed to fasthttp (setBody); release then returns the bytes.
	drain func()
	// reserve, set by admit with release, reserves what a body of held
	// bytes needs beyond the request's reservation (setBody).
	reserve func(held int64) error
	// yield, set by admit for a LIST, is called after each flush with the
	// bytes written so far; for a bulk LIST it pauses the stream while short
	// requests are in flight (bulkYield, ratelimit.Limiter.Yield).
	yield func(written int)
	// gzip: the response may be compressed (the request accepts gzip and
	// compression is on); it is when larger than conn.GzipThreshold (proxy/conn/gzip.go).
	gzip bool
}

// finish records the request's metrics and releases its admission.
func (st *reqState) finish(code int, bytes int) {
	if st.release != nil {
		st.release()
		st.release = nil
	}
	res := ""
	if st.r != nil {
		res = st.r.GroupResource()
	}
	out := encoding.Output{}
	if st.enc != nil {
		out = st.enc.Output()
	}
	labels := `{verb="` + verbLabel(st.verb) + `",resource="` + res + `"`
	ms := st.s.ms
	ms.GetOrCreateCounter(`lazyapi_apiserver_request_total` + labels + `,code="` + strconv.Itoa(code) + `",format="` + out.String() + `"}`).Inc()
	ms.GetOrCreatePrometheusHistogram(`lazyapi_apiserver_request_duration_seconds` + labels + `}`).UpdateDuration(st.start)
	ms.GetOrCreateCounter(`lazyapi_apiserver_response_bytes_total` + labels + `}`).Add(bytes)
}

// verbLabel is the metrics' verb label of a request verb: kube-apiserver's
// apiserver_request_total writes the verbs it serves in upper case (GET,
// LIST, WATCH, CONNECT), the methods no route serves as metricVerb gives
// them, and "other" in lower case.
func verbLabel(verb string) string {
	switch verb {
	case "get":
		return "GET"
	case "list":
		return "LIST"
	case "watch":
		return "WATCH"
	case "connect":
		return "CONNECT"
	}
	return verb
}

// metricVerb is the verb label of a request with a method no route
// serves: the method when it is one of kube-apiserver's request methods,
// else "other" (kube-apiserver's metrics.cleanVerb), so that a client
// cannot add a series per method name it invents (40 requests with 200 KB
// method names made /metrics 128 MB).
func metricVerb(method []byte) string {
	for _, m := range [...]string{"POST", "PUT", "PATCH", "DELETE", "CONNECT"} {
		if string(method) == m {
			return m
		}
	}
	return "other"
}

// fail writes a Status error and records the request.
func (st *reqState) fail(rc *fasthttp.RequestCtx, ef encoding.Format, e *StatusError) {
	if e.Status.Code == 503 && !st.s.etcdMovedSince(st.start) {
		st.s.etcdDownAt.Store(time.Now().UnixNano())
	}
	st.s.writeStatus(rc, ef, e)
	st.finish(int(e.Status.Code), len(rc.Response.Body()))
}

// serveResource serves GET, LIST and WATCH of a resource route; it reads
// the request from ri only. Its phases: the route's resource
// (resourceOf), the checks of a read's parameters (checkRead), the
// watch, or the encoder (chooseEncoder) and the GET or LIST.
func (s *Server) serveResource(rc *fasthttp.RequestCtx, ri *RequestInfo) {
	accept := string(rc.Request.Header.Peek("Accept"))
	ef := encoding.ErrorFormat(accept)
	p := ri.Route
	kind := readKindOf(ri)
	watch := kind == readWatch
	st := &reqState{s: s, ri: ri, p: p, start: time.Now(), verb: "get"}
	if p.Name == "" {
		st.verb = "list"
	}
	if !s.resourceOf(rc, st, ef) || !checkRead(rc, st, ef, kind) {
		return
	}
	st.gzip = !s.cfg.DisableCompression && conn.AcceptsGzip(rc.Request.Header.Peek("Accept-Encoding"))
	if watch {
		st.gzip = false // never for watches, as kube-apiserver
		st.verb = "watch"
		s.serveWatch(rc, st, accept, ef)
		return
	}
	if p.Name == "" && st.q.SendInitialEvents != nil {
		// kube-apiserver's ValidateListOptions (a GET's GetOptions have
		// no sendInitialEvents).
		st.fail(rc, ef, badRequestErr("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"))
		return
	}
	if !s.chooseEncoder(rc, st, ef, accept) {
		return
	}
	if s.etcdDown() && !s.cacheServesAny(st.r, st.q) {
		// Not st.fail: a refusal without asking etcd must not extend
		// the hold, or requests arriving within etcdDownHold of each
		// other would keep answering 503 after etcd is back.
		e := unavailable(store.ErrUnavailable)
		s.writeStatus(rc, ef, e)
		st.finish(int(e.Status.Code), len(rc.Response.Body()))
		return
	}
	if p.Name == "" && p.Subresource == "" && s.sharesList(st) {
		s.serveSharedList(rc, st, ef)
		return
	}
	ctx, cancel := context.WithTimeout(s.baseCtx, s.cfg.RequestTimeout)
	if err := s.admit(ctx, rc, st); err != nil {
		cancel()
		st.fail(rc, ef, admissionStatus(err))
		return
	}
	if p.Name != "" || p.Subresource != "" {
		defer cancel()
		s.serveGet(ctx, rc, st, ef)
		return
	}
	s.serveList(ctx, cancel, rc, st, ef)
}

// resourceOf finds the resource of st's route (st.r, st.ri.Entry) and
// answers what kube-apiserver's router answers when it serves no read
// there: connect subresources, methods other than GET and HEAD, unknown
// groups and routes, create-only subresources, versions converted by a
// webhook. It returns false when it answered.
func (s *Server) resourceOf(rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format) bool {
	p := st.p
	r, ok := s.cfg.Resources.Lookup(p.Group, p.Version, p.Resource)
	if ok && routed(r, &p) && r.Subresource(p.Subresource) == resource.SubConnect {
		// Any method: kubectl exec and attach POST.
		st.r, st.verb = r, "connect"
		st.fail(rc, ef, connectNotServed(r, &p))
		return false
	}
	if !rc.IsGet() && !rc.IsHead() {
		st.verb = metricVerb(rc.Method())
		st.fail(rc, ef, methodNotAllowed(string(rc.Method())))
		return false
	}
	if !ok && p.Group != "" && !resource.BuiltinGroup(p.Group) {
		// A group with no routes in kube-apiserver (unknown, or a
		// custom resource group, which apiextensions-apiserver
		// delegates): its NotFound handler's plain text.
		s.writeNotFound(rc, ef, "/apis/"+p.Group)
		st.finish(404, len(rc.Response.Body()))
		return false
	}
	if !ok || !routed(r, &p) {
		st.fail(rc, ef, notFoundPath())
		return false
	}
	st.r, st.ri.Entry = r, r
	if r.Warning != "" {
		// kube-apiserver adds a deprecated version's warning to every
		// response of the resource's routes, errors included.
		rc.Response.Header.Add("Warning", r.Warning)
	}
	if r.Subresource(p.Subresource) == resource.SubCreateOnly {
		// go-restful has a POST route only.
		st.fail(rc, ef, &StatusError{Status: codec.Status{Code: 405, Reason: "MethodNotAllowed",
			Message: "the server does not allow this method on the requested resource",
			Details: &codec.StatusDetails{}}})
		return false
	}
	if !r.Servable() {
		// A custom resource's version whose CRD converts with a webhook:
		// lazyapi does not call conversion webhooks. 404 is what generic
		// clients (discovery walkers, backup tools, informers) handle
		// best: they treat the version as absent and carry on; the
		// message says why.
		st.fail(rc, ef, &StatusError{Status: codec.Status{Code: 404, Reason: "NotFound",
			Message: fmt.Sprintf("%s/%s %s is stored as version %s and its CustomResourceDefinition converts between versions with a webhook, which lazyapi does not call: request %s/%s instead",
				r.Group, r.Version, r.Resource, r.StorageVersion, r.Group, r.StorageVersion),
			Details: &codec.StatusDetails{Group: r.Group, Kind: r.Resource}}})
		return false
	}
	return true
}

// readKind is what a read of a resource route is, as its checks see it.
type readKind uint8

const (
	readCollection readKind = iota // a LIST (or a GET of a collection)
	readNamed                      // a GET of a named object or its subresource
	readWatch                      // a watch
)

// readKindOf is ri's kind. A watch is what kube-apiserver's router serves
// as one: a /watch/ path, or watch=true on a collection (ri.Verb); a watch
// parameter on a named object is ignored (GetOptions have none).
func readKindOf(ri *RequestInfo) readKind {
	p := ri.Route
	named := p.Name != "" || p.Subresource != ""
	switch {
	case p.Watch || (!named && ri.Verb == "watch"):
		return readWatch
	case named:
		return readNamed
	}
	return readCollection
}

// checkRead takes the request's parameters (st.q) and refuses, before
// reading, what kube-apiserver refuses: parameters that did not convert,
// and on a GET a namespaced route without a namespace or an invalid name.
// It returns false when it answered.
func checkRead(rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format, kind readKind) bool {
	ri, p := st.ri, &st.p
	if ri.ParamsErr != nil {
		st.fail(rc, ef, badRequestErr(ri.ParamsErr.Error()))
		return false
	}
	st.q = ri.Params
	if kind == readNamed {
		// The registry's key function (NamespaceKeyFunc,
		// NoNamespaceKeyFunc) refuses these before reading.
		if p.InNamespace && p.Namespace == "" {
			st.fail(rc, ef, badRequestErr("Namespace parameter required."))
			return false
		}
		if err := request.ValidName(p.Name); err != nil {
			st.fail(rc, ef, badRequestErr(err.Error()))
			return false
		}
	}
	return true
}

// chooseEncoder negotiates the response's media type from accept and
// sets st.enc; it answers 406 (or 500 for a table without columns) and
// returns false when it cannot.
func (s *Server) chooseEncoder(rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format, accept string) bool {
	r := st.r
	kind := encoding.AnswerObject
	if st.p.Name == "" {
		kind = encoding.AnswerList
	}
	out, ok := encoding.Negotiate(accept, kind, r.JSONStorage)
	if !ok {
		st.fail(rc, ef, notAcceptable())
		return false
	}
	cc, err := encoding.TableColumns(r, out)
	if err != nil {
		st.fail(rc, ef, internalErr(err.Error()))
		return false
	}
	st.enc = encoding.NewEncoder(s.schema, r, out, cc, includeObject(st.q.IncludeObject), time.Now())
	return true
}

// cacheServesAny reports whether a request is a resourceVersion=0 read the
// watch cache answers without etcd (the resource is cached and ready): as
// kube-apiserver, such reads are served while etcd is unavailable, so the
// etcd-down hold does not apply to them.
func (s *Server) cacheServesAny(r *resource.Resource, q Params) bool {
	if q.ResourceVersion != "0" || q.Continue != "" {
		return false
	}
	cr := s.cacheResource(r)
	return cr != nil && cr.Ready()
}

// routed reports whether kube-apiserver registers a route for p (a GET on
// it): go-restful answers the others 404 before any handler runs.
func routed(r *resource.Resource, p *request.Route) bool {
	named := p.Name != "" || p.Subresource != ""
	switch {
	case p.InNamespace && !r.Namespaced:
		return false // no namespaces/{namespace}/nodes
	case named && r.Namespaced && !p.InNamespace:
		return false // no configmaps/{name} across namespaces
	case p.Subresource == "":
		return p.Rest == ""
	}
	switch r.Subresource(p.Subresource) {
	case resource.SubNone:
		return false
	case resource.SubConnect:
		return p.Subresource == "proxy" || p.Rest == ""
	}
	return p.Rest == ""
}

// tooManyRequests is kube-apiserver's 429 for a refused admission. An
// error that is not the limiter's (a Config.Admit hook's) is retried after
// 1 s: client-go retries a 429 only when it has Retry-After.
func tooManyRequests(err error) *StatusError {
	retry, ok := ratelimit.RetryAfter(err)
	if !ok {
		retry = 1
	}
	return &StatusError{Status: codec.Status{Code: 429, Reason: "TooManyRequests",
		Message: "Too many requests, please try again later: " + err.Error(),
		Details: &codec.StatusDetails{RetryAfterSeconds: int32(retry)}}, RetryAfter: retry}
}

// admissionStatus is the Status answering a refused admission: the
// refusal's own (a Config.Admit hook's, a cache fill's), else 429.
func admissionStatus(err error) *StatusError {
	var se *StatusError
	if errors.As(err, &se) {
		return se
	}
	return tooManyRequests(err)
}

// readAdmissionStatus is admissionStatus for the admission of a read run
// for others (a shared group, a watch's initial list), whose ctx may end
// while it waits (its members left): then the store's answer to ctx's end.
func readAdmissionStatus(ctx context.Context, err error) *StatusError {
	var se *StatusError
	if !errors.As(err, &se) && ctx.Err() != nil {
		return storeStatus(err, false, 0)
	}
	return admissionStatus(err)
}

// listPrefix returns the etcd prefix of a collection, ending in "/".
func (s *Server) listPrefix(r *resource.Resource, ns string) string {
	if ns == "" {
		return s.prefix + "/" + r.KeyPrefix + "/"
	}
	return s.prefix + "/" + r.KeyPrefix + "/" + ns + "/"
}

// waitForRV waits until etcd's revision reaches want, at most
// notOlderThanWait, then answers 504 ResourceVersionTooLarge.
func (s *Server) waitForRV(ctx context.Context, want int64) error {
	deadline := time.Now().Add(notOlderThanWait)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		cur, err := s.store.Revision(ctx)
		if err != nil {
			return err
		}
		if cur >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return tooLargeRV(want, cur)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// unwrap removes the storage envelope of kv's value; JSON objects get the
// resource's apiVersion and kind.
func (s *Server) unwrap(r *resource.Resource, kv *mvccpb.KeyValue) (codec.Object, error) {
	obj, err := codec.Unwrap(kv.Value)
	if err != nil {
		s.decodeErrs.Inc()
		return obj, &decodeError{key: string(kv.Key), err: err}
	}
	return typeMeta(r, obj), nil
}

// typeMeta gives obj the resource's apiVersion and kind: a JSON object has
// none from its envelope, and a resource served at another version than it
// is stored at (same schema, Resource.RewritesTypeMeta) is written with the
// version served.
func typeMeta(r *resource.Resource, obj codec.Object) codec.Object {
	switch {
	case r.Conversion != nil:
		// Converted by the encoder (convertEncoder): the stored type.
		if obj.Kind == "" {
			obj.APIVersion, obj.Kind = r.StorageAPIVersion(), r.Kind
		}
	case r.SetsAPIVersion():
		// Conversion strategy None: apiVersion set in place when the
		// object was stored at another version (the unstructured
		// encoder writes it first: one prefix check otherwise).
		want := r.APIVersion()
		if !codec.HasJSONAPIVersion(obj.Raw, want) {
			if raw, err := codec.AppendJSONAPIVersion(nil, obj.Raw, want); err == nil {
				obj.Raw = raw
			}
		}
		obj.APIVersion, obj.Kind = want, r.Kind
	case r.RewritesTypeMeta() && obj.Format == codec.FormatJSON:
		obj.Raw = codec.AppendJSONTypeMeta(nil, obj.Raw, r.APIVersion(), r.Kind)
		obj.APIVersion, obj.Kind = r.APIVersion(), r.Kind
	case obj.Kind == "" || r.RewritesTypeMeta():
		obj.APIVersion, obj.Kind = r.APIVersion(), r.Kind
	}
	return obj
}

// getObject reads the object at key: from the watch cache first, from etcd
// when the cache cannot answer (at the request's resourceVersion).
func (s *Server) getObject(ctx context.Context, st *reqState, key string) (kv store.KV, found, cached bool, se *StatusError) {
	r, q := st.r, st.q
	if cr := s.cacheResource(r); cr != nil {
		o := cacheReadOptions(q, 0, false)
		snap, outcome, se := s.cacheSnapshot(ctx, cr, o)
		switch outcome {
		case cacheFail:
			return kv, false, false, se
		case cacheServe:
			var it cache.Item
			if it, found = snap.Get(key); found {
				kv = store.KV{Key: bytesutil.ToUnsafeBytes(it.Key), Value: it.Value, ModRevision: it.Rev}
			}
			return kv, found, true, nil
		}
	}
	var err error
	switch {
	case q.ResourceVersion == "":
		kv, _, found, err = s.store.Get(ctx, key, 0)
	case q.ResourceVersion == "0":
		kv, _, found, err = s.store.GetSerializable(ctx, key, 0)
	default:
		rv, _ := request.ParseRV(q.ResourceVersion) // validated
		if err = s.waitForRV(ctx, rv); err == nil {
			kv, _, found, err = s.store.Get(ctx, key, 0)
		}
	}
	if err != nil {
		return kv, false, false, storeStatus(err, false, 0)
	}
	return kv, found, false, nil
}

// serveGet serves one object: read (getObject), decrypted, encoded.
func (s *Server) serveGet(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format) {
	r := st.r
	key := s.listPrefix(r, st.p.Namespace) + st.p.Name
	kv, found, cached, se := s.getObject(ctx, st, key)
	if se != nil {
		st.fail(rc, ef, se)
		return
	}
	if !found {
		st.fail(rc, ef, notFoundObject(r, st.p.Name))
		return
	}
	if !cached {
		s.observeGet(st, len(kv.Key)+len(kv.Value))
	}
	value, err := s.plaintext(ctx, r.GroupResource(), kv.Key, kv.Value, cached)
	if err != nil {
		se, _ := decryptStatus(err)
		s.log.Error("cannot decrypt stored object", zap.Error(err))
		st.fail(rc, ef, se)
		return
	}
	if r.Subresource(st.p.Subresource) == resource.SubScale {
		s.serveScale(rc, st, ef, value, kv.ModRevision)
		return
	}
	var obj codec.Object
	kept := s.keptObject(st.enc, kv.Key, kv.Value, value, kv.ModRevision)
	if kept != nil {
		obj.Format = codec.FormatProtobuf // not unwrapped: served from kept
	} else {
		mkv := mvccpb.KeyValue{Key: kv.Key, Value: value, ModRevision: kv.ModRevision}
		if obj, err = s.unwrap(r, &mkv); err != nil {
			s.log.Error("cannot decode stored object", zap.String("key", key), zap.Error(err))
			st.fail(rc, ef, internalErr(err.Error()))
			return
		}
	}
	buf := getBuf()
	defer putBuf(buf)
	need := len(obj.Raw)*4/3 + 4<<10
	if kept != nil {
		need = len(kept) + 1
	}
	if cap(*buf) < need {
		// The encoding in one allocation (a large object's JSON grown by
		// append would leave its smaller copies to the collector).
		// 4/3: the base64 of a Secret's data.
		*buf = make([]byte, 0, need)
	}
	var b []byte
	if kept != nil {
		s.render.hits.Inc()
		b = append(append((*buf)[:0], kept...), '\n') // as jsonEncoder.object
	} else {
		b, err = s.object(st.enc, (*buf)[:0], kv.Key, kv.Value, obj, kv.ModRevision)
	}
	*buf = b
	if err != nil {
		s.decodeErrs.Inc()
		s.log.Error("cannot encode stored object", zap.String("key", key), zap.Error(err))
		st.fail(rc, ef, internalErr((&decodeError{key: key, err: err}).Error()))
		return
	}
	s.countServed(st.enc, obj, 1)
	rc.SetStatusCode(200)
	rc.SetContentType(st.enc.Output().ContentType(false))
	if st.setBodyOwned(rc, ef, b, buf) {
		st.finish(200, len(b))
	}
}

// countServed counts n objects (the last of them obj) as passthrough
// (stored bytes copied with the RV patched) or transcoded.
func (s *Server) countServed(enc encoding.Encoder, obj codec.Object, n int) {
	if n == 0 {
		return
	}
	if enc.Passthrough(obj) {
		s.passthru.Add(n)
	} else {
		s.transcoded.Add(n)
	}
}

// statusOf returns the Status to answer err with.
func statusOf(err error) *StatusError {
	if se, ok := decryptStatus(err); ok {
		return se
	}
	var de *decodeError
	if errors.As(err, &de) {
		return internalErr(de.Error())
	}
	return storeStatus(err, false, 0)
}

// streamWriter is the write side of a streamed response: it encodes into
// buf and hands buf to the connection every flushSize bytes.
type streamWriter struct {
	w     *bufio.Writer
	buf   []byte
	n     int
	yield func(written int) // reqState.yield, may be nil
	guard *conn.WriteGuard  // deadlines of the writes; nil: none
}

// maybeFlush writes buf out when it passed flushSize. A write error means
// the client is gone.
func (sw *streamWriter) maybeFlush() error {
	if len(sw.buf) < flushSize {
		return nil
	}
	return sw.flush()
}

func (sw *streamWriter) flush() error {
	if len(sw.buf) == 0 {
		return nil
	}
	sw.guard.Arm()
	n, err := sw.w.Write(sw.buf)
	sw.n += n
	sw.buf = sw.buf[:0]
	if err != nil {
		return fmt.Errorf("cannot write response: %w", err)
	}
	if err := sw.w.Flush(); err != nil {
		return fmt.Errorf("cannot write response: %w", err)
	}
	if sw.yield != nil {
		sw.yield(sw.n)
	}
	return nil
}
