package proxy

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// Admission (Config.Limiter).
//
// Every GET and LIST asks the limiter for a reservation of its working set
// (one page plus write buffers, ratelimit.EstimateList). A LIST whose
// response is estimated above --bulk-list-threshold is admitted at the
// limiter's Bulk level (its own seats, no access to the bytes reserved for
// short requests) and its stream yields to in-flight short requests after
// every flush, so GETs stay fast while large LISTs run; everything else is
// Short. The response estimate is items × average stored size:
//   - a cluster-wide LIST served by a ready watch cache: the bytes the cache
//     holds for the resource;
//   - otherwise the number of keys in the range times the average value
//     size last seen for the resource; before the first LIST of the
//     resource, the size of the range's first value. Both come from one
//     serializable etcd range of one key (its response counts the range),
//     remembered by the limiter for 5 s per collection (Limiter.SetSize);
//   - with limit, at most limit items.
//
// The work of a LIST with a selector is the whole range, so selectors do
// not make a LIST short.

// admit asks Config.Limiter, then Config.Admit, to admit a GET or LIST;
// st.release returns what they reserved when the response is complete and
// st.yield is set for a bulk LIST.
func (s *Server) admit(ctx context.Context, rc *fasthttp.RequestCtx, st *reqState) error {
	var releases []func()
	if l := s.cfg.Limiter; l != nil {
		avg := int64(0)
		if h, ok := s.sizeHints.Load(s.prefix + "/" + st.r.KeyPrefix + "/"); ok {
			avg = int64(h.(int))
		}
		cr := s.cacheResource(st.r)
		cached := cr != nil && cr.Ready()
		kind := ratelimit.Short
		if st.p.Name == "" {
			var resp int64
			resp, avg = s.listResponseBytes(ctx, l, st, avg, cached)
			if l.IsBulk(resp) {
				kind = ratelimit.Bulk
			}
		}
		if avg <= 0 {
			avg = defaultAvgValueBytes
		}
		items := 1
		switch {
		case cached:
			// A cache read holds no copy of the values, only a page of
			// KeyValue headers and the write buffers (a fallback to
			// etcd is rare).
			avg = 0
			if st.p.Name == "" {
				items = cachePageItems
			}
		case st.p.Name == "":
			cfg := s.store.Config()
			items = int(max(min(int64(cfg.PageSize), int64(cfg.PageBytes)/avg), 1))
		}
		t, err := l.Admit(ctx, ratelimit.Request{
			Client: rc.RemoteIP().String(),
			Class:  st.verb + "/" + st.r.GroupResource(),
			Kind:   kind,
			Bytes:  ratelimit.EstimateList(avg, items, streamBufferBytes),
		})
		if err != nil {
			return err
		}
		releases = append(releases, func() { t.Release(0) })
		if kind == ratelimit.Bulk {
			st.yield = func() { l.Yield(ctx) }
		}
	}
	if s.cfg.Admit != nil {
		release, err := s.cfg.Admit(rc, &RequestInfo{Verb: st.verb, Resource: st.r, Namespace: st.p.Namespace,
			Name: st.p.Name, Limit: st.q.Limit, ResourceVersion: st.q.ResourceVersion})
		if err != nil {
			for _, r := range releases {
				r()
			}
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

// listResponseBytes estimates the stored bytes a LIST reads (see
// Admission) and returns it with the average value size it assumed (avg,
// the resource's size hint, when > 0). 0 bytes means unknown (the etcd read
// failed): the LIST is short and fails or succeeds on its own.
func (s *Server) listResponseBytes(ctx context.Context, l *ratelimit.Limiter, st *reqState, avg int64, cached bool) (int64, int64) {
	if cached && st.p.Namespace == "" {
		if cr := s.cacheResource(st.r); cr != nil {
			total := cr.Bytes()
			if st.q.Limit > 0 && avg > 0 {
				total = min(total, st.q.Limit*avg)
			}
			return total, avg
		}
	}
	prefix := s.listPrefix(st.r, st.p.Namespace)
	sz, ok := l.Size(prefix)
	if !ok {
		var err error
		if sz, err = s.sampleRange(ctx, prefix); err != nil {
			return 0, avg
		}
		l.SetSize(prefix, sz)
	}
	if avg <= 0 {
		avg = sz.AvgBytes
	}
	if avg <= 0 {
		avg = defaultAvgValueBytes
	}
	n := sz.Items
	if st.q.Limit > 0 {
		n = min(n, st.q.Limit)
	}
	return n * avg, avg
}

// sampleRange counts the keys under prefix and samples the size of the
// first value: one serializable etcd range of one key, whose response
// counts the whole range.
func (s *Server) sampleRange(ctx context.Context, prefix string) (ratelimit.Size, error) {
	var sz ratelimit.Size
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

// defaultAvgValueBytes is the value size assumed for admission before a
// resource was listed once; streamBufferBytes is a streamed response's write
// buffer plus fasthttp's stream pipe (4 slots).
const (
	defaultAvgValueBytes = 4 << 10
	streamBufferBytes    = 6 * flushSize
)
