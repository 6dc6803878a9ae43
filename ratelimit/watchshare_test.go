package ratelimit

import (
	"context"
	"errors"
	"testing"
)

// admitN admits n requests like req and returns their tickets; it stops at
// the first refusal and returns it.
func admitN(l *Limiter, req Request, n int) ([]Ticket, error) {
	var ts []Ticket
	for range n {
		t, err := l.Admit(context.Background(), req)
		if err != nil {
			return ts, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

func releaseAll(ts []Ticket) {
	for i := range ts {
		ts[i].Release(0)
	}
}

// TestWatchShareActiveClients: watches are shared among the clients that
// hold them, not capped at a fixed fraction of all seats (issue 23,
// finding 7: with the cap at half of --max-watches-inflight two users took
// every watch seat and an admin got 429). One client alone holds 7/8 of
// the watch budget (thousands of watches); while it does, a new client's
// watches are admitted (from the last eighth), and once two clients hold
// watches each is bounded by 7/16 of the budget.
func TestWatchShareActiveClients(t *testing.T) {
	const idle = 25 << 10
	cfg, _ := testConfig(1 << 30)
	cfg.MaxWatchBytes = 10000 * idle // room for 10,000 idle watches
	cfg.MaxQueued = 0                // refusals at once
	cfg.ClientShare = defaultClientShare
	l := mustNew(t, cfg)
	w := func(client string) Request { return Request{Client: client, Kind: Watch, Bytes: idle} }

	a, err := admitN(l, w("a"), 10000)
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("client a's watches: %d admitted, then %v; want a refusal at its share", len(a), err)
	}
	if want := 10000 * 7 / 8; len(a) != want {
		t.Errorf("client a alone holds %d watches, want %d (7/8 of the budget; the old cap was half of the seats)", len(a), want)
	}
	// A new client is not starved: it has the last eighth.
	b, err := admitN(l, w("b"), 500)
	if err != nil {
		t.Fatalf("client b's watches beside a's %d: %d admitted, then %v; want 500", len(a), len(b), err)
	}
	// a is over its share of two clients: refused; b is within its own.
	if _, err := l.Admit(context.Background(), w("a")); !errors.Is(err, ErrQueueFull) {
		t.Errorf("client a's watch over its share (7/16 with two clients): %v, want ErrQueueFull", err)
	}
	if tk, err := l.Admit(context.Background(), w("b")); err != nil {
		t.Errorf("client b's watch within its share: %v", err)
	} else {
		b = append(b, tk)
	}
	// A third client's first watch fits while the budget has room.
	c, err := l.Admit(context.Background(), w("c"))
	if err != nil {
		t.Fatalf("client c's first watch: %v", err)
	}
	if st := l.Stats(); st.WatchClients != 3 || st.InflightWatches != len(a)+len(b)+1 {
		t.Errorf("Stats() = %+v, want 3 watch clients and %d watches", st, len(a)+len(b)+1)
	}
	c.Release(0)
	releaseAll(a)
	releaseAll(b)
	if st := l.Stats(); st.WatchClients != 0 || st.WatchReservedBytes != 0 || st.InflightWatches != 0 {
		t.Errorf("after releases Stats() = %+v, want nothing held", st)
	}
}

// TestWatchBudgetApart: watches reserve from their own budget: watches
// that fill it leave GETs and LISTs all of theirs, and the other way round.
func TestWatchBudgetApart(t *testing.T) {
	cfg, _ := testConfig(1000)
	cfg.MaxWatchBytes = 1000
	cfg.MaxQueued = 0
	l := mustNew(t, cfg)
	var ws []Ticket
	for i := range 10 {
		tk, err := l.Admit(context.Background(), Request{Client: string(rune('a' + i)), Kind: Watch, Bytes: 100})
		if err != nil {
			t.Fatalf("10 watches of 100 in a budget of 1000: %v", err)
		}
		ws = append(ws, tk)
	}
	list, err := l.Admit(context.Background(), Request{Client: "l", Bytes: 1000})
	if err != nil {
		t.Fatalf("a LIST of the whole in-flight budget beside a full watch budget: %v", err)
	}
	if _, err := l.Admit(context.Background(), Request{Client: "x", Kind: Watch, Bytes: 100}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("a watch beyond the watch budget: %v, want ErrQueueFull", err)
	}
	list.Release(0)
	releaseAll(ws)
}

// TestExempt: an exempt request (system:masters) is admitted at once
// when seats and bytes are all taken, and its bytes are counted.
func TestExempt(t *testing.T) {
	cfg, _ := testConfig(1000)
	cfg.MaxRequestsInflight = 1
	cfg.MaxWatchesInflight = 1
	cfg.MaxQueued = 0
	l := mustNew(t, cfg)
	full, err := l.Admit(context.Background(), Request{Client: "a", Bytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	wa, err := l.Admit(context.Background(), Request{Client: "a", Kind: Watch, Bytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Admit(context.Background(), Request{Client: "b", Bytes: 10}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a GET beside a full budget: %v, want ErrQueueFull", err)
	}
	get, err := l.Admit(context.Background(), Request{Client: "admin", Bytes: 10, Exempt: true})
	if err != nil {
		t.Fatalf("an exempt GET beside a full budget: %v", err)
	}
	watch, err := l.Admit(context.Background(), Request{Client: "admin", Kind: Watch, Bytes: 10, Exempt: true})
	if err != nil {
		t.Fatalf("an exempt watch beside full watch seats: %v", err)
	}
	if st := l.Stats(); st.ReservedBytes != 2020 || st.InflightRequests != 2 || st.WatchClients != 1 {
		t.Errorf("Stats() = %+v, want 2020 bytes, 2 short requests and one watch client (the exempt one not counted)", st)
	}
	for _, tk := range []*Ticket{&get, &watch, &full, &wa} {
		tk.Release(0)
	}
	if st := l.Stats(); st.ReservedBytes != 0 || st.InflightRequests != 0 || st.InflightWatches != 0 {
		t.Errorf("after releases Stats() = %+v", st)
	}
}

// TestResize: a watch's reservation shrinks when its initial events are
// written (admitting the queued watch that now fits) and grows, without
// waiting, by the frames queued for it.
func TestResize(t *testing.T) {
	cfg, clk := testConfig(1000)
	cfg.MaxWatchBytes = 1000
	l := mustNew(t, cfg)
	ctx := context.Background()
	a, err := l.Admit(ctx, Request{Client: "a", Kind: Watch, Bytes: 900})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var b Ticket
	go func() {
		var err error
		b, err = l.Admit(ctx, Request{Client: "b", Kind: Watch, Bytes: 500})
		got <- err
	}()
	for l.Stats().Queued != 1 {
		clk.Advance(0) // poll: b queues
	}
	a.Resize(100) // a's initial events are written
	if err := <-got; err != nil {
		t.Fatalf("b after a shrank: %v", err)
	}
	a.Resize(1000) // frames queued for a: recorded, past the budget
	if st := l.Stats(); st.WatchReservedBytes != 1500 {
		t.Errorf("WatchReservedBytes = %d, want 1500 (grown past the budget)", st.WatchReservedBytes)
	}
	if _, err := l.Admit(ctx, Request{Client: "c", Kind: Watch, Bytes: 1, NoWait: true}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("a watch while the budget is overdrawn: %v, want ErrQueueFull", err)
	}
	a.Resize(100)
	a.Release(0)
	b.Release(0)
	a.Resize(5) // after Release: nothing
	if st := l.Stats(); st.WatchReservedBytes != 0 || st.WatchClients != 0 {
		t.Errorf("after releases Stats() = %+v", st)
	}
}
