package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/store"
)

// pager is a range read page by page at one revision: a store.Pager (etcd)
// or a cachePager (a watch cache snapshot).
type pager interface {
	Next(ctx context.Context) ([]*mvccpb.KeyValue, error)
	More() bool
	RemainingAfter(i int) int64
	Rev() int64
	AvgSize() int
	SetPrefetch(ctx context.Context, on bool)
	Close()
}

// LIST, streamed.
//
// A list is read from etcd page by page at one revision (the first page's,
// or the continue token's) and written item by item; a request holds at most
// one etcd page and one write buffer, whatever the collection's size.
//
// The list's metadata (continue, remainingItemCount) and, for protobuf, the
// total size of the items must be known before the first byte. When the
// first page holds the whole answer (the end of the range, or limit
// matches), they are computed from that page. Otherwise, for protobuf and
// for JSON/Table/partial with limit, a first pass reads the range at the
// pinned revision holding one page at a time and computes the sizes, the
// last key and the remaining count; then a second pass streams the items
// (reading the range again up to that last key). JSON and Table without
// limit and YAML (whose list metadata comes last) stream in one pass.

// lister is one LIST request's state.
type lister struct {
	s      *Server
	st     *reqState
	f      filter
	prefix string // the collection's key prefix, ending in "/"
	start  string // first key (continue token or name selector)
	end    string // last key (name selector), "" for none
	rev    int64  // revision to read at; 0: current
	serial bool   // serializable reads
	limit  int64
	meta   codec.Meta
	now    time.Time
	uri    string // for logs from the stream writer
	enc    encoder
	layout listLayout // enc's
	// snap, when set, is the watch cache snapshot the list is served
	// from instead of etcd; attrs: the filter can be evaluated on its
	// items' cache.Attrs.
	snap  *cache.Snapshot
	attrs bool
	// render, when set, is the rendering cache a JSON list's items are
	// looked up in before their values are unwrapped (item).
	render *renderCache

	// Set by firstPage and plan.
	opts          store.ListOptions // the range read, at rev
	pg            pager             // the pager the items are streamed from
	page          []*mvccpb.KeyValue
	ws            walkState    // after plan: the metadata known before the first byte
	pageBytes     int          // the first page's value bytes
	pre           *[]byte      // the items encoded by the size pass (sizeEmit), or nil
	preFormat     codec.Format // of the objects in pre (metrics)
	firstComplete bool         // the first page is the whole answer
	lm            codec.ListMeta
	// ctx is the request's (for KMS calls); gr the resource's
	// "resource[.group]" (for decryption).
	ctx context.Context
	gr  string
}

// newPager returns a pager over opts's range from the snapshot or etcd.
func (l *lister) newPager(opts store.ListOptions) pager {
	if l.snap != nil {
		return newCachePager(l.snap, opts.Prefix, opts.Start, opts.End)
	}
	return l.s.store.NewPager(opts)
}

// walkPass is what a walk over the range is for.
type walkPass uint8

const (
	// passFirstPage: the size pass over the first page only (firstPage);
	// it stops at the page's end (walkState.partial).
	passFirstPage walkPass = iota
	// passSize: the size pass over the rest of the range (plan).
	passSize
	// passWrite: the write pass, whose items are encoded (write).
	passWrite
)

// walkState accumulates a walk over the range.
type walkState struct {
	n         int64  // matches so far
	size      int    // protobuf items size so far
	lastKey   []byte // key of the limit-th match
	hasMore   bool   // keys remain after lastKey
	remaining int64  // keys after lastKey
	partial   bool   // onePage walk stopped at the page's end with more pages
}

// walkItem is one matching item of a walk: its object (decoded) or its
// kept JSON rendering, and, in a size pass of a sized encoder, its item
// size.
type walkItem struct {
	obj     codec.Object
	decoded bool // obj is set (in the write pass unless json is)
	// json, when set, is the item's kept rendering (renderCache.kept,
	// never modified): the value was not unwrapped, obj has only its
	// Format.
	json []byte
	size int
}

