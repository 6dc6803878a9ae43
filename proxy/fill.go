package proxy

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/estimate"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
)

// One initial list per resource.
//
// A watch, and a LIST with resourceVersion=0 or NotOlderThan (an
// informer's), needs its resource's watch cache. While the cache fills (its
// one paged list from etcd, at start or after a compaction) such requests
// wait for that fill, before admission and holding nothing, for at most
// cache.Config.FillWait; then they get kube-apiserver's 429 "storage is
// (re)initializing" with Retry-After 1. They never each read etcd on their
// own: 50 informers re-watching a cold lazyapi used to run 50 initial lists
// of the whole collection outside admission (1.65 GiB for a 35 MiB
// collection, issue 10).
//
// A resource the cache will not hold soon (refused by the budget, evicted,
// disabled) is read from etcd as before, and a watch's initial list from
// etcd is admitted like a LIST of the collection (short or bulk by its
// estimated size), its bytes reserved before it reads anything.

// initializing is kube-apiserver's answer while its watch cache fills.
func initializing() *StatusError {
	return &StatusError{Status: codec.Status{Code: 429, Reason: "TooManyRequests",
		Message: "storage is (re)initializing", Details: &codec.StatusDetails{RetryAfterSeconds: 1}}, RetryAfter: 1}
}

// waitCacheFill waits for cr to finish filling when it is filling (a nil
// cr or one that is ready or not going to be is no wait). It returns the
// Status to answer when the fill did not finish in time or ctx ended.
func (s *Server) waitCacheFill(ctx context.Context, rc *fasthttp.RequestCtx, cr *cache.Resource) *StatusError {
	if cr == nil || !cr.Filling() {
		return nil
	}
	start := time.Now()
	err := cr.WaitReady(ctx)
	switch {
	case err == nil:
		s.fillWaits.Inc()
		return nil
	case errors.Is(err, cache.ErrNotCached):
		return nil
	case errors.Is(err, cache.ErrFilling):
		s.fillTimeouts.Inc()
		s.rateLog.warn(clientKey(rc), "fill", "request waited for the watch cache to fill and got 429 (storage is (re)initializing)",
			zap.String("resource", cr.Spec().Name), zap.Duration("waited", time.Since(start)))
		return initializing()
	}
	return storeStatus(err, false, 0)
}

// listNeedsCache reports whether a LIST is one the watch cache serves:
// resourceVersion=0 or NotOlderThan N, without a continue token.
func listNeedsCache(q *Params) bool {
	if q.Continue != "" || q.ResourceVersion == "" {
		return false
	}
	return q.ResourceVersionMatch != request.MatchExact && !(q.ResourceVersionMatch == "" && q.Limit > 0 && q.ResourceVersion != "0")
}

// admitEtcdList admits the initial list of a watch served from etcd like a
// LIST of its collection (short or bulk by its estimated response), so that
// its pages are reserved before they are read. The returned release must
// be called once the initial list is written (or the watch ends). extra is
// reserved besides the list's pages (a shared scan's window, at most the
// collection's frames) and buffers besides its write buffers (a shared
// gzip LIST's compressor, conn.GzipBytes); bulk reports that it was admitted
// at the Bulk level. yield (nil without a limiter) is a LIST's
// (bulkYield): called after each flush with the bytes written, it yields
// to short requests once the list is bulk, and a short list that passes
// the bulk threshold becomes bulk.
func (s *Server) admitEtcdList(ctx context.Context, client string, r *resource.Resource, ns string, extra, buffers int64) (release func(), yield func(written int), bulk bool, err error) {
	l := s.cfg.Limiter
	if l == nil {
		return func() {}, nil, false, nil
	}
	avg := int64(s.stats.Hint(s.listPrefix(r, "")))
	st := &reqState{s: s, r: r, p: request.Route{Namespace: ns}}
	resp, avg, err := s.listResponseBytes(ctx, st, avg, nil)
	if err != nil {
		return nil, nil, false, err
	}
	kind := ratelimit.Short
	if l.IsBulk(resp) {
		kind = ratelimit.Bulk
	}
	avg = max(avg, defaultAvgValueBytes)
	if resp > 0 {
		// A shared scan's window holds at most the collection's frames.
		extra = min(extra, int64(frameBytes(int(resp))))
	}
	items := etcdListItems(s.store.Config(), avg)
	t, err := l.Admit(ctx, ratelimit.Request{Client: client, Class: "watchlist/" + r.GroupResource(), Kind: kind,
		Bytes: estimate.List(avg, items, streamBufferBytes+buffers) + extra})
	if err != nil {
		return nil, nil, false, err
	}
	var once sync.Once
	bulk = kind == ratelimit.Bulk
	return func() { once.Do(func() { t.Release(0) }) }, s.bulkYield(ctx, l, &t, st, bulk), bulk, nil
}

