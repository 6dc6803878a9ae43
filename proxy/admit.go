package proxy

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/estimate"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// Admission (Config.Limiter).
//
// Every GET and LIST asks the limiter for a reservation of its working set
// (one page plus write buffers, estimate.List). A LIST whose
// response is estimated above --bulk-list-threshold is admitted at the
// limiter's Bulk level (its own seats, no access to the bytes reserved for
// short requests) and its stream yields to in-flight short requests after
// every flush, so GETs stay fast while large LISTs run; everything else is
// Short. The response estimate is items × average stored size:
//   - a cluster-wide LIST served by a ready watch cache: the bytes the cache
//     holds for the resource;
//   - otherwise the number of keys in the range times the average value
//     size last seen for the resource; before the first LIST of the
//     resource, the size of the range's first value but at least 4 KiB
//     (concurrent first LISTs of a large collection must not all pass as
//     short because its first object is small). Both come from one
//     serializable etcd range of one key (its response counts the range),
//     remembered for 5 s per collection (estimate.Stats.SetSize);
//   - at least the largest response of the collection seen in the last
//     minute: a LIST admitted as short whose response passes the threshold
//     (the range's first values were small) starts to yield and makes the
//     next LISTs of its collection bulk (bulkYield);
//   - with limit, at most limit items; but a resourceVersion=0 LIST
//     without continue is answered whole from the watch cache
//     (ignoresLimit), so its limit does not shrink the estimate. A
//     reflector's first LIST (limit=500&resourceVersion=0) of a large
//     collection is therefore bulk, as kube-apiserver's APF counts a LIST
//     from its watch cache by the objects stored, not by its limit
//     (list_work_estimator.go). Estimated at 500 items it was short: 256
//     reflectors' LISTs of 10,000 ConfigMaps of 10 KiB took 256 short
//     seats at once and shared the write throughput until the request
//     timeout cut 255 of them (bench/RESULTS.md, ## storm: cache LISTs
//     at the bulk level).
//
// The work of a LIST with a selector is the whole range, so selectors do
// not make a LIST short.

// admit asks Config.Limiter, then Config.Admit, to admit a GET or LIST;
// st.release returns what they reserved when the response is complete and
// st.yield is set for a bulk LIST.
func (s *Server) admit(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState) error {
	if st.p.Name == "" && listNeedsCache(&st.q) {
		if se := s.waitCacheFill(ctx, rc, s.cacheResource(st.r)); se != nil {
			return se
		}
	}
	var releases []func()
	if l := s.cfg.Limiter; l != nil {
		release, err := s.admitLimiter(ctx, rc, st, l)
		if err != nil {
			return err
		}
		releases = append(releases, release)
	}
	if s.cfg.Admit != nil {
		release, err := s.cfg.Admit(rc, st.ri)
		if err != nil {
			for _, r := range releases {
				r()
			}
			st.drain, st.reserve = nil, nil
			return err
		}
		if release != nil {
			releases = append(releases, release)
		}
	}
	if len(releases) > 0 {
		st.release = func() {
			for _, r := range releases {
				r()
			}
		}
	}
	return nil
}

// admitLimiter admits a GET or LIST with the limiter at its estimate
// (estimate): it sets st.drain, st.reserve (a body larger than the
// reservation reserves the excess) and, for a LIST, st.yield, and returns
// the ticket's release.
func (s *Server) admitLimiter(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState, l *ratelimit.Limiter) (func(), error) {
	kind, bytes, err := s.estimate(ctx, st, l)
	if err != nil {
		return nil, err
	}
	t, err := l.Admit(ctx, ratelimit.Request{
		Client: clientKey(rc),
		Class:  st.verb + "/" + st.r.GroupResource(),
		Kind:   kind,
		Bytes:  bytes,
		Exempt: exempt(rc),
	})
	if err != nil {
		return nil, err
	}
	st.drain = t.Drain
	st.reserve = func(held int64) error {
		// A body larger than the reservation reserves the excess
		// before fasthttp holds it, or is refused at once: it must
		// not wait in a queue while holding the body (a wave of
		// underestimated GETs would hold all their bodies while
		// waiting for each other's bytes).
		need := held - t.Reserved()
		if need <= 0 {
			return nil
		}
		x, err := l.Admit(ctx, ratelimit.Request{Client: clientKey(rc), Kind: ratelimit.Short, Bytes: need, NoWait: true, Exempt: exempt(rc)})
		if err != nil {
			return err
		}
		t.Merge(&x)
		return nil
	}
	if st.p.Name == "" {
		st.yield = s.bulkYield(ctx, l, &t, st, kind == ratelimit.Bulk)
	}
	return func() { t.Release(0) }, nil
}

