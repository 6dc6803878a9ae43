package ratelimit

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func readGCMetrics() (gogc, goal, scan int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/heap/goal:bytes"},
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	gogc = int64(s[0].Value.Uint64()) //nolint:gosec // -1 when off
	goal = int64(s[1].Value.Uint64()) //nolint:gosec // bytes
	for _, v := range s[2:] {
		scan += int64(v.Value.Uint64()) //nolint:gosec // bytes
	}
	return gogc, goal, scan
}

// TestCapGarbage holds a 96 MiB pointer-free block (a watch cache's values
// are such blocks) and checks that after collections the heap goal is at
// most the headroom above the live heap, where GOGC=100 would let garbage
// grow by the whole block; stop restores GOGC. It changes the process's
// GOGC: not parallel (no test in this package reads it).
func TestCapGarbage(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	live := make([]byte, 96<<20)
	const headroom = 16 << 20
	stop := CapGarbage(headroom)
	deadline := time.Now().Add(time.Minute)
	var gogc, goal, scan int64
	for {
		// The finalizer sets GOGC after a collection; the next
		// collection's goal uses it.
		runtime.GC()
		runtime.GC()
		gogc, goal, scan = readGCMetrics()
		if gogc < 100 && goal-scan <= headroom {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute of collections: GOGC %d, heap goal %d MiB for %d MiB live, stacks and globals; want at most %d MiB above", gogc, goal>>20, scan>>20, headroom>>20)
		}
		time.Sleep(10 * time.Millisecond) // poll: the finalizer goroutine runs after the collection
	}
	// The headroom is a floor on GOGC's percentage of what was live, so
	// the goal is not far below it either (rounding to whole percents).
	if goal-scan < headroom/2 {
		t.Errorf("heap goal %d MiB is only %d MiB above %d MiB live: want about %d MiB", goal>>20, (goal-scan)>>20, scan>>20, headroom>>20)
	}
	runtime.KeepAlive(live)
	stop()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after stop = %d, want 100 (the GOGC when CapGarbage started)", got)
	}
	stop() // a second stop changes nothing
}

// TestCapGarbageKeepsLowerGOGC: a small live heap keeps the GOGC in force
// at start (here 50: the cap never raises it), and GOGC=off stays off.
func TestCapGarbageKeepsLowerGOGC(t *testing.T) {
	orig := debug.SetGCPercent(50)
	t.Cleanup(func() { debug.SetGCPercent(orig) })
	stop := CapGarbage(1 << 40)
	runtime.GC()
	runtime.GC()
	if gogc, _, _ := readGCMetrics(); gogc != 50 {
		t.Errorf("GOGC = %d with a headroom far above the heap, want 50", gogc)
	}
	stop()
	if got := debug.SetGCPercent(-1); got != 50 {
		t.Errorf("GOGC after stop = %d, want 50", got)
	}
	stop = CapGarbage(1 << 20) // GOGC=off: nothing to cap
	runtime.GC()
	if gogc, _, _ := readGCMetrics(); gogc != -1 {
		t.Errorf("GOGC = %d after CapGarbage with GOGC=off, want -1 (off)", gogc)
	}
	stop()
	if got := debug.SetGCPercent(orig); got != -1 {
		t.Errorf("GOGC after stop = %d with GOGC=off, want -1", got)
	}
}

// BenchmarkCapGarbage measures what the cap costs the collector: a live
// heap like the storm's (a 136 MiB pointer-free block for the watch
// cache's values, 200,000 small pointerful objects for its index and the
// connections) while the benchmark allocates 32 KiB buffers (a stream's
// garbage), with GOGC=100 and with the 64 MiB cap of --memory-limit=1Gi.
// It reports collections and the collector's CPU (runtime/metrics
// /cpu/classes/gc/total) per GB allocated, and the heap goal.
func BenchmarkCapGarbage(b *testing.B) {
	cache := make([]byte, 136<<20)
	type node struct {
		next *node
		val  []byte
	}
	var index *node
	for range 200_000 {
		index = &node{next: index, val: make([]byte, 64)}
	}
	for _, bc := range []struct {
		name     string
		headroom int64
	}{{"GOGC=100", 0}, {"cap=64MiB", GarbageHeadroom(1 << 30)}} {
		b.Run(bc.name, func(b *testing.B) {
			orig := debug.SetGCPercent(100)
			defer debug.SetGCPercent(orig)
			stop := func() {}
			if bc.headroom > 0 {
				stop = CapGarbage(bc.headroom)
			}
			defer stop()
			runtime.GC()
			s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/heap/goal:bytes"}}
			metrics.Read(s)
			cycles0, cpu0 := s[0].Value.Uint64(), s[1].Value.Float64()
			var maxGoal uint64
			var sink []byte
			b.SetBytes(32 << 10)
			b.ResetTimer()
			for i := range b.N {
				sink = make([]byte, 32<<10)
				sink[0] = byte(i)
				if i%4096 == 0 {
					metrics.Read(s)
					maxGoal = max(maxGoal, s[2].Value.Uint64())
				}
			}
			b.StopTimer()
			metrics.Read(s)
			gb := float64(b.N) * (32 << 10) / 1e9
			b.ReportMetric(float64(s[0].Value.Uint64()-cycles0)/gb, "GCs/GB")
			b.ReportMetric((s[1].Value.Float64()-cpu0)/gb, "gc-cpu-s/GB")
			b.ReportMetric(float64(max(maxGoal, s[2].Value.Uint64()))/(1<<20), "goal-MiB")
			runtime.KeepAlive(sink)
		})
	}
	runtime.KeepAlive(cache)
	runtime.KeepAlive(index)
}

// TestGarbageHeadroom: a sixteenth of the limit, at least 8 MiB and at
// most 64 MiB, so that a larger limit (a larger cache) does not let more
// garbage gather above the cache.
func TestGarbageHeadroom(t *testing.T) {
	for _, c := range []struct{ limit, want int64 }{
		{64 << 20, 8 << 20},
		{256 << 20, 16 << 20},
		{1 << 30, 64 << 20},
		{2 << 30, 64 << 20},
		{16 << 30, 64 << 20},
	} {
		if got := GarbageHeadroom(c.limit); got != c.want {
			t.Errorf("GarbageHeadroom(%d MiB) = %d MiB, want %d MiB", c.limit>>20, got>>20, c.want>>20)
		}
	}
}

// TestCapPercent: the headroom as a percentage of the scanned heap, never
// above the starting GOGC and never below minCapPercent, so that a large
// cache does not turn the cap into a collection every few MiB.
func TestCapPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ base, headroom, scan, want int64 }{
		{100, 64 * mib, 0, 100},         // nothing scanned yet: the starting GOGC
		{100, 64 * mib, 32 * mib, 100},  // a small heap keeps GOGC's proportion
		{100, 64 * mib, 256 * mib, 25},  // the fixed headroom
		{100, 64 * mib, 430 * mib, 14},  // 400 MiB of cached Secrets: unchanged by the floor
		{100, 64 * mib, 4096 * mib, 10}, // a 4 GiB cache: the floor, not GOGC 1
		{5, 64 * mib, 4096 * mib, 5},    // never above the starting GOGC
	} {
		if got := capPercent(c.base, c.headroom, c.scan); got != c.want {
			t.Errorf("capPercent(%d, %d MiB, %d MiB) = %d, want %d", c.base, c.headroom/mib, c.scan/mib, got, c.want)
		}
	}
}
