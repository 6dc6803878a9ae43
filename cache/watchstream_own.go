//go:build !lazyapi_revert_own_stream

package cache

import clientv3 "go.etcd.io/etcd/client/v3"

// newWatcher returns the watcher of a resource's etcd watch: a gRPC
// stream of its own (see fillAndWatch). The build tag
// lazyapi_revert_own_stream reverts this (905ce5d) for the robustness
// suite's check that it finds the bug (watchstream_shared.go).
func newWatcher(c *clientv3.Client) clientv3.Watcher { return clientv3.NewWatcher(c) }
