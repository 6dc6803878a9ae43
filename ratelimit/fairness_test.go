package ratelimit

import (
	"bytes"
	"strings"

	"context"
	"errors"
	"fmt"
	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queuedOf returns how many requests of client key are queued.
func (l *Limiter) queuedOf(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.queues[queueKey{key, Short}]; c != nil {
		return len(c.queue)
	}
	return 0
}

// TestFairness: client a floods 1000 large LISTs; client b's requests are
// admitted at once when they fit, and otherwise after at most one more of a's
// requests is admitted.
func TestFairness(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name     string
		budget   int64
		inflight int
		aBytes   int64
		bFits    int64 // b request that fits beside a's in-flight ones
		bQueues  int64 // b request that must queue
	}{
		{name: "bytes bound", budget: 10*mib + mib/2, inflight: 400, aBytes: mib, bFits: 1024, bQueues: 600 << 10},
		{name: "count bound", budget: 1 << 40, inflight: 10, aBytes: mib, bFits: -1, bQueues: 1024},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := runtime.NumGoroutine()
			cfg, _ := testConfig(tt.budget)
			cfg.MaxRequestsInflight = tt.inflight
			cfg.MaxQueued = 2000
			l := mustNew(t, cfg)
			aCtx, aCancel := context.WithCancel(context.Background())
			aTickets := make(chan Ticket, 1000)
			var aWG sync.WaitGroup
			for range 1000 {
				aWG.Add(1)
				go func() {
					defer aWG.Done()
					tk, err := l.Admit(aCtx, Request{Client: "a", Class: "list/configmaps", Bytes: tt.aBytes})
					if err == nil {
						aTickets <- tk
					} else if !errors.Is(err, context.Canceled) {
						t.Errorf("a: Admit = %v", err)
					}
				}()
			}
			waitFor(t, "a's flood queued", func() bool {
				st := l.Stats()
				return st.InflightRequests == 10 && st.Queued == 990
			})

			if tt.bFits >= 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				tk, err := l.Admit(ctx, Request{Client: "b", Class: "get/configmaps", Bytes: tt.bFits})
				cancel()
				if err != nil {
					t.Fatalf("b's fitting request = %v, want admitted at once", err)
				}
				tk.Release(0)
			}

			maxAAdmits, maxReleases := 0, 0
			for round := range 20 {
				bDone := make(chan Ticket, 1)
				go func() {
					tk, err := l.Admit(context.Background(), Request{Client: "b", Class: "get/configmaps", Bytes: tt.bQueues})
					if err != nil {
						t.Errorf("b: Admit = %v", err)
					}
					bDone <- tk
				}()
				waitFor(t, "b queued", func() bool { return l.queuedOf("b") == 1 })
				aAdmits, releases := 0, 0
				for l.queuedOf("b") == 1 {
					if releases > 4 {
						t.Fatalf("round %d: b still queued after %d of a's releases", round, releases)
					}
					tk := <-aTickets
					before := l.queuedOf("a")
					tk.Release(tt.aBytes)
					aAdmits += before - l.queuedOf("a")
					releases++
				}
				maxAAdmits = max(maxAAdmits, aAdmits)
				maxReleases = max(maxReleases, releases)
				tk := <-bDone
				tk.Release(tt.bQueues)
			}
			t.Logf("b waited for at most %d releases and %d admissions of a", maxReleases, maxAAdmits)
			if maxAAdmits > 1 {
				t.Fatalf("a got %d admissions while b was queued, want <= 1 (round-robin)", maxAAdmits)
			}

			aCancel()
			go func() { aWG.Wait(); close(aTickets) }()
			for tk := range aTickets {
				tk.Release(0)
			}
			if st := l.Stats(); st != (Stats{BudgetBytes: tt.budget, WatchBudgetBytes: tt.budget}) {
				t.Fatalf("after drain Stats() = %+v", st)
			}
			checkGoroutines(t, base)
		})
	}
}

