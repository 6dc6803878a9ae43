package ratelimit

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// fakeClock is a Clock whose time moves only by Advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	ch      chan time.Time
	stopped bool
	fired   bool
}

var _ Clock = (*fakeClock)(nil)

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{at: f.now.Add(d), ch: make(chan time.Time, 1)}
	f.timers = append(f.timers, t)
	stop := func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		was := !t.stopped && !t.fired
		t.stopped = true
		return was
	}
	return t.ch, stop
}

// Advance moves the time by d and fires the timers that became due.
func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	live := f.timers[:0]
	for _, t := range f.timers {
		switch {
		case t.stopped:
		case !t.at.After(f.now):
			t.fired = true
			t.ch <- f.now
		default:
			live = append(live, t)
		}
	}
	f.timers = live
}

// pending returns the number of timers neither stopped nor fired.
func (f *fakeClock) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.timers {
		if !t.stopped && !t.fired {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(100 * time.Microsecond)
	}
}

// testConfig returns a valid config with a fake clock and a fresh metrics set.
func testConfig(budget int64) (Config, *fakeClock) {
	clk := newFakeClock()
	cfg := defaultConfig()
	cfg.MaxInflightBytes = budget
	cfg.ClientShare = 1 // tests of the per-client share set their own
	cfg.Clock = clk
	cfg.Metrics = metrics.NewSet()
	return cfg, clk
}

func mustNew(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return l
}

// checkGoroutines fails t unless the goroutine count returns to at most base.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines leaked: %d > %d\n%s", runtime.NumGoroutine(), base, buf[:n])
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

func numGoroutine() int { return runtime.NumGoroutine() }

func fmtWrap(err error) error { return fmt.Errorf("cannot serve list: %w", err) }