// estimate is a GET's or LIST's admission: its kind (a LIST whose
// response l counts as bulk is Bulk) and the bytes it holds while served
// (estimate.List of the values it reads, the items it holds at once and
// its buffers).
func (s *Server) estimate(ctx context.Context, st *reqState, l *ratelimit.Limiter) (ratelimit.Kind, int64, error) {
	avg := int64(s.stats.Hint(s.prefix + "/" + st.r.KeyPrefix + "/"))
	cr := s.cacheResource(st.r)
	cached := cr != nil && cr.Ready()
	kind := ratelimit.Short
	if st.p.Name == "" {
		var (
			resp int64
			err  error
		)
		if resp, avg, err = s.listResponseBytes(ctx, st, avg, cr); err != nil {
			return kind, 0, err
		}
		if l.IsBulk(resp) {
			kind = ratelimit.Bulk
		}
	} else {
		avg = s.getValueBytes(ctx, st, avg, cr)
	}
	if avg <= 0 {
		avg = defaultAvgValueBytes
	}
	// The compressor (proxy/conn/gzip.go) of a LIST, or of a GET of a resource
	// whose objects are large enough to be compressed.
	buffers := int64(streamBufferBytes)
	if st.gzip && (st.p.Name == "" || avg > conn.GzipThreshold/2) {
		buffers += conn.GzipBytes
	}
	if st.r.Conversion != nil {
		// The objects are converted one at a time (codec.Convert):
		// the decoded, converted and encoded copies of one.
		buffers += codec.ConvertCost(avg)
	}
	items := 1
	switch {
	case cached:
		// A cache read holds no copy of the values, only a page of
		// KeyValue headers and the write buffers (a fallback to
		// etcd is rare), and the encoding of the item being written
		// (a large object's JSON is one buffer of its size).
		buffers += 2 * avg
		avg = 0
		if st.p.Name == "" {
			items = cachePageItems
		}
	case st.p.Name == "":
		items = etcdListItems(s.store.Config(), avg)
	}
	return kind, estimate.List(avg, items, buffers), nil
}

// exempt reports whether a request is admitted at once, never queued or
// refused (ratelimit.Request.Exempt): its user is in system:masters, whom
// kube-apiserver's API Priority and Fairness puts in the exempt priority
// level. Its bytes still count in the budgets (others find them taken).
func exempt(rc *fasthttp.RequestCtx) bool {
	u, ok := rc.UserValue(userKey).(*authn.User)
	return ok && u.Method != "anonymous" && slices.Contains(u.Groups, authz.SystemMasters)
}

// bulkYield returns the reqState.yield of a LIST. A bulk LIST yields to
// short requests after every flush. A LIST admitted as short whose response
// passes --bulk-list-threshold was underestimated (its range starts with
// small values, say): from then on it counts as bulk (Ticket.BecomeBulk:
// its short seat is free, it does not yield to itself) and yields, and its
// collection and
// the resource's whole collection are recorded as that large
// (estimate.Stats.ObserveResponse) so that the next LISTs of them are bulk.
func (s *Server) bulkYield(ctx context.Context, l *ratelimit.Limiter, t *ratelimit.Ticket, st *reqState, bulk bool) func(written int) {
	return func(written int) {
		if !bulk && l.IsBulk(int64(written)) {
			bulk = true
			t.BecomeBulk()
			now := time.Now()
			s.stats.ObserveResponse(s.listPrefix(st.r, st.p.Namespace), int64(written), now)
			s.stats.ObserveResponse(s.listPrefix(st.r, ""), int64(written), now)
		}
		if bulk {
			l.Yield(ctx)
		}
	}
}

// getValueBytes estimates the stored size of the object a GET reads: the
// cached item's size when the resource's cache is ready (a lookup in
// memory), else the largest of the resource's average (avg, the size
// hint), and the largest value a GET of the resource read in the last
// minute (observeGet); before any of these is known, unknownGetBytes. A
// wave of GETs of large objects from etcd that arrives before any was read
// is thus admitted as large, not as the 4 KiB of an unknown LIST item: each
// admitted GET holds its value and its encoding until its body is written.
func (s *Server) getValueBytes(ctx context.Context, st *reqState, avg int64, cr *cache.Resource) int64 {
	if cr != nil && cr.Ready() {
		key := s.listPrefix(st.r, st.p.Namespace) + st.p.Name
		if it, _, ok, err := cr.Get(ctx, key, cache.ReadOptions{Mode: cache.ReadAny}); err == nil {
			if ok {
				return int64(len(it.Key) + len(it.Value))
			}
			return 0
		}
	}
	seen := s.stats.ObservedResponse(getKey(s.listPrefix(st.r, "")), time.Now())
	if avg <= 0 && seen == 0 {
		return unknownGetBytes
	}
	return max(avg, seen)
}

// observeGet records the size of a value a GET read (getValueBytes).
func (s *Server) observeGet(st *reqState, n int) {
	if s.cfg.Limiter != nil {
		s.stats.ObserveResponse(getKey(s.listPrefix(st.r, "")), int64(n), time.Now())
	}
}