// rateLog logs at most one line per client and topic per minute, so that
// a client opening hundreds of streams gets one line, not hundreds.
type rateLog struct {
	log  *zap.Logger
	mu   sync.Mutex
	last map[string]time.Time // by topic + "/" + client
}

const rateLogEvery = time.Minute

func (l *rateLog) warn(client, topic, msg string, fields ...zap.Field) {
	now := time.Now()
	k := topic + "/" + client
	l.mu.Lock()
	if l.last == nil {
		l.last = make(map[string]time.Time)
	}
	if t, ok := l.last[k]; ok && now.Sub(t) < rateLogEvery {
		l.mu.Unlock()
		return
	}
	if len(l.last) > 4096 {
		for k, t := range l.last {
			if now.Sub(t) >= rateLogEvery {
				delete(l.last, k)
			}
		}
	}
	l.last[k] = now
	l.mu.Unlock()
	l.log.Warn(msg, append(fields, zap.String("client", client))...)
}

// admitEtcdWatchList admits the initial list of a watch that etcd serves
// (admitEtcdList) and sets ew.listDone. It returns the Status to answer on
// refusal.
func (s *Server) admitEtcdWatchList(ctx context.Context, rc *fasthttp.RequestCtx, r *resource.Resource, ns string, ew *etcdWatch) *StatusError {
	done, _, _, err := s.admitEtcdList(ctx, clientKey(rc), r, ns, 0, 0)
	if err != nil {
		return readAdmissionStatus(ctx, err)
	}
	ew.listDone = done
	return nil
}

// PreloadCache starts filling the watch cache of every servable resource
// whose "resource[.group]" name include accepts (nil: all), so that a
// restarted lazyapi is warm before its clients re-watch; the fills run in
// the background. It returns how many resources it started. Resources
// that do not fit --watch-cache-memory are refused by the cache as usual
// and served from etcd.
func (s *Server) PreloadCache(include func(name string) bool) int {
	if s.cfg.Cache == nil {
		return 0
	}
	n := 0
	seen := make(map[string]bool)
	for _, r := range s.cfg.Resources.Resources() {
		name := r.GroupResource()
		if !r.Servable() || seen[name] || (include != nil && !include(name)) {
			continue
		}
		seen[name] = true
		s.cacheResource(r)
		n++
	}
	return n
}

// watchInitialEstimate is the reservation of the initial phase of a watch
// the watch cache serves (cr, ready): a cache-served LIST of the
// collection's (admit), that is a page of the cache's item headers, the
// write buffers and the encoding of one object twice (its frame and the
// batch it is copied into), at the resource's average stored size in the
// cache; with a conversion, its cost for one object. The events' bytes
// are the cache's: they are not copied.
func (s *Server) watchInitialEstimate(r *resource.Resource, cr *cache.Resource) int64 {
	avg := int64(0)
	if n := cr.Objects(); n > 0 {
		avg = cr.Bytes() / n
	}
	if avg <= 0 {
		avg = defaultAvgValueBytes
	}
	buffers := streamBufferBytes + 2*avg
	if r.Conversion != nil {
		buffers += codec.ConvertCost(avg)
	}
	return estimate.List(0, cachePageItems, buffers)
}
