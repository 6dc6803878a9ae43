package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestLevelsDefaults: the bulk seats and the short reserve are derived when
// 0 (their validation is in TestNewValidation); IsBulk is strictly above
// the threshold.
func TestLevelsDefaults(t *testing.T) {
	cfg, _ := testConfig(1000)
	l := mustNew(t, cfg)
	if l.cfg.MaxBulkInflight < 1 || l.cfg.ShortReservedBytes != 250 || l.bulkBudget != 750 {
		t.Fatalf("derived bulk seats %d, short reserve %d, bulk budget %d; want >= 1, 250, 750",
			l.cfg.MaxBulkInflight, l.cfg.ShortReservedBytes, l.bulkBudget)
	}
	for _, tc := range []struct {
		bytes int64
		want  bool
	}{{0, false}, {16 << 20, false}, {16<<20 + 1, true}} {
		if got := l.IsBulk(tc.bytes); got != tc.want {
			t.Errorf("IsBulk(%d) = %v, want %v", tc.bytes, got, tc.want)
		}
	}
}

// TestBulkQueuedWhileShortServed: with the bulk seats taken, a client's next
// bulk LIST queues, GETs of the same client are admitted at once, and the
// queued bulk LIST gets the seat when one is released.
func TestBulkQueuedWhileShortServed(t *testing.T) {
	cfg, _ := testConfig(1000)
	cfg.MaxBulkInflight = 1
	l := mustNew(t, cfg)
	ctx := context.Background()
	b1, err := l.Admit(ctx, Request{Client: "lister", Kind: Bulk, Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var b2 Ticket
	go func() {
		var err error
		b2, err = l.Admit(ctx, Request{Client: "lister", Kind: Bulk, Bytes: 100})
		done <- err
	}()
	waitFor(t, "second bulk queued", func() bool { return l.Stats().Queued == 1 })
	for _, c := range []string{"lister", "other"} {
		g, err := l.Admit(ctx, Request{Client: c, Bytes: 10})
		if err != nil {
			t.Fatalf("GET of %s beside a queued bulk LIST = %v, want admitted", c, err)
		}
		g.Release(0)
	}
	select {
	case err := <-done:
		t.Fatalf("queued bulk LIST returned %v while the seat was taken", err)
	default:
	}
	b1.Release(0)
	if err := <-done; err != nil {
		t.Fatalf("queued bulk LIST = %v, want admitted", err)
	}
	if st := l.Stats(); st.InflightBulk != 1 || st.BulkReservedBytes != 100 || st.Queued != 0 {
		t.Fatalf("Stats() = %+v, want 1 bulk with 100 bytes, none queued", st)
	}
	b2.Release(0)
}

// TestYield: a bulk stream's Yield returns at once without short requests
// in flight, and otherwise waits until the last one is released, the yield
// time passes, or its context ends.
func TestYield(t *testing.T) {
	type ending int
	const (
		byRelease ending = iota
		byTimer
		byContext
	)
	for _, tc := range []struct {
		name string
		end  ending
	}{{"release", byRelease}, {"timer", byTimer}, {"context", byContext}} {
		t.Run(tc.name, func(t *testing.T) {
			base := numGoroutine()
			cfg, clk := testConfig(1000)
			cfg.BulkYield = 50 * time.Millisecond
			l := mustNew(t, cfg)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if l.Yield(ctx) {
				t.Fatal("Yield waited with no short request in flight")
			}
			bulk, err := l.Admit(ctx, Request{Kind: Bulk, Bytes: 100})
			if err != nil {
				t.Fatal(err)
			}
			if l.Yield(ctx) {
				t.Fatal("Yield waited for a bulk request")
			}
			g1, err := l.Admit(ctx, Request{Client: "a", Bytes: 10})
			if err != nil {
				t.Fatal(err)
			}
			g2, err := l.Admit(ctx, Request{Client: "b", Bytes: 10})
			if err != nil {
				t.Fatal(err)
			}
			yielded := make(chan bool, 1)
			go func() { yielded <- l.Yield(ctx) }()
			waitFor(t, "yield timer", func() bool { return clk.pending() == 1 })
			g1.Release(0)
			switch tc.end {
			case byRelease:
				clk.Advance(49 * time.Millisecond)
				select {
				case <-yielded:
					t.Fatal("Yield returned while a short request was in flight")
				default:
				}
				g2.Release(0)
			case byTimer:
				clk.Advance(50 * time.Millisecond)
			case byContext:
				cancel()
			}
			if !<-yielded {
				t.Fatal("Yield = false, want true (it waited)")
			}
			g2.Release(0)
			bulk.Release(0)
			var buf bytes.Buffer
			cfg.Metrics.WritePrometheus(&buf)
			want := "lazyapi_ratelimit_bulk_yield_timeouts_total 0\n"
			if tc.end == byTimer {
				want = "lazyapi_ratelimit_bulk_yield_timeouts_total 1\n"
			}
			for _, w := range []string{"lazyapi_ratelimit_bulk_yields_total 1\n", want} {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("metrics lack %q", w)
				}
			}
			checkGoroutines(t, base)
		})
	}
}

// TestYieldOff: BulkYield 0 never waits.
func TestYieldOff(t *testing.T) {
	cfg, _ := testConfig(1000)
	cfg.BulkYield = 0
	l := mustNew(t, cfg)
	g, err := l.Admit(context.Background(), Request{Bytes: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Release(0)
	if l.Yield(context.Background()) {
		t.Fatal("Yield waited with BulkYield 0")
	}
}

// TestBecomeBulk: a short request that turns bulk leaves its short seat (a
// queued short request takes it), counts as bulk with its bytes, keeps other
// bulk requests out while over the bulk limits, and does not yield to
// itself.
func TestBecomeBulk(t *testing.T) {
	cfg, _ := testConfig(1000) // bulk budget 750
	cfg.MaxRequestsInflight = 1
	cfg.MaxBulkInflight = 1
	cfg.MaxQueueWait = time.Hour
	l := mustNew(t, cfg)
	ctx := context.Background()
	bulk, err := l.Admit(ctx, Request{Client: "a", Kind: Bulk, Bytes: 700})
	if err != nil {
		t.Fatal(err)
	}
	list, err := l.Admit(ctx, Request{Client: "a", Bytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var get Ticket
	go func() {
		var err error
		get, err = l.Admit(ctx, Request{Client: "b", Bytes: 10})
		done <- err
	}()
	waitFor(t, "GET queued for the short seat", func() bool { return l.Stats().Queued == 1 })
	list.BecomeBulk()
	if err := <-done; err != nil {
		t.Fatalf("queued GET = %v, want admitted once the LIST became bulk", err)
	}
	want := Stats{InflightRequests: 1, InflightBulk: 2, ReservedBytes: 910, BulkReservedBytes: 900, BudgetBytes: 1000, WatchBudgetBytes: 1000}
	if st := l.Stats(); st != want {
		t.Fatalf("Stats() = %+v, want %+v", st, want)
	}
	get.Release(0)
	if l.Yield(ctx) {
		t.Fatal("Yield waited with no short request in flight (the LIST that became bulk counted as short)")
	}
	l.cfg.MaxQueued = 0 // reject at once what does not fit
	if _, err := l.Admit(ctx, Request{Client: "c", Kind: Bulk, Bytes: 1}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("bulk Admit beside 2 bulk requests over the limits = %v, want ErrQueueFull", err)
	}
	list.BecomeBulk() // twice: no change
	list.Release(0)
	bulk.Release(0)
	if st := l.Stats(); st != (Stats{BudgetBytes: 1000, WatchBudgetBytes: 1000}) {
		t.Fatalf("after releases Stats() = %+v, want all zero", st)
	}
	var zero Ticket
	zero.BecomeBulk() // no limiter: no change, no panic
}