func getKey(prefix string) string { return "get " + prefix }

// unknownGetBytes is the value size a GET from etcd assumes before any
// object of its resource was read: etcd's default --max-request-bytes
// (1.5 MiB), the largest value kube-apiserver can have stored with it.
const unknownGetBytes = 3 << 19

// listResponseBytes estimates the stored bytes a LIST reads (see
// Admission) and returns it with the average value size it assumed (avg,
// the resource's size hint, when > 0). 0 bytes means unknown (the etcd read
// failed): the LIST is short and fails or succeeds on its own; but when
// etcd did not answer the read (store.ErrUnavailable), the error is the
// LIST's 503, at once: its own read of the same etcd would wait out
// another etcd call's bound before it. cr is the resource's watch cache
// (nil without one).
func (s *Server) listResponseBytes(ctx context.Context, st *reqState, avg int64, cr *cache.Resource) (int64, int64, error) {
	prefix := s.listPrefix(st.r, st.p.Namespace)
	now := time.Now()
	seen := s.stats.ObservedResponse(prefix, now)
	limit := st.q.Limit
	if s.ignoresLimit(&st.q) {
		limit = 0
	}
	if cr != nil && cr.Ready() {
		if st.p.Namespace == "" {
			total := max(cr.Bytes(), seen)
			if limit > 0 && avg > 0 {
				total = min(total, limit*avg)
			}
			return total, avg, nil
		}
		if n, ok := cr.Count(prefix); ok {
			// A namespace: its objects counted in the cache at the
			// resource's size per object, and no etcd read (with etcd
			// unreachable, sampling it held every such LIST for an etcd
			// call's bound before it was served from the cache or
			// refused).
			per := avg
			if per <= 0 {
				per = cr.Bytes() / max(cr.Objects(), 1)
			}
			total := max(n*per, seen)
			if limit > 0 {
				total = min(total, limit*per)
			}
			return total, avg, nil
		}
	}
	sz, err := s.stats.SampleSize(ctx, prefix, now, func() (estimate.Collection, error) { return s.sampleRange(ctx, prefix) })
	if errors.Is(err, store.ErrUnavailable) {
		return 0, avg, unavailable(err)
	}
	if err != nil {
		return 0, avg, nil
	}
	if avg <= 0 {
		// No LIST of the resource yet: one value is a poor sample (the
		// range may start with small objects), so assume at least
		// defaultAvgValueBytes until a LIST's first page gives a hint.
		avg = max(sz.AvgBytes, defaultAvgValueBytes)
	}
	total := max(sz.Items*avg, seen)
	if limit > 0 {
		total = min(total, limit*avg)
	}
	return total, avg, nil
}

// ignoresLimit reports whether a LIST is answered whole whatever its
// limit: resourceVersion=0 without continue, when the server has a watch
// cache. As kube-apiserver's watch cache, also while the cache fills
// (etcd answers, streamed). client-go's reflector relies on it: a
// paginated first LIST makes it page its re-lists with resourceVersion=X
// (an Exact read at X) and re-watch from X, which a cache filled after X
// (a restart) answers 410 Expired, forever.
func (s *Server) ignoresLimit(q *Params) bool {
	return s.cfg.Cache != nil && q.ResourceVersion == "0" && q.Continue == ""
}

// sampleRange counts the keys under prefix and samples the size of the
// first value: one serializable etcd range of one key, whose response
// counts the whole range.
func (s *Server) sampleRange(ctx context.Context, prefix string) (estimate.Collection, error) {
	var sz estimate.Collection
	res, err := s.store.List(ctx, store.ListOptions{Prefix: prefix, Want: 1, Serializable: true},
		func(kv store.KV) (bool, error) {
			sz.AvgBytes = int64(len(kv.Key) + len(kv.Value))
			return true, nil
		})
	if err != nil {
		return sz, err
	}
	if len(res.LastKey) > 0 {
		sz.Items = 1 + res.Remaining
	}
	return sz, nil
}

// etcdListItems is the number of values a LIST read from etcd holds at
// once: its current page and the page the store reads ahead (measured:
// 16 stalled JSON LISTs of 100 KiB values held 3.7 MiB each, 1.6× the
// one-page estimate; TestEstimateHoldsStalled).
func etcdListItems(cfg store.Config, avg int64) int {
	return 2 * int(max(min(int64(cfg.PageSize), int64(cfg.PageBytes)/avg), 1))
}

// defaultAvgValueBytes is the value size assumed for admission before a
// resource was listed once; streamBufferBytes is a streamed response's write
// buffer plus fasthttp's stream pipe (4 slots) — the pipe is not used when
// fasthttp writes the body with WriteTo (every LIST and watch stream), where
// the TLS coalescing buffer (conn.CoalesceBytes = 2 × flushSize) fits in its place.
const (
	defaultAvgValueBytes = 4 << 10
	streamBufferBytes    = 6 * flushSize
)