// item evaluates the filter on kv, the i-th item of pg's last page, and
// returns it when it matches. In the write pass the item is decrypted and
// unwrapped. In a size pass it is decrypted only when it
// must be: a value the write pass will decrypt again is decided from the
// watch cache's attributes and the plaintext sizes it recorded
// (cache.Attrs.PlainSizes) when they tell, so that each value is decrypted
// once per read (a cached protobuf LIST of 10,000 Secrets decrypted each
// twice: 11-30x the unencrypted LIST's time).
func (l *lister) item(pg pager, i int, kv *mvccpb.KeyValue, pass walkPass) (walkItem, bool, error) {
	sizing := pass != passWrite
	cp, cached := pg.(*cachePager)
	var attrs cache.Attrs
	if cached && i < len(cp.attrs) {
		attrs = cp.attrs[i]
	}
	byAttrs := !l.f.empty() && cached && l.attrs && attrs.Valid()
	if byAttrs && !l.f.matchesAttrs(attrs) {
		return walkItem{}, false, nil // not decrypted, not unwrapped
	}
	if l.render != nil && (l.f.empty() || byAttrs) {
		// A JSON item whose rendering is kept is copied from it: its
		// value is not unwrapped, in the size pass nor in the write
		// pass (8.5% of a cached JSON LIST's CPU, perf, 2026-12-03).
		if b := l.keptJSON(kv, cached); b != nil {
			return walkItem{obj: codec.Object{Format: codec.FormatProtobuf}, json: b}, true, nil
		}
	}
	if sizing && l.pre == nil && l.s.decrypts(l.gr, kv.Value, cached) {
		// Whether it matches is known without the plaintext, or not
		// needed: a list without limit and without sizes streams the
		// items the write pass matches (the size pass then counts a
		// few more value bytes towards the inline bound). From the cache,
		// only values it could decrypt (Valid): one that failed fails
		// here, before the first byte.
		known := (cached && attrs.Valid() && (l.f.empty() || byAttrs)) || (!cached && l.f.empty())
		if l.layout != layoutSized && (known || l.limit == 0) {
			return walkItem{}, true, nil
		}
		z, ok := attrs.PlainSizes()
		if !cached && l.s.sizes != nil {
			// From etcd: the sizes a previous LIST's write pass
			// recorded (sizememo.go).
			z, ok = l.s.sizes.get(kv.Key, kv.ModRevision)
		}
		if known && ok {
			if n, ok := l.enc.itemSizeOf(z, kv.ModRevision); ok {
				return walkItem{size: n}, true, nil
			}
		}
	}
	var (
		obj codec.Object
		err error
	)
	if sizing && cached && attrs.Valid() && !encryption.Encrypted(kv.Value) {
		// Stored in plaintext, and the cache read it through the
		// resource's transformer (identity): the write pass runs it.
		obj, err = l.s.unwrap(l.st.r, kv)
	} else {
		obj, err = l.unwrap(kv, cached)
	}
	if err != nil {
		return walkItem{}, false, err
	}
	it := walkItem{obj: obj, decoded: true}
	if !l.f.empty() && !byAttrs {
		l.meta.Reset()
		if err := l.s.schema.PeekMeta(obj, &l.meta); err != nil {
			l.s.decodeErrs.Inc()
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
		ok, err := l.f.matches(l.s.schema, obj, &l.meta)
		if err != nil {
			l.s.decodeErrs.Inc()
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
		if !ok {
			return it, false, nil
		}
	}
	if sizing && l.layout == layoutSized {
		if it.size, err = l.enc.itemSize(obj, kv.ModRevision); err != nil {
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
	}
	return it, true, nil
}

// keptJSON returns the kept JSON rendering of kv's item, or nil: only for
// a value in the protobuf envelope that is served without a transformer
// (a value that is decrypted must be, to fail as it would otherwise).
func (l *lister) keptJSON(kv *mvccpb.KeyValue, cached bool) []byte {
	if !codec.IsProtobuf(kv.Value) || l.s.decrypts(l.gr, kv.Value, cached) {
		return nil
	}
	// Items of a built-in list carry no apiVersion and kind.
	return l.render.rendering(kv.Key, kv.ModRevision, false)
}

// appendItem appends it, the item of kv, to dst: its kept rendering, or
// encoded by Server.listItem.
func (l *lister) appendItem(dst []byte, it *walkItem, kv *mvccpb.KeyValue, first bool) ([]byte, error) {
	if it.json == nil {
		return l.s.listItem(l.enc, dst, kv.Key, kv.Value, it.obj, kv.ModRevision, first)
	}
	l.render.hits.Inc()
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	return append(dst, it.json...), nil
}

// unwrap decrypts and unwraps kv's value (kv itself is not changed).
func (l *lister) unwrap(kv *mvccpb.KeyValue, cached bool) (codec.Object, error) {
	if l.s.cfg.Encryption == nil {
		return l.s.unwrap(l.st.r, kv)
	}
	v, err := l.s.plaintext(l.ctx, l.gr, kv.Key, kv.Value, cached)
	if err != nil {
		return codec.Object{}, err
	}
	pkv := mvccpb.KeyValue{Key: kv.Key, Value: v, ModRevision: kv.ModRevision}
	return l.s.unwrap(l.st.r, &pkv)
}

// walk visits the matching items of page and, unless pass is
// passFirstPage, of the following pages of pg, until limit matches or the
// end of the range.
func (l *lister) walk(ctx context.Context, pg pager, page []*mvccpb.KeyValue, ws *walkState, pass walkPass,
	emit func(it *walkItem, kv *mvccpb.KeyValue) error) error {
	for {
		for i, kv := range page {
			it, ok, err := l.item(pg, i, kv, pass)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := emit(&it, kv); err != nil {
				return err
			}
			ws.n++
			if l.limit > 0 && ws.n == l.limit {
				ws.lastKey = append(ws.lastKey[:0], kv.Key...)
				ws.hasMore = i+1 < len(page) || pg.More()
				ws.remaining = pg.RemainingAfter(i)
				return nil
			}
		}
		if !pg.More() {
			return nil
		}
		if pass == passFirstPage {
			ws.partial = true
			return nil
		}
		var err error
		page, err = pg.Next(ctx)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
	}
}

// serveList serves a LIST in its phases: newLister (where and at which
// revision to read), firstPage (read and walk the first page: is it the
// whole answer?), plan (the metadata that must precede the first byte) and
// respond (one buffer, or a stream). cancel ends ctx; it is called when
// the response is complete (in the stream writer when streaming).
func (s *Server) serveList(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, st *reqState, ef format) {
	streaming := false
	defer func() {
		if !streaming {
			cancel()
		}
	}()
	l, se := s.newLister(ctx, rc, st)
	if se == nil {
		defer l.releasePre()
		se = l.prepare(ctx)
	}
	if se != nil {
		st.fail(rc, ef, se)
		return
	}
	streaming = l.respond(ctx, cancel, rc, ef)
}

// readStatus is storeStatus for an error of the LIST's etcd read. A
// continue token whose revision etcd compacted gets, as from
// kube-apiserver (etcd3's handleCompactedErrorForPaging), 410 Expired with
// a token in the Status's metadata.continue that resumes the list where
// the client stopped, at the latest revision (resourceVersion -1).
func (l *lister) readStatus(err error) *StatusError {
	se := storeStatus(err, l.st.q.Continue != "", l.rev)
	if l.st.q.Continue != "" && errors.Is(err, store.ErrCompacted) && se.Status.Code == 410 {
		if tok, terr := continueAt(l.start, l.prefix, -1); terr == nil {
			se.Status.Continue = tok
		}
	}
	return se
}

// newLister parses a LIST's selectors, continue token and resourceVersion
// into the range to read and its revision, from the watch cache's snapshot
// or etcd.
func (s *Server) newLister(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState) (*lister, *StatusError) {
	r, q := st.r, st.q
	l := &lister{s: s, st: st, prefix: s.listPrefix(r, st.p.Namespace), limit: q.Limit, now: time.Now(),
		enc: st.enc, layout: st.enc.layout(), ctx: ctx, gr: r.GroupResource()}
	if rc != nil { // nil: a shared LIST's group (sharedlist.go)
		l.uri = string(rc.RequestURI())
	}
	if c := st.enc.cached(); c != nil && c.row == nil {
		// A JSON list's items, as Server.listItem serves them.
		l.render = s.render
	}
	var err error
	l.f, err = parseFilter(q.LabelSelector, q.FieldSelector, r.ConvertFieldLabel)
	if err != nil {
		return nil, badRequestErr(err.Error())
	}
	if q.Continue != "" {
		l.start, l.rev, err = decodeContinue(q.Continue, l.prefix)
		if err != nil {
			return nil, badRequestErr(err.Error())
		}
		if l.rev < 0 {
			// The token of a compacted continuation's 410: the rest
			// of the list at the latest revision (inconsistent).
			l.rev = 0
		}
		l.serial = q.ResourceVersion == "0"
	}
	// The watch cache first; etcd when it cannot answer.
	if cr := s.cacheResource(r); cr != nil {
		snap, outcome, se := s.cacheSnapshot(ctx, cr, cacheReadOptions(q, l.rev, true))
		switch outcome {
		case cacheFail:
			return nil, se
		case cacheServe:
			l.snap = snap
			l.attrs = l.f.attrsCover(r)
		}
		if s.ignoresLimit(&q) {
			l.limit = 0
		}
	}
	if q.Continue == "" && l.snap == nil {
		rv, _ := parseRV(q.ResourceVersion) // validated
		switch {
		case q.ResourceVersion == "":
		case rv == 0:
			l.serial = true
		case q.ResourceVersionMatch == matchExact, q.ResourceVersionMatch == "" && q.Limit > 0:
			// Exact; kube-apiserver treats resourceVersion=N with limit
			// and no match as Exact (legacy).
			l.rev = rv
		default: // NotOlderThan
			if err := s.waitForRV(ctx, rv); err != nil {
				return nil, storeStatus(err, false, rv)
			}
		}
	}
	// metadata.name=x in one namespace (or of a cluster-scoped resource)
	// names one key: read only that key.
	if l.f.name != "" && (st.p.Namespace != "" || !r.Namespaced) {
		key := l.prefix + l.f.name
		l.end = key
		if l.start < key {
			l.start = key
		}
	}
	return l, nil
}

// firstPage reads the first page (pinning the list's revision) and walks
// it: item sizes for a sized encoder, the encoded items while they fit
// protoBufferBytes, and whether the page is the whole answer.
func (l *lister) firstPage(ctx context.Context) *StatusError {
	s := l.s
	want := 0
	if l.f.empty() && l.limit > 0 {
		want = int(l.limit)
	}
	hintKey := s.prefix + "/" + l.st.r.KeyPrefix + "/"
	l.opts = store.ListOptions{Prefix: l.prefix, Start: l.start, End: l.end, Rev: l.rev, Serializable: l.serial, Want: want}
	l.opts.SizeHint = s.stats.hint(hintKey)
	l.pg = l.newPager(l.opts)
	page, err := l.pg.Next(ctx)
	if errors.Is(err, store.ErrFutureRevision) {
		// As kube-apiserver: an Exact read (or a continue token) of a
		// revision etcd has not reached waits for it up to
		// notOlderThanWait, then is 504 naming the current revision.
		l.pg.Close()
		if werr := s.waitForRV(ctx, l.rev); werr != nil {
			return storeStatus(werr, false, l.rev)
		}
		l.pg = l.newPager(l.opts)
		page, err = l.pg.Next(ctx)
	}
	if avg := l.pg.AvgSize(); avg > 0 && avg != l.opts.SizeHint {
		s.stats.setHint(hintKey, avg)
	}
	if err != nil {
		return l.readStatus(err)
	}
	l.page = page
	l.rev = l.pg.Rev()
	l.opts.Rev = l.rev

	// A sized (protobuf) answer up to protoBufferBytes is kept encoded
	// during the size pass, so that it needs no second read of etcd.
	// A first page whose values exceed it will not fit: it is not buffered
	// at all (growing a buffer to the bound and dropping it cost a large
	// protobuf LIST ~5 MB of garbage).
	// Not for a watch cache snapshot: walking it again costs no etcd read,
	// and streaming avoids growing and copying a buffer of the whole
	// answer (a cached protobuf LIST of 800 KB spent more CPU per byte
	// than the JSON one because of it).
	if l.layout == layoutSized && l.snap == nil {
		valueBytes := 0
		for _, kv := range page {
			valueBytes += len(kv.Value)
		}
		if valueBytes <= protoBufferBytes && !l.sizesRecorded(page) {
			l.pre = getBuf()
		}
	}
	if l.pre == nil && l.sizePassDecrypts(page) {
		// The size pass decrypts every value it examines (to evaluate
		// the selector): its encoding of the matches, kept up to
		// protoBufferBytes, is the answer, so that no value is
		// decrypted again by a write pass.
		l.pre = getBuf()
	}
	if err := l.walk(ctx, l.pg, page, &l.ws, passFirstPage, l.sizeEmit); err != nil {
		s.logListError(l.uri, err)
		return statusOf(err)
	}
	l.firstComplete = !l.ws.partial
	return nil
}

// sizePassDecrypts reports whether the size pass of this LIST decrypts
// each value it examines, page being the first page: values encrypted at
// rest (or of a resource a rule names), not from a cache holding them
// decrypted, and a selector the watch cache's attributes do not cover,
// evaluated to find the limit-th match (a list with limit) or the sizes
// of the matches (protobuf). Other size passes decrypt nothing
// (lister.item).
func (l *lister) sizePassDecrypts(page []*mvccpb.KeyValue) bool {
	enc := l.s.cfg.Encryption
	if enc == nil || l.f.empty() || (l.snap != nil && (l.attrs || l.s.cfg.CacheDecrypted)) ||
		(l.layout != layoutSized && l.limit == 0) {
		return false
	}
	if enc.Transforms(l.gr, nil) {
		return true
	}
	for _, kv := range page {
		if encryption.Encrypted(kv.Value) {
			return true
		}
	}
	return false
}

// sizesRecorded reports whether the size pass of a protobuf list from
// etcd over protoBufferBytes can take the sizes of its values from what an
// earlier LIST recorded (sizememo.go) instead of decrypting them: the
// encrypted values of page, the first page, have recorded sizes, and those
// sizes times the number of items the list will hold exceed the bound.
// The list is then not encoded during the size pass (that encoding
// decrypts each value, which the write pass would decrypt again once it
// outgrew the bound); the write pass decrypts each value once, at the
// cost of a second read of etcd, as for any list over the bound. A list
// within the bound keeps its single read of etcd and single decryption.
func (l *lister) sizesRecorded(page []*mvccpb.KeyValue) bool {
	if l.s.sizes == nil || !l.f.empty() || len(page) == 0 {
		return false
	}
	size := 0
	for _, kv := range page {
		if !encryption.Encrypted(kv.Value) {
			return false // not recorded: the size pass unwraps it
		}
		z, ok := l.s.sizes.get(kv.Key, kv.ModRevision)
		if !ok {
			return false
		}
		n, ok := l.enc.itemSizeOf(z, kv.ModRevision)
		if !ok {
			return false
		}
		size += n
	}
	items := int64(len(page)) + l.pg.RemainingAfter(len(page)-1)
	if l.limit > 0 {
		items = min(items, l.limit)
	}
	return int64(size)/int64(len(page))*items > protoBufferBytes
}

// sizeEmit is the walk of the size pass: it counts the values' bytes, for
// a sized encoder the items' sizes, and the items' encoding into pre while
// it fits.
func (l *lister) sizeEmit(it *walkItem, kv *mvccpb.KeyValue) error {
	l.pageBytes += len(kv.Value)
	if l.layout == layoutSized {
		l.ws.size += it.size
		if l.pre != nil && l.ws.size > protoBufferBytes {
			l.dropPre() // too large: stream in a second pass
		}
	}
	if l.pre != nil {
		if !it.decoded && it.json == nil {
			panic("BUG: a size pass that encodes skipped the decoding")
		}
		var err error
		if *l.pre, err = l.appendItem(*l.pre, it, kv, l.ws.n == 0); err != nil {
			l.s.decodeErrs.Inc()
			return &decodeError{key: string(kv.Key), err: err}
		}
		l.preFormat = it.obj.Format
		if len(*l.pre) > protoBufferBytes {
			l.dropPre() // too large: stream in a second pass
		}
	}
	return nil
}

// dropPre gives up the size pass's encoding (the list streams instead).
func (l *lister) dropPre() {
	*l.pre = nil
	l.pre = nil
}

// releasePre returns the size pass's buffer to the pool.
func (l *lister) releasePre() {
	if l.pre != nil {
		putBuf(l.pre)
		l.pre = nil
	}
}

// plan completes what must be known before the first byte when the first
// page is not the whole answer: for layoutSized or a limit, a pass over
// the rest of the range (planPass); then the list metadata, unless it is
// written last (layoutMetaLast).
func (l *lister) plan(ctx context.Context) *StatusError {
	l.lm = codec.ListMeta{ResourceVersion: l.rev}
	if l.layout == layoutMetaLast {
		return nil // the write pass learns the metadata
	}
	if l.ws.partial && (l.layout == layoutSized || l.limit > 0) {
		if se := l.planPass(ctx); se != nil {
			return se
		}
	}
	if !l.ws.partial {
		if err := l.setContinue(&l.lm, &l.ws); err != nil {
			return internalErr(err.Error())
		}
	}
	return nil
}

// planPass reads the rest of the range at the pinned revision for the
// head: the items' sizes (layoutSized) or the limit-th key and the
// remaining count, after which the items are read again from the start.
func (l *lister) planPass(ctx context.Context) *StatusError {
	s := l.s
	l.page = nil
	if l.layout != layoutSized && l.f.empty() && l.snap == nil {
		l.pg.Close()
		// Only the limit-th key is needed: read keys only.
		var n int64
		res, err := s.store.List(ctx, store.ListOptions{Prefix: l.prefix, Start: l.start, End: l.end, Rev: l.rev,
			Serializable: l.serial, Want: int(l.limit), KeysOnly: true}, func(store.KV) (bool, error) {
			n++
			return n == l.limit, nil
		})
		if err != nil {
			return l.readStatus(err)
		}
		l.ws = walkState{n: n, lastKey: res.LastKey, hasMore: n == l.limit && res.More, remaining: res.Remaining}
	} else {
		l.pg.SetPrefetch(ctx, true)
		err := l.walk(ctx, l.pg, nil, &l.ws, passSize, l.sizeEmit)
		l.pg.Close()
		if err != nil {
			s.logListError(l.uri, err)
			return statusOf(err)
		}
	}
	l.ws.partial = false
	if l.ws.hasMore {
		l.opts.End = string(l.ws.lastKey)
	}
	l.pg = l.newPager(l.opts)
	return nil
}

// prepare runs the phases before the first byte: firstPage and plan.
func (l *lister) prepare(ctx context.Context) *StatusError {
	if se := l.firstPage(ctx); se != nil {
		return se
	}
	return l.plan(ctx)
}

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
func (l *lister) respond(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, ef format) (streaming bool) {
	rc.SetStatusCode(200)
	rc.SetContentType(l.enc.output().contentType(true))
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
	if l.layout == layoutMetaLast {
		if err := l.setContinue(&lm, &l.ws); err != nil {
			return dst, err
		}
	}
	dst = l.enc.listHead(dst, lm, l.ws.size)
	dst = append(dst, *l.pre...)
	return l.enc.listTail(dst, lm), nil
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
func (l *lister) respondEncoded(rc *fasthttp.RequestCtx, ef format) {
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
func (l *lister) respondInline(ctx context.Context, rc *fasthttp.RequestCtx, ef format) {
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
	if l.pre != nil && l.layout == layoutMetaLast && ls.planned.partial {
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
	err := ls.l.write(ctx, sw, ls.pg, ls.page, encoded, ls.lm, ls.planned, false)
	if err == nil {
		err = sw.flush()
	}
	return err
}

// respondStream hands the list to fasthttp as a streamed body, written
// item by item on the connection's goroutine.
// A request that accepts gzip is answered by serveGzipStream (gzip.go).
func (l *lister) respondStream(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, ef format) {
	s, st := l.s, l.st
	ls := l.stream()
	guard := s.guardWrites(ctx, rc, "list")
	body := &listBody{done: func(n int) {
		// The guard ends before the request's context: a body never
		// written (HEAD, a connection closed first) never reached
		// guard.done in write, and the context's end would otherwise
		// move the connection's write deadline into the past while
		// fasthttp still has this response's headers to flush (the
		// client then saw a closed connection and retried the HEAD).
		guard.done(nil)
		cancel()
		st.finish(200, n)
	}, pc: guard.pc}
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
		// coalesceBytes (about two chunks), not one write per chunk. The
		// last bytes go out before the guard ends.
		var held *progressConn
		if !st.gzip {
			held = guard.pc
			held.hold()
			defer func() {
				if held != nil { // a panic
					_ = held.release()
				}
			}()
		}
		buf := getBuf()
		sw := streamWriter{w: w, buf: (*buf)[:0], yield: st.yield, guard: guard}
		defer func() { n = sw.n }()
		err = ls.write(ctx, &sw)
		if held != nil {
			if rerr := held.release(); err == nil && rerr != nil {
				err = fmt.Errorf("cannot write response: %w", rerr)
			}
			held = nil
		}
		guard.done(err)
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
		s.serveGzipStream(rc, st, body.write, body.done, func(err error) {
			cancel()
			st.fail(rc, ef, statusOf(err))
		})
		return
	}
	rc.SetBodyStream(body, -1)
}

// listBody is a streamed LIST body. fasthttp writes it by calling WriteTo
// on the connection's goroutine, so that each flush of the streamWriter
// (flushSize bytes) becomes one HTTP chunk; SetBodyStreamWriter would copy
// the body through a pipe in 4 KiB chunks, one write syscall each, which
// made a large LIST cost several times its encoding. Read (for fasthttp
// paths that read the stream) runs write through fasthttp's pipe.
type listBody struct {
	write func(w *bufio.Writer) (int, error) // writes the whole body, returns its size
	done  func(n int)                        // called once: the body is written or dropped
	pc    *progressConn                      // the connection's, coalescing each chunk's records; may be nil
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
	cw := &errWriter{w: w, pc: b.pc}
	// Writes of a full buffer (len >= 512) bypass bw's buffer: one chunk
	// per streamWriter flush.
	bw := bufio.NewWriterSize(cw, 512)
	n, err := b.write(bw)
	_ = bw.Flush()
	b.once.Do(func() { b.done(n) })
	if err == nil {
		err = cw.err
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

// errWriter keeps the first write error. Each Write is one HTTP chunk
// (fasthttp's chunkedBodyWriter writes its size line, the bytes and the CRLF
// in three writes to the TLS connection, each one record or more): on a
// connection that coalesces (pc, under TLS) the chunk's records reach the
// socket in one write.
type errWriter struct {
	w   io.Writer
	pc  *progressConn // nil: no coalescing
	err error
}

func (w *errWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	w.pc.hold()
	n, err := w.w.Write(p)
	if rerr := w.pc.release(); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		w.err = err
	}
	return n, err
}

// protoBufferBytes bounds a protobuf list kept encoded during its size
// pass (see serveList).
const protoBufferBytes = 2 << 20

// setContinue fills lm's continue and remainingItemCount from a walk.
func (l *lister) setContinue(lm *codec.ListMeta, ws *walkState) error {
	if !ws.hasMore {
		return nil
	}
	tok, err := encodeContinue(ws.lastKey, l.prefix, l.rev)
	if err != nil {
		return err
	}
	lm.Continue = tok
	if l.f.empty() {
		rem := ws.remaining
		lm.RemainingItemCount = &rem
	}
	return nil
}

func (s *Server) logListError(uri string, err error) {
	s.log.Error("list failed", zap.String("uri", uri), zap.Error(err))
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
	sw.buf = enc.listHead(sw.buf, lm, planned.size)
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
		if l.snap == nil && l.layout == layoutSized && it.decoded && l.s.sizes != nil && encryption.Encrypted(kv.Value) {
			// For the size pass of the next LIST of this value.
			l.s.sizes.put(kv.Key, kv.ModRevision, codec.SizesOf(it.obj))
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
	if l.layout == layoutSized && written != planned.size {
		// The head announced planned.size bytes: a client would read a
		// corrupt list. Abort instead (never expected: the sizes of the
		// size pass are those of the same objects).
		return fmt.Errorf("BUG: list items took %d bytes, the size pass counted %d", written, planned.size)
	}
	l.s.countServed(enc, lastObj, int(ws.n))
	if l.layout == layoutMetaLast {
		if err := l.setContinue(&lm, &ws); err != nil {
			return err
		}
	}
	sw.buf = enc.listTail(sw.buf, lm)
	return nil
}