// TestConcurrentAdmitRelease hammers a limiter with random sizes, kinds,
// clients and cancellations; reservations must never exceed the budget, every
// admission is released, and everything drains.
func TestConcurrentAdmitRelease(t *testing.T) {
	for _, qps := range []float64{0, 5000} {
		t.Run(fmt.Sprintf("qps=%g", qps), func(t *testing.T) {
			base := runtime.NumGoroutine()
			const budget = 1 << 20
			cfg := defaultConfig()
			cfg.MaxInflightBytes = budget
			cfg.MaxRequestsInflight = 8
			cfg.MaxWatchesInflight = 3
			cfg.MaxQueued = 12
			cfg.MaxQueueWait = 3 * time.Millisecond
			cfg.PerClientQPS = qps
			cfg.PerClientBurst = 20
			cfg.Metrics = metrics.NewSet()
			// Debug logging on, so the race detector sees the log paths too.
			cfg.Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()),
				zapcore.AddSync(io.Discard), zap.DebugLevel))
			l := mustNew(t, cfg)

			var held, heldWatch, admitted, released, rejected, cancelled atomic.Int64
			var over atomic.Bool
			var wg sync.WaitGroup
			for g := range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 300 {
						req := Request{
							Client: fmt.Sprintf("c%d", rng.IntN(6)),
							Class:  fmt.Sprintf("k%d", rng.IntN(3)),
							Bytes:  rng.Int64N(300 << 10),
						}
						if rng.IntN(10) == 0 {
							req.Kind = Watch
						}
						if rng.IntN(50) == 0 {
							req.Bytes = budget + budget/2 // oversize: admitted alone
						}
						ctx, cancel := context.Background(), context.CancelFunc(func() {})
						if rng.IntN(5) == 0 {
							ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(2000))*time.Microsecond)
						}
						tk, err := l.Admit(ctx, req)
						cancel()
						switch {
						case err == nil:
						case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout), errors.Is(err, ErrRateLimited):
							rejected.Add(1)
							if _, ok := RetryAfter(err); !ok {
								t.Errorf("rejection %v carries no RetryAfter", err)
							}
							continue
						case errors.Is(err, context.DeadlineExceeded):
							cancelled.Add(1)
							continue
						default:
							t.Errorf("Admit = %v", err)
							return
						}
						admitted.Add(1)
						// Watches have their own budget (MaxWatchBytes).
						pool := &held
						if req.Kind == Watch {
							pool = &heldWatch
						}
						if pool.Add(tk.Reserved()) > budget {
							over.Store(true)
						}
						if st := l.Stats(); st.ReservedBytes-st.WatchReservedBytes > budget || st.WatchReservedBytes > budget ||
							st.InflightRequests > cfg.MaxRequestsInflight || st.InflightWatches > cfg.MaxWatchesInflight {
							over.Store(true)
						}
						runtime.Gosched()
						pool.Add(-tk.Reserved())
						tk.Release(rng.Int64N(400 << 10))
						released.Add(1)
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				buf := make([]byte, 1<<20)
				t.Fatalf("deadlock?\n%s", buf[:runtime.Stack(buf, true)])
			}
			t.Logf("admitted %d, rejected %d, cancelled %d", admitted.Load(), rejected.Load(), cancelled.Load())
			var mbuf bytes.Buffer
			cfg.Metrics.WritePrometheus(&mbuf)
			t.Logf("metrics:\n%s", grepLines(mbuf.String(), "_total"))
			if over.Load() {
				t.Fatalf("reservations or in-flight counts exceeded their limits")
			}
			if admitted.Load() != released.Load() || admitted.Load() == 0 {
				t.Fatalf("admitted %d, released %d", admitted.Load(), released.Load())
			}
			if st := l.Stats(); st != (Stats{BudgetBytes: budget, WatchBudgetBytes: budget}) {
				t.Fatalf("after all releases Stats() = %+v", st)
			}
			l.mu.Lock()
			ring, clients := len(l.ring), len(l.queues)
			l.mu.Unlock()
			if ring != 0 || clients != 0 {
				t.Fatalf("leftover state: %d queues in ring, %d in map", ring, clients)
			}
			checkGoroutines(t, base)
		})
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// TestClientShare: with ClientShare 0.5, client a holds at most half of the
// short seats and of the bytes; its further requests queue behind its own
// while client b is admitted at once; a's queued request is admitted when
// one of its own is released. One request is always admitted, whatever its
// size.
func TestClientShare(t *testing.T) {
	const mib = 1 << 20
	cfg, _ := testConfig(10 * mib)
	cfg.ClientShare = 0.5
	cfg.MaxRequestsInflight = 10
	l := mustNew(t, cfg)
	ctx := context.Background()
	var held []Ticket
	for i := range 5 {
		tk, err := l.Admit(ctx, Request{Client: "a", Bytes: 1024})
		if err != nil {
			t.Fatalf("a's request %d = %v, want admitted", i, err)
		}
		held = append(held, tk)
	}
	queued := make(chan error, 1)
	go func() {
		tk, err := l.Admit(ctx, Request{Client: "a", Bytes: 1024})
		if err == nil {
			defer tk.Release(0)
		}
		queued <- err
	}()
	waitFor(t, "a's 6th request queued", func() bool { return l.queuedOf("a") == 1 })
	tb, err := l.Admit(ctx, Request{Client: "b", Bytes: 1024})
	if err != nil {
		t.Fatalf("b = %v, want admitted at once beside a's 5", err)
	}
	tb.Release(0)
	held[0].Release(0)
	if err := <-queued; err != nil {
		t.Fatalf("a's queued request = %v, want admitted after a released one", err)
	}
	for i := range held[1:] {
		held[1+i].Release(0)
	}

	// Bytes: one request of a may exceed the share; a second one queues.
	big, err := l.Admit(ctx, Request{Client: "a", Bytes: 6 * mib})
	if err != nil {
		t.Fatalf("a's one large request = %v, want admitted", err)
	}
	c2, cancel := context.WithCancel(ctx)
	second := make(chan error, 1)
	go func() {
		tk, err := l.Admit(c2, Request{Client: "a", Bytes: mib})
		if err == nil {
			tk.Release(0)
		}
		second <- err
	}()
	waitFor(t, "a's second request queued on its byte share", func() bool { return l.queuedOf("a") == 1 })
	tb, err = l.Admit(ctx, Request{Client: "b", Bytes: mib})
	if err != nil {
		t.Fatalf("b = %v, want admitted beside a's large one", err)
	}
	tb.Release(0)
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("a's second request = %v, want queued until cancelled", err)
	}
	big.Release(0)
	if st := l.Stats(); st.InflightRequests != 0 || st.ReservedBytes != 0 {
		t.Fatalf("after releases: %+v", st)
	}
	l.mu.Lock()
	n := len(l.holding)
	l.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d clients still hold something", n)
	}
}
