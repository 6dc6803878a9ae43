package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // substring; "" = valid
	}{
		{"defaults with budget", func(c *Config) {}, ""},
		{"no budget", func(c *Config) { c.MaxInflightBytes = 0 }, "MaxInflightBytes"},
		{"zero requests", func(c *Config) { c.MaxRequestsInflight = 0 }, "MaxRequestsInflight"},
		{"negative watches", func(c *Config) { c.MaxWatchesInflight = -1 }, "MaxWatchesInflight"},
		{"single below budget", func(c *Config) { c.MaxSingleRequestBytes = 10 }, "MaxSingleRequestBytes"},
		{"negative queue", func(c *Config) { c.MaxQueued = -1 }, "MaxQueued"},
		{"zero queue ok", func(c *Config) { c.MaxQueued = 0 }, ""},
		{"zero wait", func(c *Config) { c.MaxQueueWait = 0 }, "MaxQueueWait"},
		{"negative qps", func(c *Config) { c.PerClientQPS = -1 }, "PerClientQPS"},
		{"qps without burst", func(c *Config) { c.PerClientQPS = 5; c.PerClientBurst = 0 }, "PerClientBurst"},
		{"burst without qps ok", func(c *Config) { c.PerClientBurst = 0 }, ""},
		{"negative classes", func(c *Config) { c.MaxClasses = -1 }, "MaxClasses"},
		{"negative bulk seats", func(c *Config) { c.MaxBulkInflight = -1 }, "MaxBulkInflight"},
		{"zero threshold", func(c *Config) { c.BulkListBytes = 0 }, "BulkListBytes"},
		{"negative reserve", func(c *Config) { c.ShortReservedBytes = -1 }, "ShortReservedBytes"},
		{"reserve is the whole budget", func(c *Config) { c.ShortReservedBytes = 1 << 20 }, "ShortReservedBytes"},
		{"negative yield", func(c *Config) { c.BulkYield = -time.Millisecond }, "BulkYield"},
		{"yield off", func(c *Config) { c.BulkYield = 0 }, ""},
		{"explicit reserve", func(c *Config) { c.ShortReservedBytes = 1 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := testConfig(1 << 20)
			tt.mutate(&cfg)
			_, err := New(cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New() = %v, want error naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewDefaultsSingleRequest(t *testing.T) {
	cfg, _ := testConfig(1000)
	l := mustNew(t, cfg)
	if got := l.cfg.MaxSingleRequestBytes; got != 2000 {
		t.Fatalf("MaxSingleRequestBytes = %d, want 2000", got)
	}
}

// TestAdmitTable admits held requests, then one more with queuing disabled, so
// a request that does not fit is rejected at once with ErrQueueFull.
func TestAdmitTable(t *testing.T) {
	const budget = 1000
	tests := []struct {
		name         string
		held         []Request
		req          Request
		wantErr      error
		wantReserved int64 // of req when admitted
		wantRetry    int   // when rejected
	}{
		{"fits", nil, Request{Bytes: 400}, nil, 400, 0},
		{"fits exactly", []Request{{Bytes: 600}}, Request{Bytes: 400}, nil, 400, 0},
		{"bytes full", []Request{{Bytes: 700}}, Request{Bytes: 400}, ErrQueueFull, 0, 1},
		{"zero bytes when bytes full", []Request{{Bytes: 1000}}, Request{Bytes: 0}, nil, 0, 0},
		{"negative bytes count as zero", []Request{{Bytes: 1000}}, Request{Bytes: -5}, nil, 0, 0},
		{"short count full", []Request{{}, {}}, Request{}, ErrQueueFull, 0, 1},
		{"watch counted apart", []Request{{}, {}}, Request{Kind: Watch}, nil, 0, 0},
		{"watch count full", []Request{{Kind: Watch}}, Request{Kind: Watch}, ErrQueueFull, 0, 1},
		{"watch bytes apart", []Request{{Kind: Watch, Bytes: 900}}, Request{Bytes: 200}, nil, 200, 0},
		{"watch bytes full", []Request{{Kind: Watch, Bytes: 900}}, Request{Kind: Watch, Bytes: 200, Client: "b"}, ErrQueueFull, 0, 1},
		{"unknown kind is short", []Request{{}, {}}, Request{Kind: 7}, ErrQueueFull, 0, 1},
		{"oversize alone", nil, Request{Bytes: 1500}, nil, budget, 0},
		{"oversize at single limit", nil, Request{Bytes: 2000}, nil, budget, 0},
		{"oversize waits for others", []Request{{Bytes: 1}}, Request{Bytes: 1500}, ErrQueueFull, 0, 1},
		{"nothing fits beside oversize", []Request{{Bytes: 1500}}, Request{Bytes: 1}, ErrQueueFull, 0, 1},
		{"count-only beside oversize", []Request{{Bytes: 1500}}, Request{Bytes: 0}, nil, 0, 0},
		{"too large", nil, Request{Bytes: 2001}, ErrTooLarge, 0, 0},
		// Levels: bulk requests have their own seats and may not take the
		// short reserve (250: bulk may reserve 750 together); short requests
		// and watches are not limited by bulk seats.
		{"bulk fits", nil, Request{Kind: Bulk, Bytes: 700}, nil, 700, 0},
		{"bulk clamped to bulk budget", nil, Request{Kind: Bulk, Bytes: 900}, nil, 750, 0},
		{"bulk oversize clamped to bulk budget", nil, Request{Kind: Bulk, Bytes: 1500}, nil, 750, 0},
		{"bulk too large", nil, Request{Kind: Bulk, Bytes: 2001}, ErrTooLarge, 0, 0},
		{"bulk seats full", []Request{{Kind: Bulk}, {Kind: Bulk}}, Request{Kind: Bulk}, ErrQueueFull, 0, 1},
		{"short beside full bulk seats", []Request{{Kind: Bulk}, {Kind: Bulk}}, Request{Bytes: 10}, nil, 10, 0},
		{"watch beside full bulk seats", []Request{{Kind: Bulk}, {Kind: Bulk}}, Request{Kind: Watch}, nil, 0, 0},
		{"bulk bytes full", []Request{{Kind: Bulk, Bytes: 700}}, Request{Kind: Bulk, Bytes: 100}, ErrQueueFull, 0, 1},
		{"short takes the reserve", []Request{{Kind: Bulk, Bytes: 750}}, Request{Bytes: 250}, nil, 250, 0},
		{"short beyond the reserve", []Request{{Kind: Bulk, Bytes: 750}}, Request{Bytes: 251}, ErrQueueFull, 0, 1},
		{"short may use bulk's share", nil, Request{Bytes: 1000}, nil, 1000, 0},
		{"bulk after shorts took its share", []Request{{Bytes: 500}}, Request{Kind: Bulk, Bytes: 600}, ErrQueueFull, 0, 1},
		{"bulk fits beside shorts", []Request{{Bytes: 500}}, Request{Kind: Bulk, Bytes: 500}, nil, 500, 0},
		{"short count does not count bulk", []Request{{}, {}}, Request{Kind: Bulk}, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := testConfig(budget)
			cfg.MaxRequestsInflight = 2
			cfg.MaxBulkInflight = 2
			cfg.MaxWatchesInflight = 1
			cfg.MaxQueued = 0
			l := mustNew(t, cfg)
			ctx := context.Background()
			held := make([]Ticket, len(tt.held))
			for i, r := range tt.held {
				var err error
				if held[i], err = l.Admit(ctx, r); err != nil {
					t.Fatalf("Admit(held %+v) = %v", r, err)
				}
			}
			tk, err := l.Admit(ctx, tt.req)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Admit(%+v) error = %v, want %v", tt.req, err, tt.wantErr)
			}
			if err != nil {
				secs, ok := RetryAfter(err)
				if !ok || secs != tt.wantRetry {
					t.Fatalf("RetryAfter(%v) = %d, %v; want %d, true", err, secs, ok, tt.wantRetry)
				}
			} else if tk.Reserved() != tt.wantReserved {
				t.Fatalf("Reserved() = %d, want %d", tk.Reserved(), tt.wantReserved)
			}
			if st := l.Stats(); st.ReservedBytes-st.WatchReservedBytes > budget || st.WatchReservedBytes > budget || st.BulkReservedBytes > budget-250 {
				t.Fatalf("Stats() = %+v: over a budget (%d, bulk %d)", st, budget, budget-250)
			}
			tk.Release(0)
			for i := range held {
				held[i].Release(0)
			}
			if st := l.Stats(); st != (Stats{BudgetBytes: budget, WatchBudgetBytes: budget}) {
				t.Fatalf("after releases Stats() = %+v, want all zero", st)
			}
		})
	}
}

func TestReleaseIdempotent(t *testing.T) {
	cfg, _ := testConfig(100)
	l := mustNew(t, cfg)
	tk, err := l.Admit(context.Background(), Request{Bytes: 60})
	if err != nil {
		t.Fatal(err)
	}
	tk.Release(0)
	tk.Release(0)
	var zero Ticket
	zero.Release(10)
	if st := l.Stats(); st.ReservedBytes != 0 || st.InflightRequests != 0 {
		t.Fatalf("Stats() = %+v, want nothing in flight", st)
	}
}

func TestReleasePanickingCaller(t *testing.T) {
	cfg, _ := testConfig(100)
	l := mustNew(t, cfg)
	func() {
		defer func() { _ = recover() }()
		tk, err := l.Admit(context.Background(), Request{Bytes: 60})
		if err != nil {
			t.Fatal(err)
		}
		defer tk.Release(0)
		panic("handler bug")
	}()
	if st := l.Stats(); st.ReservedBytes != 0 || st.InflightRequests != 0 {
		t.Fatalf("after panic Stats() = %+v, want nothing in flight", st)
	}
}

func TestQueuedAdmittedOnRelease(t *testing.T) {
	cfg, _ := testConfig(100)
	l := mustNew(t, cfg)
	ctx := context.Background()
	first, err := l.Admit(ctx, Request{Client: "a", Bytes: 80})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var second Ticket
	go func() {
		var err error
		second, err = l.Admit(ctx, Request{Client: "b", Bytes: 50})
		done <- err
	}()
	waitFor(t, "second request queued", func() bool { return l.Stats().Queued == 1 })
	first.Release(80)
	if err := <-done; err != nil {
		t.Fatalf("queued Admit = %v, want admitted", err)
	}
	if st := l.Stats(); st.ReservedBytes != 50 || st.Queued != 0 {
		t.Fatalf("Stats() = %+v, want 50 reserved, 0 queued", st)
	}
	second.Release(0)
}

func TestQueueTimeout(t *testing.T) {
	base := numGoroutine()
	cfg, clk := testConfig(100)
	cfg.MaxQueueWait = 5 * time.Second
	l := mustNew(t, cfg)
	ctx := context.Background()
	held, err := l.Admit(ctx, Request{Client: "a", Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Admit(ctx, Request{Client: "b", Bytes: 10})
		done <- err
	}()
	waitFor(t, "queue timer", func() bool { return clk.pending() == 1 })
	clk.Advance(4 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Admit returned %v before the queue wait ended", err)
	default:
	}
	clk.Advance(time.Second)
	err = <-done
	if !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("Admit = %v, want ErrQueueTimeout", err)
	}
	if secs, ok := RetryAfter(err); !ok || secs < 1 {
		t.Fatalf("RetryAfter = %d, %v; want >= 1, true", secs, ok)
	}
	if st := l.Stats(); st.Queued != 0 || st.ReservedBytes != 100 {
		t.Fatalf("Stats() = %+v, want 0 queued, 100 reserved", st)
	}
	held.Release(0)
	checkGoroutines(t, base)
}

func TestQueueFullAndPushOut(t *testing.T) {
	cfg, _ := testConfig(100)
	cfg.MaxQueued = 2
	l := mustNew(t, cfg)
	ctx := context.Background()
	held, err := l.Admit(ctx, Request{Client: "a", Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := l.Admit(ctx, Request{Client: "a", Bytes: 10})
			errs <- err
		}()
	}
	waitFor(t, "two of a queued", func() bool { return l.Stats().Queued == 2 })

	// a's third request finds the queue full.
	_, err = l.Admit(ctx, Request{Client: "a", Bytes: 10})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third Admit of a = %v, want ErrQueueFull", err)
	}
	if secs, _ := RetryAfter(err); secs != 1 {
		t.Fatalf("RetryAfter = %d, want 1", secs)
	}

	// b's first request pushes out a's newest.
	bDone := make(chan error, 1)
	var bTicket Ticket
	go func() {
		var err error
		bTicket, err = l.Admit(ctx, Request{Client: "b", Bytes: 10})
		bDone <- err
	}()
	if err := <-errs; !errors.Is(err, ErrQueueFull) {
		t.Fatalf("pushed-out Admit of a = %v, want ErrQueueFull", err)
	}
	waitFor(t, "b queued", func() bool { return l.Stats().Queued == 2 })

	// b's second request would make b's queue as long as a's: rejected.
	if _, err := l.Admit(ctx, Request{Client: "b", Bytes: 10}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second Admit of b = %v, want ErrQueueFull", err)
	}
	held.Release(0)
	if err := <-bDone; err != nil {
		t.Fatalf("b = %v, want admitted", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("a = %v, want admitted", err)
	}
	bTicket.Release(0)
}

func TestCancelWhileQueued(t *testing.T) {
	base := numGoroutine()
	cfg, _ := testConfig(100)
	l := mustNew(t, cfg)
	bg := context.Background()
	held, err := l.Admit(bg, Request{Client: "a", Bytes: 90})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	first := make(chan error, 1)
	go func() {
		_, err := l.Admit(ctx, Request{Client: "b", Bytes: 50})
		first <- err
	}()
	waitFor(t, "b queued", func() bool { return l.Stats().Queued == 1 })
	// b's second request (fits) is behind b's first in b's FIFO queue.
	second := make(chan error, 1)
	var tk Ticket
	go func() {
		var err error
		tk, err = l.Admit(bg, Request{Client: "b", Bytes: 5})
		second <- err
	}()
	waitFor(t, "b's second queued", func() bool { return l.Stats().Queued == 2 })
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Admit = %v, want context.Canceled", err)
	}
	// Dequeuing the head lets the second one in.
	if err := <-second; err != nil {
		t.Fatalf("second Admit = %v, want admitted", err)
	}
	if st := l.Stats(); st.Queued != 0 || st.ReservedBytes != 95 {
		t.Fatalf("Stats() = %+v, want 0 queued, 95 reserved", st)
	}
	tk.Release(0)
	held.Release(0)
	if _, err := l.Admit(ctx, Request{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit(cancelled ctx) = %v, want context.Canceled", err)
	}
	checkGoroutines(t, base)
}

func TestRateLimit(t *testing.T) {
	cfg, clk := testConfig(100)
	cfg.PerClientQPS = 2
	cfg.PerClientBurst = 2
	l := mustNew(t, cfg)
	ctx := context.Background()
	for i := range 2 {
		tk, err := l.Admit(ctx, Request{Client: "a"})
		if err != nil {
			t.Fatalf("Admit #%d = %v", i, err)
		}
		tk.Release(0)
	}
	_, err := l.Admit(ctx, Request{Client: "a"})
	if !errors.Is(err, ErrRateLimited) {
		t.Fatalf("third Admit = %v, want ErrRateLimited", err)
	}
	if secs, _ := RetryAfter(err); secs != 1 {
		t.Fatalf("RetryAfter = %d, want 1", secs)
	}
	// Another client has its own bucket.
	if tk, err := l.Admit(ctx, Request{Client: "b"}); err != nil {
		t.Fatalf("Admit(b) = %v", err)
	} else {
		tk.Release(0)
	}
	clk.Advance(500 * time.Millisecond)
	if tk, err := l.Admit(ctx, Request{Client: "a"}); err != nil {
		t.Fatalf("Admit after refill = %v", err)
	} else {
		tk.Release(0)
	}
	// Idle clients with full buckets are swept.
	clk.Advance(time.Hour)
	for range sweepEvery {
		tk, err := l.Admit(ctx, Request{Client: "c"})
		if err == nil {
			tk.Release(0)
		}
	}
	l.mu.Lock()
	_, aKept := l.limiters["a"]
	l.mu.Unlock()
	if aKept {
		t.Fatalf("idle client a not swept")
	}
}

func TestEWMACorrection(t *testing.T) {
	cfg, _ := testConfig(1 << 30)
	cfg.MaxClasses = 2
	l := mustNew(t, cfg)
	ctx := context.Background()
	run := func(class string, estimate, used int64) Ticket {
		t.Helper()
		tk, err := l.Admit(ctx, Request{Class: class, Bytes: estimate})
		if err != nil {
			t.Fatal(err)
		}
		tk.Release(used)
		return tk
	}
	// Using twice the estimate moves the ratio toward 2.
	want := 1.0
	for i := range 30 {
		run("list/configmaps", 1000, 2000)
		want += ewmaAlpha * (2 - want)
		if r, _ := l.Ratio("list/configmaps"); r-want > 1e-9 || want-r > 1e-9 {
			t.Fatalf("after %d releases Ratio = %v, want %v", i+1, r, want)
		}
	}
	tk := run("list/configmaps", 1000, 0)
	if r, _ := l.Ratio("list/configmaps"); tk.Reserved() < 1990 || tk.Reserved() > 2000 || r != want {
		t.Fatalf("corrected reservation = %d (ratio %v), want ~2000 and ratio unchanged by Release(0)", tk.Reserved(), r)
	}
	// Samples are bounded: a huge overrun cannot push the ratio above maxRatio.
	for range 100 {
		run("list/secrets", 10, 1<<40)
	}
	if r, _ := l.Ratio("list/secrets"); r > maxRatio || r < maxRatio-0.01 {
		t.Fatalf("Ratio after overruns = %v, want ~%v", r, float64(maxRatio))
	}
	// MaxClasses = 2: a third class is not tracked.
	run("list/pods", 10, 40)
	if _, ok := l.Ratio("list/pods"); ok {
		t.Fatalf("third class tracked beyond MaxClasses")
	}
	// Use records the peak; Release reports the larger.
	l2 := mustNew(t, func() Config { c, _ := testConfig(1 << 30); return c }())
	tk, err := l2.Admit(ctx, Request{Class: "c", Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	tk.Use(30)
	tk.Use(10)
	tk.Release(0)
	if r, _ := l2.Ratio("c"); r != 1+ewmaAlpha*(0.3-1) {
		t.Fatalf("Ratio after Use(30) = %v, want %v", r, 1+ewmaAlpha*(0.3-1))
	}
	// Underruns are bounded below by minRatio.
	for range 100 {
		run("list/secrets", 1000, 1)
	}
	if r, _ := l.Ratio("list/secrets"); r < minRatio || r > minRatio+0.01 {
		t.Fatalf("Ratio after underruns = %v, want ~%v", r, minRatio)
	}
	tk = run("list/secrets", 1000, 0)
	if got := tk.Reserved(); got < 250 || got > 260 {
		t.Fatalf("reservation at min ratio = %d, want ~250", got)
	}
}

func TestMetrics(t *testing.T) {
	cfg, _ := testConfig(100)
	cfg.MaxQueued = 0
	l := mustNew(t, cfg)
	ctx := context.Background()
	tk, err := l.Admit(ctx, Request{Bytes: 70, Class: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, Request{Bytes: 70}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Admit = %v, want ErrQueueFull", err)
	}
	if _, err := l.Admit(ctx, Request{Bytes: 1000}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Admit = %v, want ErrTooLarge", err)
	}
	var buf bytes.Buffer
	cfg.Metrics.WritePrometheus(&buf)
	for _, want := range []string{
		`lazyapi_ratelimit_inflight{kind="short"} 1`,
		`lazyapi_ratelimit_inflight{kind="watch"} 0`,
		`lazyapi_ratelimit_reserved_bytes 70`,
		`lazyapi_ratelimit_budget_bytes 100`,
		`lazyapi_ratelimit_queued 0`,
		`lazyapi_ratelimit_admitted_total{how="immediate"} 1`,
		`lazyapi_ratelimit_rejected_total{reason="queue_full"} 1`,
		`lazyapi_ratelimit_rejected_total{reason="too_large"} 1`,
	} {
		if !strings.Contains(buf.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
	tk.Release(35)
	buf.Reset()
	cfg.Metrics.WritePrometheus(&buf)
	for _, want := range []string{
		`lazyapi_ratelimit_reserved_bytes 0`,
		`lazyapi_ratelimit_used_bytes_total 35`,
		`lazyapi_ratelimit_estimated_bytes_total 70`,
	} {
		if !strings.Contains(buf.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
}

func TestRejectErrorMessage(t *testing.T) {
	err := error(&RejectError{Reason: ReasonQueueTimeout, RetryAfter: 2, Client: "10.0.0.1", Bytes: 5})
	want := `ratelimit: timed out waiting in queue (client "10.0.0.1", working set 5 bytes, retry after 2s)`
	if err.Error() != want {
		t.Fatalf("Error() = %q, want %q", err.Error(), want)
	}
	if _, ok := RetryAfter(errors.New("other")); ok {
		t.Fatalf("RetryAfter(other error) ok = true")
	}
	if !errors.Is(fmtWrap(err), ErrQueueTimeout) {
		t.Fatalf("wrapped RejectError does not match ErrQueueTimeout")
	}
	if secs, ok := RetryAfter(fmtWrap(err)); !ok || secs != 2 {
		t.Fatalf("RetryAfter(wrapped) = %d, %v", secs, ok)
	}
}

// TestWatchQueueApart: a client's watch waiting for a watch slot does not hold
// back its GETs, which have their own queue.
func TestWatchQueueApart(t *testing.T) {
	cfg, _ := testConfig(100)
	cfg.MaxWatchesInflight = 1
	l := mustNew(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	w1, err := l.Admit(ctx, Request{Client: "a", Kind: Watch})
	if err != nil {
		t.Fatal(err)
	}
	w2 := make(chan error, 1)
	go func() {
		tk, err := l.Admit(ctx, Request{Client: "a", Kind: Watch})
		tk.Release(0)
		w2 <- err
	}()
	waitFor(t, "second watch queued", func() bool { return l.Stats().Queued == 1 })
	get, err := l.Admit(ctx, Request{Client: "a", Bytes: 10})
	if err != nil {
		t.Fatalf("GET behind a queued watch = %v, want admitted", err)
	}
	get.Release(0)
	cancel()
	if err := <-w2; !errors.Is(err, context.Canceled) {
		t.Fatalf("queued watch = %v, want context.Canceled", err)
	}
	w1.Release(0)
}

func TestDebugLogs(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	cfg, _ := testConfig(100)
	cfg.MaxQueued = 0
	cfg.Logger = zap.New(core)
	l := mustNew(t, cfg)
	ctx := context.Background()
	tk, err := l.Admit(ctx, Request{Client: "u1", Class: "list/pods", Bytes: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(ctx, Request{Client: "u2", Bytes: 80}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Admit = %v, want ErrQueueFull", err)
	}
	tk.Release(40)
	var got []string
	for _, e := range logs.All() {
		got = append(got, fmt.Sprintf("%s client=%v reason=%v used=%v", e.Message,
			e.ContextMap()["client"], e.ContextMap()["reason"], e.ContextMap()["used"]))
	}
	want := []string{
		"ratelimit: admit client=u1 reason=<nil> used=<nil>",
		"ratelimit: reject client=u2 reason=queue_full used=<nil>",
		"ratelimit: release client=<nil> reason=<nil> used=40",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
