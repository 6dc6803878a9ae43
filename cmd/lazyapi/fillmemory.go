package main

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"
)

// returnFillMemory is the watch cache's Config.Filled: after the fill of a
// resource holding at least minBytes, the Go heap is collected and its free
// pages are returned to the operating system (debug.FreeOSMemory).
//
// Why: a fill reads the resource's values through etcd ranges and the
// replayed watch's responses (the history before the fill) beside the
// copies the cache keeps, so the live heap peaks above the cache's size
// while it runs (the resource becomes ready after this call: its first
// readers start on a collected heap). The collector sets its next goal
// from that peak (twice the live heap), and the runtime returns free
// pages slowly:
// 100 Secrets of 1 MiB left lazyapi at 420 MiB RSS after the fill (live
// heap 150 MiB), and the next storm grew the heap to that goal, 585 MiB
// (bench/RESULTS.md, ## storm: large objects). One full collection per
// large fill (tens of milliseconds on a heap that is mostly the cache's
// pointer-free value blocks) resets the goal to twice what is live.
// Pooled buffers survive one collection, hence two.
// Collections are serialized: fills that end together collect once each,
// one after the other.
func returnFillMemory(lg *zap.Logger, minBytes int64) func(resource string, bytes int64) {
	var mu sync.Mutex
	return func(resource string, bytes int64) {
		if bytes < minBytes {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		start := time.Now()
		// Two collections: the first moves the pooled buffers (the
		// etcd client's gRPC receive buffers, sync.Pools) to their
		// victim caches, the second frees them; FreeOSMemory's own
		// collection then returns the pages.
		runtime.GC()
		debug.FreeOSMemory()
		lg.Debug("heap returned after a fill", zap.String("resource", resource), zap.Int64("bytes", bytes),
			zap.Duration("took", time.Since(start)))
	}
}

// fillMemoryMinBytes is the least fill (cached bytes of one resource)
// after which returnFillMemory collects: 1/16 of the cache budget, at
// least 16 MiB.
func fillMemoryMinBytes(cacheBytes int64) int64 { return max(cacheBytes/16, 16<<20) }
