package ratelimit

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// GarbageHeadroom returns the most garbage CapGarbage lets the heap gather
// above its live bytes under a memory limit of limit bytes: a sixteenth of
// it (64 MiB at --memory-limit=1Gi), at least 8 MiB and at most
// MaxGarbageHeadroom.
//
// Why a fixed amount rather than GOGC's proportion: the watch cache is
// most of the live heap and lives for the whole process, so with GOGC=100
// the collector let garbage grow to the cache's size again before it
// collected. 1,024 WatchList streams on 10,000 ConfigMaps of 10 KiB
// (135.9 MiB cache, 170 MB live heap) grew the heap to its 340 MB goal and
// the RSS to 426 MiB, above the cache + 256 MiB that issue 15 allows
// (bench/RESULTS.md, ## storm: the 1,024-stream overshoot). The cache's
// values are pointer-free blocks, cheap to mark, so collecting more often
// costs little: that storm allocated 0.8 GB in all (the streams share
// their frames), 17 collections with GOGC=100.
//
// Why at most MaxGarbageHeadroom: the garbage is what requests leave
// behind, made at the rate lazyapi serves, not in proportion to the
// limit; a larger limit is there to hold a larger cache, and a sixteenth
// of it only lets the RSS rise further above the cache (issue 15 allows
// cache + 256 MiB at every limit). 256 WatchList streams on 400 Secrets of 1 MiB,
// cached under --memory-limit=2Gi, made 0.85 byte of garbage per byte
// served; the 128 MiB a sixteenth allowed took the warm RSS to 657.1 MiB,
// 1.1 MiB over the 400 MiB cache + 256 MiB (bench/RESULTS.md, ## storm:
// 400 Secrets, lazyapi and kube-apiserver in one run).
func GarbageHeadroom(limit int64) int64 { return min(max(limit/16, 8<<20), MaxGarbageHeadroom) }

// MaxGarbageHeadroom is the largest GarbageHeadroom: a sixteenth of 1 GiB.
const MaxGarbageHeadroom = 64 << 20

// CapGarbage keeps the collector's heap goal at most headroom bytes above
// the heap it found live (plus goroutine stacks and globals, which the goal
// counts as well): after every collection it sets GOGC (debug.SetGCPercent)
// to headroom as a percentage of that, never above the GOGC in force when
// it started (100 unless the GOGC environment variable said otherwise) and
// never below minCapPercent. A small heap thus keeps GOGC's proportion; a large one,
// whose proportion would let more than headroom of garbage gather, gets
// the fixed headroom. GOMEMLIMIT (ApplyMemoryLimit) still bounds the goal
// from above. With GOGC=off it does nothing. stop restores the starting
// GOGC and ends the tuning (for in-process callers, tests); call it once.
//
// It learns of each collection from a finalizer on an unreachable
// sentinel, re-armed every time (the runtime has no end-of-cycle hook).
// Like ApplyMemoryLimit it has process-wide effect: call it once, from main.
func CapGarbage(headroom int64) (stop func()) {
	c := &garbageCap{headroom: max(headroom, 1), base: readGCPercent()}
	if c.base <= 0 {
		return func() {}
	}
	c.samples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	c.tune()
	c.arm()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.stopped {
			c.stopped = true
			debug.SetGCPercent(int(c.base))
		}
	}
}

type garbageCap struct {
	headroom int64
	base     int64 // GOGC when CapGarbage started

	mu      sync.Mutex
	stopped bool
	samples []metrics.Sample
	pct     int64 // the GOGC last set
}

// gcSentinel is the object whose finalizer reports a collection: a pointer
// field keeps it out of the tiny allocator, whose shared blocks would
// delay the finalizer.
type gcSentinel struct{ c *garbageCap }

func (c *garbageCap) arm() {
	runtime.SetFinalizer(&gcSentinel{c: c}, func(s *gcSentinel) {
		if s.c.tune() {
			s.c.arm()
		}
	})
}

// tune sets GOGC from the last collection's live heap; false once stopped.
func (c *garbageCap) tune() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	metrics.Read(c.samples)
	var scan int64
	for _, s := range c.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			scan += int64(s.Value.Uint64())
		}
	}
	pct := capPercent(c.base, c.headroom, scan)
	if pct != c.pct {
		debug.SetGCPercent(int(pct))
		c.pct = pct
	}
	return true
}

// minCapPercent is the lowest GOGC CapGarbage sets. The fixed headroom
// (at most MaxGarbageHeadroom) over a large live heap would otherwise ask
// for a collection every few MiB allocated, each marking the whole heap:
// with a 4 GiB cache, 64 MiB is GOGC 1. At 10 the collector runs at most
// ten times as often as Go's default; the floor binds only above 640 MiB
// scanned at the 64 MiB headroom (every storm measured in bench/RESULTS.md
// has a smaller heap, so their figures stand), and above it the garbage
// may reach a tenth of the live heap.
const minCapPercent = 10

// capPercent is the GOGC CapGarbage sets for a collection that found scan
// bytes to scan: headroom as a percentage of scan, at most base (the GOGC
// it started with) and at least minCapPercent (or base, if lower).
func capPercent(base, headroom, scan int64) int64 {
	if scan <= 0 {
		return base
	}
	return min(base, max(headroom*100/scan, minCapPercent))
}

// GCPercent returns GOGC (-1 when off) without changing it.
func GCPercent() int64 { return readGCPercent() }

// readGCPercent returns GOGC without changing it: -1 when off (the
// runtime reports its -1 as a uint64).
func readGCPercent() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	return int64(s[0].Value.Uint64()) //nolint:gosec // -1 (off) comes back as MaxUint64
}
