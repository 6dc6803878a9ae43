//go:build lazyapi_revert_own_stream

package cache

import (
	"context"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// newWatcher, reverted (build tag lazyapi_revert_own_stream): every
// resource's watch on the client's one shared watcher, as before 905ce5d,
// where a progress notification requested for one watch could reach
// another before its catch-up events. As before 905ce5d, the watches
// opened after the client's endpoints moved go on a new shared stream
// (distinct outgoing metadata per move, watchStreamCtx then), on the new
// endpoints; without it every watch stayed on the stream opened first, on
// the member the client had left, and no re-open had anything to catch
// up. Only for showing that the robustness suite catches that bug; never
// built otherwise.
func newWatcher(c *clientv3.Client) clientv3.Watcher { return &sharedWatcher{Watcher: c.Watcher, c: c} }

// sharedWatcher does not close the client's watcher with one resource's
// watch; its Watch and RequestProgress go to the shared stream of the
// client's endpoints when Watch was called.
type sharedWatcher struct {
	clientv3.Watcher
	c   *clientv3.Client
	gen string
}

var streamGens struct {
	mu  sync.Mutex
	eps map[*clientv3.Client]string
	gen map[*clientv3.Client]uint64
}

// streamGen returns the generation of c's endpoints: it grows each time
// they differ from the last seen.
func streamGen(c *clientv3.Client) string {
	streamGens.mu.Lock()
	defer streamGens.mu.Unlock()
	if streamGens.eps == nil {
		streamGens.eps, streamGens.gen = map[*clientv3.Client]string{}, map[*clientv3.Client]uint64{}
	}
	eps := strings.Join(c.Endpoints(), ",")
	if streamGens.eps[c] != eps {
		streamGens.eps[c] = eps
		streamGens.gen[c]++
	}
	return strconv.FormatUint(streamGens.gen[c], 10)
}

func (w *sharedWatcher) ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "lazyapi-watch-stream", w.gen)
}

func (w *sharedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.gen = streamGen(w.c)
	return w.Watcher.Watch(w.ctx(ctx), key, opts...)
}

func (w *sharedWatcher) RequestProgress(ctx context.Context) error {
	return w.Watcher.RequestProgress(w.ctx(ctx))
}

func (*sharedWatcher) Close() error { return nil }
