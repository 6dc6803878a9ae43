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
