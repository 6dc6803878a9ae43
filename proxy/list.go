package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
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
	f      request.Filter
	prefix string // the collection's key prefix, ending in "/"
	start  string // first key (continue token or name selector)
	end    string // last key (name selector), "" for none
	rev    int64  // revision to read at; 0: current
	serial bool   // serializable reads
	limit  int64
	meta   codec.Meta
	now    time.Time
	uri    string // for logs from the stream writer
	enc    encoding.Encoder
	layout encoding.ListLayout // enc's
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
	// ownRev: the revision is etcd's current one, chosen by lazyapi (no
	// continue token, not Exact); compacted: a read before the first
	// byte failed with store.ErrCompacted (prepareList).
	ownRev, compacted bool
	lm                codec.ListMeta
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

// serveList serves a LIST in its phases: newLister (where and at which
// revision to read), firstPage (read and walk the first page: is it the
// whole answer?), plan (the metadata that must precede the first byte) and
// respond (one buffer, or a stream). cancel ends ctx; it is called when
// the response is complete (in the stream writer when streaming).
func (s *Server) serveList(ctx context.Context, cancel context.CancelFunc, rc *fasthttp.RequestCtx, st *reqState, ef encoding.Format) {
	streaming := false
	defer func() {
		if !streaming {
			cancel()
		}
	}()
	l, se := s.prepareList(ctx, rc, st)
	if se != nil {
		st.fail(rc, ef, se)
		return
	}
	defer l.releasePre()
	streaming = l.respond(ctx, cancel, rc, ef)
}

// listRestarts bounds how often prepareList reads a LIST again after etcd
// compacted the revision it chose.
const listRestarts = 3

// prepareList makes a lister and runs its phases before the first byte
// (newLister, prepare). A LIST read from etcd at a revision lazyapi chose
// (etcd's current one: no continue token, resourceVersion "", "0" or
// NotOlderThan) that etcd compacted between two of its pages before the
// first byte is read again from its start at the new current revision, up
// to listRestarts times (then 503 with Retry-After); the pages of one read are never mixed with
// another's. The client asked for no revision: kube-apiserver reads such
// a list in one range and never answers it 410 (the 1-hour robustness run
// found lazyapi's size pass answering 410 after a compaction to etcd's
// head). A continue token's or an Exact revision's compaction stays 410.
// A streamed list (no limit, not protobuf) compacted after its first byte
// was prepared but before any byte left is read again the same way
// (listStream.write). The returned lister's pre buffer is the caller's to
// release.
func (s *Server) prepareList(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState) (*lister, *StatusError) {
	for attempt := 0; ; attempt++ {
		l, se := s.newLister(ctx, rc, st)
		if se != nil {
			return nil, se
		}
		if se = l.prepare(ctx); se == nil {
			return l, nil
		}
		l.releasePre()
		if l.pg != nil {
			l.pg.Close()
		}
		if !l.rereadable(l.compacted) || ctx.Err() != nil {
			return nil, se
		}
		if attempt == listRestarts {
			// Not 410: the client named no revision. Retry later.
			return nil, &StatusError{Status: codec.Status{Code: 503, Reason: "ServiceUnavailable",
				Message: fmt.Sprintf("etcd compacted the list's revision %d times while it was read", attempt+1),
				Details: &codec.StatusDetails{RetryAfterSeconds: 1}}, RetryAfter: 1}
		}
		s.listRestarts.Inc()
	}
}

