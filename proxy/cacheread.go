package proxy

import (
	"context"
	"errors"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// LIST and GET from the watch cache (Config.Cache).
//
// A read the cache can answer (the resource is cached and ready, and the
// requested revision is one the cache holds or can reconstruct) is served
// from a cache.Snapshot through the same lister as an etcd read: a
// cachePager hands the snapshot's items out as etcd pages, so the items,
// framing, continue tokens (key + "\x00" relative to the list prefix, at the
// snapshot's revision) and remainingItemCount are produced by the same code
// whichever source served the request. Every other read goes to etcd
// unchanged. The cache counts its own hits, misses and fallbacks
// (cache.Resource.Snapshot), so the proxy does not count them again.

// cachePageItems is how many cached items one cachePager page holds: the
// values are already in memory, a page only costs its KeyValue headers.
// A variable only so that tests under the race detector can cross a page
// with fewer items (SetCachePageItems in export_test.go); nothing else
// changes it.
var cachePageItems = 256

// cacheResource returns the cache of r, nil without Config.Cache.
func (s *Server) cacheResource(r *resource.Resource) *cache.Resource {
	c := s.cfg.Cache
	if c == nil {
		return nil
	}
	spec := cache.Spec{Name: r.GroupResource(), Prefix: s.listPrefix(r, ""), Namespaced: r.Namespaced,
		Fields: r.CacheFields()}
	cr := c.Resource(spec)
	if old := cr.Spec(); old.Namespaced != spec.Namespaced || !slices.Equal(old.Fields, spec.Fields) || old.Name != spec.Name {
		// A CRD deleted and created again with another scope or fields:
		// the cache of the old one goes.
		c.Drop(spec.Prefix)
		cr = c.Resource(spec)
	}
	return cr
}

// dropUnserved drops the watch cache of every prefix the resource table no
// longer serves (a deleted CRD): its etcd watch, history and budget.
func (s *Server) dropUnserved() {
	served := make(map[string]bool)
	for _, r := range s.cfg.Resources.Resources() {
		served[s.listPrefix(r, "")] = true
	}
	for _, st := range s.cfg.Cache.Statuses() {
		if !served[st.Prefix] {
			s.cfg.Cache.Drop(st.Prefix)
		}
	}
}

// cacheReadOptions maps a LIST's or GET's resourceVersion parameters to a
// cache read. contRev is a continue token's revision (0: none).
func cacheReadOptions(q Params, contRev int64, list bool) cache.ReadOptions {
	if contRev > 0 {
		return cache.ReadOptions{Mode: cache.ReadExact, RV: contRev}
	}
	if q.ResourceVersion == "" {
		return cache.ReadOptions{Mode: cache.ReadConsistent}
	}
	rv, _ := request.ParseRV(q.ResourceVersion) // validated
	switch {
	case rv == 0:
		return cache.ReadOptions{Mode: cache.ReadAny}
	case list && (q.ResourceVersionMatch == request.MatchExact || q.ResourceVersionMatch == "" && q.Limit > 0):
		return cache.ReadOptions{Mode: cache.ReadExact, RV: rv}
	}
	return cache.ReadOptions{Mode: cache.ReadNotOlderThan, RV: rv}
}

// cacheOutcome is what to do after asking the cache.
type cacheOutcome uint8

const (
	cacheServe    cacheOutcome = iota // serve from the snapshot
	cacheFallback                     // read etcd as without a cache
	cacheFail                         // answer with the error
)

// cacheSnapshot asks the cache of r for a snapshot read as o says. For a
// NotOlderThan read of a future revision it returns the 504 to answer.
func (s *Server) cacheSnapshot(ctx context.Context, cr *cache.Resource, o cache.ReadOptions) (*cache.Snapshot, cacheOutcome, *StatusError) {
	if cr == nil || !cr.Ready() {
		return nil, cacheFallback, nil
	}
	if o.Mode == cache.ReadExact && o.RV < s.compactRev.Load() {
		// Compacted (compaction.go): etcd answers 410, as it does
		// kube-apiserver, whose watch cache dropped such snapshots.
		return nil, cacheFallback, nil
	}
	snap, err := cr.Snapshot(ctx, o)
	switch {
	case err == nil:
		return snap, cacheServe, nil
	case errors.Is(err, cache.ErrTooLarge) && o.Mode == cache.ReadNotOlderThan:
		return nil, cacheFail, tooLargeRV(o.RV, cr.Revision())
	case ctx.Err() != nil:
		return nil, cacheFail, storeStatus(ctx.Err(), false, 0)
	case errors.Is(err, cache.ErrEtcdUnavailable):
		// A consistent read whose revision probe etcd did not answer:
		// 503 now, within the one etcd call's bound, rather than a
		// second wait for etcd through the fallback (8 s in all).
		return nil, cacheFail, unavailable(store.ErrUnavailable)
	}
	// ErrNotCached, ErrNotCaughtUp, ErrSnapshotUnavailable, and an Exact
	// read of a future revision: etcd answers as it always did.
	return nil, cacheFallback, nil
}

// cachePager reads a snapshot's range as pages of etcd KeyValues, with the
// semantics of store.Pager (End inclusive, RemainingAfter exact). The keys
// and values alias the cache's immutable bytes.
type cachePager struct {
	snap    *cache.Snapshot
	next    string // first key of the next page
	end     string // exclusive range end
	started bool
	more    bool
	kvs     []mvccpb.KeyValue
	page    []*mvccpb.KeyValue
	attrs   []cache.Attrs // of page's items
}

// newCachePager returns a pager over [start or prefix, end] of snap.
func newCachePager(snap *cache.Snapshot, prefix, start, end string) *cachePager {
	if start == "" {
		start = prefix
	}
	e := clientv3.GetPrefixRangeEnd(prefix)
	if end != "" {
		e = end + "\x00"
	}
	return &cachePager{snap: snap, next: start, end: e}
}

func (p *cachePager) Rev() int64                        { return p.snap.Rev() }
func (p *cachePager) More() bool                        { return p.more }
func (p *cachePager) AvgSize() int                      { return 0 }
func (p *cachePager) Close()                            { p.page, p.attrs, p.kvs = nil, nil, nil }
func (p *cachePager) SetPrefetch(context.Context, bool) {}

// RemainingAfter returns the number of keys in the range after the i-th key
// of the last page.
func (p *cachePager) RemainingAfter(i int) int64 {
	return int64(p.snap.Count(bytesutil.ToUnsafeString(p.page[i].Key)+"\x00", p.end))
}

// Next returns the next page; an empty page at the end of the range.
func (p *cachePager) Next(ctx context.Context) ([]*mvccpb.KeyValue, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if p.started && !p.more {
		return nil, nil
	}
	p.started = true
	p.more = false
	// Fresh slices: a caller may still hold the previous page.
	p.kvs = make([]mvccpb.KeyValue, 0, cachePageItems)
	p.page = make([]*mvccpb.KeyValue, 0, cachePageItems)
	p.attrs = make([]cache.Attrs, 0, cachePageItems)
	if p.next >= p.end {
		return nil, nil
	}
	for it := range p.snap.Range(p.next, p.end) {
		if len(p.kvs) == cachePageItems {
			p.more = true
			p.next = it.Key
			break
		}
		p.kvs = append(p.kvs, mvccpb.KeyValue{Key: bytesutil.ToUnsafeBytes(it.Key), Value: it.Value, ModRevision: it.Rev})
		p.attrs = append(p.attrs, it.Attrs)
	}
	for i := range p.kvs {
		p.page = append(p.page, &p.kvs[i])
	}
	return p.page, nil
}
