package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDrain: a drained request (a GET whose body is being written) gives
// back its seat at once, so bulk streams stop yielding to it and queued
// requests take the seat, while its bytes stay reserved, and count toward
// its client's share, until Release: a client with many unread responses
// cannot take more than its share of the bytes, and another client is
// still admitted.
func TestDrain(t *testing.T) {
	const mib = 1 << 20
	cfg, _ := testConfig(10 * mib)
	cfg.MaxRequestsInflight = 4
	cfg.ClientShare = 0.5
	cfg.MaxQueued = 0
	l := mustNew(t, cfg)
	ctx := context.Background()

	var held []Ticket
	for range 2 {
		tk, err := l.Admit(ctx, Request{Client: "a", Bytes: 2 * mib})
		if err != nil {
			t.Fatalf("a: Admit = %v", err)
		}
		held = append(held, tk)
	}
	// Two seats of four: a's share. Drained, they free their seats.
	if _, err := l.Admit(ctx, Request{Client: "a", Bytes: 1}); err == nil {
		t.Fatal("a: a third request while a holds its share of seats was admitted")
	}
	for i := range held {
		held[i].Drain()
		held[i].Drain() // twice: no effect
	}
	st := l.Stats()
	if st.InflightRequests != 0 || st.Draining != 2 || st.ReservedBytes != 4*mib {
		t.Fatalf("after Drain: %+v, want 0 short seats, 2 draining, 4 MiB reserved", st)
	}
	if l.Yield(ctx) {
		t.Error("a bulk stream yielded to drained requests")
	}
	// a's drained bytes count toward its share (5 MiB): 4 held, 2 more do
	// not fit, 1 does.
	if _, err := l.Admit(ctx, Request{Client: "a", Bytes: 2 * mib}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a: a request beyond its byte share with drained requests = %v, want ErrQueueFull", err)
	}
	tk, err := l.Admit(ctx, Request{Client: "a", Bytes: mib})
	if err != nil {
		t.Fatalf("a: a request within its byte share = %v", err)
	}
	held = append(held, tk)
	// b holds nothing: admitted within what remains of the budget.
	tb, err := l.Admit(ctx, Request{Client: "b", Bytes: 4 * mib})
	if err != nil {
		t.Fatalf("b: Admit = %v, want admitted beside a's drained requests", err)
	}
	tb.Release(0)
	for i := range held {
		held[i].Release(0)
		held[i].Drain() // after Release: no effect
	}
	st = l.Stats()
	if st != (Stats{BudgetBytes: 10 * mib, WatchBudgetBytes: 10 * mib}) {
		t.Fatalf("after Release: %+v, want nothing held", st)
	}
	if len(l.holding) != 0 {
		t.Fatalf("holdings left: %v", l.holding)
	}
}

// TestDrainDispatches: draining frees a seat for a queued request.
func TestDrainDispatches(t *testing.T) {
	cfg, _ := testConfig(1 << 30)
	cfg.MaxRequestsInflight = 1
	l := mustNew(t, cfg)
	ctx := context.Background()
	first, err := l.Admit(ctx, Request{Client: "a", Bytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var second Ticket
	go func() {
		var err error
		second, err = l.Admit(ctx, Request{Client: "b", Bytes: 1})
		done <- err
	}()
	waitFor(t, "b queued", func() bool { return l.Stats().Queued == 1 })
	first.Drain()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("b: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b not admitted after a's request drained")
	}
	second.Release(0)
	first.Release(0)
	if st := l.Stats(); st != (Stats{BudgetBytes: 1 << 30, WatchBudgetBytes: 1 << 30}) {
		t.Fatalf("after Release: %+v", st)
	}
}

// TestMerge: a request that reserves more (a body larger than its
// estimate) holds one seat and the sum of the bytes after Merge; Release
// returns everything.
func TestMerge(t *testing.T) {
	cfg, _ := testConfig(1 << 30)
	cfg.MaxRequestsInflight = 4
	l := mustNew(t, cfg)
	ctx := context.Background()
	a, err := l.Admit(ctx, Request{Client: "a", Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	x, err := l.Admit(ctx, Request{Client: "a", Bytes: 50})
	if err != nil {
		t.Fatal(err)
	}
	a.Merge(&x)
	x.Release(0) // merged: no effect
	if st := l.Stats(); st.InflightRequests != 1 || st.ReservedBytes != 150 || a.Reserved() != 150 {
		t.Fatalf("after Merge: %+v, ticket %d, want 1 seat, 150 bytes", st, a.Reserved())
	}
	other, err := l.Admit(ctx, Request{Client: "b", Bytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	a.Merge(&other) // another client: no effect
	other.Release(0)
	a.Drain()
	a.Release(0)
	if st := l.Stats(); st != (Stats{BudgetBytes: 1 << 30, WatchBudgetBytes: 1 << 30}) || len(l.holding) != 0 {
		t.Fatalf("after Release: %+v, holdings %v", st, l.holding)
	}
}
