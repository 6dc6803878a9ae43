//go:build lazyapi_revert_own_stream

package cache

import clientv3 "go.etcd.io/etcd/client/v3"

// newWatcher, reverted (build tag lazyapi_revert_own_stream): every
// resource's watch on the client's one shared watcher and stream, as
// before 905ce5d, where a progress notification requested for one watch
// could reach another before its catch-up events. Only for showing that
// the robustness suite catches that bug; never built otherwise.
func newWatcher(c *clientv3.Client) clientv3.Watcher { return sharedWatcher{c.Watcher} }

// sharedWatcher does not close the client's watcher with one resource's
// watch.
type sharedWatcher struct{ clientv3.Watcher }

func (sharedWatcher) Close() error { return nil }
