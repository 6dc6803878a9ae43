package cache_test

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
)

// The proxy's use of the cache for LIST, GET and WATCH (compiled, not run:
// it needs a connected etcd client). ctx may be a *fasthttp.RequestCtx.
func Example() {
	var cli *clientv3.Client // connected to etcd
	var ctx context.Context  // the request
	if cli == nil {
		return
	}
	c, _ := cache.New(cache.Config{Client: cli, MemoryBytes: 1 << 30})
	defer c.Close()
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})

	// LIST ?resourceVersion=0&limit=500 in namespace ns (a continue token
	// {rv, start} reads ReadOptions{Mode: cache.ReadExact, RV: rv} and
	// from = prefix + start).
	from := "/registry/configmaps/ns/"
	to := clientv3.GetPrefixRangeEnd(from)
	s, err := r.Snapshot(ctx, cache.ReadOptions{Mode: cache.ReadAny})
	if errors.Is(err, cache.ErrNotCached) || errors.Is(err, cache.ErrNotCaughtUp) || errors.Is(err, cache.ErrSnapshotUnavailable) {
		return // serve from etcd (store) instead; ErrTooLarge -> 504
	}
	var (
		buf  []byte
		n    int
		next string
	)
	for it := range s.Range(from, to) {
		if n == 500 {
			break
		}
		obj, err := codec.Unwrap(it.Value)
		if err != nil {
			return
		}
		buf = codec.AppendProtobufListItem(buf, obj, it.Rev)
		n++
		next = it.Key + "\x00"
	}
	remaining := 0
	if next != "" {
		remaining = s.Count(next, to)
	}
	_, _ = next, remaining // continue token {rv: s.Rev(), start: next minus prefix}, remainingItemCount

	// GET
	it, _, found, _ := r.Get(ctx, "/registry/configmaps/ns/a", cache.ReadOptions{Mode: cache.ReadAny})
	_, _ = it, found

	// WATCH ?resourceVersion=N&labelSelector=... (sel parsed by the proxy)
	w, err := r.Watch(ctx, cache.WatchOptions{RV: 42, Bookmarks: true, Filter: func(a cache.Attrs) bool {
		v, ok := a.Label("app")
		return ok && v == "web" // or sel.Matches(a.LabelSet())
	}})
	var tooOld *cache.TooOldError
	if errors.As(err, &tooOld) {
		return // send an ERROR event: 410 Expired, tooOld.Message()
	}
	if err != nil {
		return // ErrNotCached: watch etcd instead
	}
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return // ctx done, ErrLagging or ErrClosed: end the stream, the client re-watches
		}
		if ev.Type == cache.Bookmark {
			buf = codec.AppendJSONWatchBookmark(buf[:0], "v1", "ConfigMap", ev.Rev, ev.InitialEventsEnd)
		} else if obj, err := codec.Unwrap(ev.Value); err == nil {
			buf, _ = codec.DefaultSchema().AppendJSONWatchEvent(buf[:0], codec.EventType(ev.Type.String()), obj, ev.Rev)
		}
		if !w.More() {
			// flush buf to the client
		}
	}
}