// readStatus is storeStatus for an error of the LIST's etcd read. A
// continue token whose revision etcd compacted gets, as from
// kube-apiserver (etcd3's handleCompactedErrorForPaging), 410 Expired with
// a token in the Status's metadata.continue that resumes the list where
// the client stopped, at the latest revision (resourceVersion -1).
func (l *lister) readStatus(err error) *StatusError {
	l.compacted = errors.Is(err, store.ErrCompacted)
	se := storeStatus(err, l.st.q.Continue != "", l.rev)
	if l.st.q.Continue != "" && errors.Is(err, store.ErrCompacted) && se.Status.Code == 410 {
		if tok, terr := request.ContinueAt(l.start, l.prefix, -1); terr == nil {
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
		enc: st.enc, layout: st.enc.Layout(), ctx: ctx, gr: r.GroupResource()}
	if rc != nil {
		l.uri = string(rc.RequestURI())
	} else { // a shared LIST's group (sharedlist.go)
		l.uri = "shared list of " + r.GroupResource()
	}
	if c := st.enc.Cached(); c != nil && c.Row == nil {
		// A JSON list's items, as Server.listItem serves them.
		l.render = s.render
	}
	var err error
	l.f, err = request.ParseFilter(q.LabelSelector, q.FieldSelector, r.ConvertFieldLabel)
	if err != nil {
		return nil, badRequestErr(err.Error())
	}
	if q.Continue != "" {
		l.start, l.rev, err = request.DecodeContinue(q.Continue, l.prefix)
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
			l.attrs = l.f.AttrsCover(r)
		}
		if s.ignoresLimit(&q) {
			l.limit = 0
		}
	}
	if q.Continue == "" && l.snap == nil {
		rv, _ := request.ParseRV(q.ResourceVersion) // validated
		switch {
		case q.ResourceVersion == "":
		case rv == 0:
			l.serial = true
		case q.ResourceVersionMatch == request.MatchExact, q.ResourceVersionMatch == "" && q.Limit > 0:
			// Exact; kube-apiserver treats resourceVersion=N with limit
			// and no match as Exact (legacy).
			l.rev = rv
		default: // NotOlderThan
			if err := s.waitForRV(ctx, rv); err != nil {
				return nil, storeStatus(err, false, rv)
			}
		}
	}
	l.ownRev = q.Continue == "" && l.rev == 0
	// metadata.name=x in one namespace (or of a cluster-scoped resource)
	// names one key: read only that key.
	if l.f.Name != "" && (st.p.Namespace != "" || !r.Namespaced) {
		key := l.prefix + l.f.Name
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
	if l.f.Empty() && l.limit > 0 {
		want = int(l.limit)
	}
	hintKey := s.prefix + "/" + l.st.r.KeyPrefix + "/"
	l.opts = store.ListOptions{Prefix: l.prefix, Start: l.start, End: l.end, Rev: l.rev, Serializable: l.serial, Want: want}
	l.opts.SizeHint = s.stats.Hint(hintKey)
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
		s.stats.SetHint(hintKey, avg)
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
	if l.layout == encoding.LayoutSized && l.snap == nil {
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
		l.compacted = errors.Is(err, store.ErrCompacted)
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
	if enc == nil || l.f.Empty() || (l.snap != nil && (l.attrs || l.s.cfg.CacheDecrypted)) ||
		(l.layout != encoding.LayoutSized && l.limit == 0) {
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
// earlier LIST recorded (estimate.SizeMemo) instead of decrypting them: the
// encrypted values of page, the first page, have recorded sizes, and those
// sizes times the number of items the list will hold exceed the bound.
// The list is then not encoded during the size pass (that encoding
// decrypts each value, which the write pass would decrypt again once it
// outgrew the bound); the write pass decrypts each value once, at the
// cost of a second read of etcd, as for any list over the bound. A list
// within the bound keeps its single read of etcd and single decryption.
func (l *lister) sizesRecorded(page []*mvccpb.KeyValue) bool {
	if l.s.sizes == nil || !l.f.Empty() || len(page) == 0 {
		return false
	}
	size := 0
	for _, kv := range page {
		if !encryption.Encrypted(kv.Value) {
			return false // not recorded: the size pass unwraps it
		}
		z, ok := l.s.sizes.Get(kv.Key, kv.ModRevision)
		if !ok {
			return false
		}
		n, ok := l.enc.ItemSizeOf(z, kv.ModRevision)
		if !ok {
			return false
		}
		size += n
	}
	items := int64(len(page)) + l.pg.RemainingAfter(len(page)-1)
	if l.limit > 0 {
		items = min(items, l.limit)
	}
	return int64(size)/int64(len(page))*items > int64(protoBufferBytes)
}

// plan completes what must be known before the first byte when the first
// page is not the whole answer: for layoutSized or a limit, a pass over
// the rest of the range (planPass); then the list metadata, unless it is
// written last (layoutMetaLast).
func (l *lister) plan(ctx context.Context) *StatusError {
	l.lm = codec.ListMeta{ResourceVersion: l.rev}
	if l.layout == encoding.LayoutMetaLast {
		return nil // the write pass learns the metadata
	}
	if l.ws.partial && (l.layout == encoding.LayoutSized || l.limit > 0) {
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
	if l.layout != encoding.LayoutSized && l.f.Empty() && l.snap == nil {
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
			l.compacted = errors.Is(err, store.ErrCompacted)
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

// protoBufferBytes bounds a protobuf list kept encoded during its size
// pass (see serveList). A variable only so that tests under the race
// detector can cross it with smaller collections (SetProtoBufferBytes in
// export_test.go); nothing else changes it.
var protoBufferBytes = 2 << 20

// setContinue fills lm's continue and remainingItemCount from a walk.
func (l *lister) setContinue(lm *codec.ListMeta, ws *walkState) error {
	if !ws.hasMore {
		return nil
	}
	tok, err := request.EncodeContinue(ws.lastKey, l.prefix, l.rev)
	if err != nil {
		return err
	}
	lm.Continue = tok
	if l.f.Empty() {
		rem := ws.remaining
		lm.RemainingItemCount = &rem
	}
	return nil
}

func (s *Server) logListError(uri string, err error) {
	s.log.Error("list failed", zap.String("uri", uri), zap.Error(err))
}
