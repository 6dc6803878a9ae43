package ratelimit

import (
	"context"
	"errors"
	"fmt"
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

// TestWatchShareInitialPhase: a watch with initial events reserves, for
// its initial phase, about what a LIST of its collection reserves (476 KiB
// for a Pods watch served from the cache), and with a few hundred active
// clients that is about a share of the watch budget. The share must not
// make a client's next watch wait on the client's own idle watches while
// the budget is almost free: in TestWatchChurn at 200 nodes (220 clients,
// --memory-limit=512Mi: a 128 MiB watch budget, a share of 534 KB) each
// client held 2 to 3 idle watches and its next one was refused with 429
// after every 15 s in the queue, for good: 620 of 840 watches admitted,
// 15.9 MB of 134 MB reserved. Past seven eighths of the budget the share
// still bounds a client (TestWatchShareActiveClients), but one below it
// gets one more watch whatever that watch reserves.
func TestWatchShareInitialPhase(t *testing.T) {
	const idle, initial = 25 << 10, 451 << 10
	cfg, _ := testConfig(1 << 30)
	cfg.MaxWatchBytes = 128 << 20
	cfg.MaxQueued = 0 // refusals at once
	cfg.ClientShare = defaultClientShare
	l := mustNew(t, cfg)
	var held []Ticket
	defer func() { releaseAll(held) }()
	const clients = 220
	for c := range clients {
		ts, err := admitN(l, Request{Client: fmt.Sprint("node-", c), Kind: Watch, Bytes: idle}, 3)
		held = append(held, ts...)
		if err != nil {
			t.Fatalf("client %d's idle watches: %v", c, err)
		}
	}
	for c := range clients {
		tk, err := l.Admit(context.Background(), Request{Client: fmt.Sprint("node-", c), Kind: Watch, Bytes: idle + initial})
		if err != nil {
			st := l.Stats()
			t.Fatalf("client %d's 4th watch (initial phase %d bytes) beside %d watches reserving %d of %d bytes: %v, want admitted",
				c, idle+initial, st.InflightWatches, st.WatchReservedBytes, st.WatchBudgetBytes, err)
		}
		tk.Resize(idle) // its initial events are written
		held = append(held, tk)
	}
	// A client holding far more than a share (a controller's 200
	// watches among 1,000 kubelets) still gets more while the budget is
	// not contended: its watches end at their timeout and come back.
	cm, err := admitN(l, Request{Client: "controller", Kind: Watch, Bytes: idle}, 200)
	defer func() { releaseAll(cm) }()
	if err != nil {
		t.Fatalf("a controller's watches beside %d clients: %d admitted, then %v", clients, len(cm), err)
	}
	for c := clients; c < 1000; c++ {
		tk, err := l.Admit(context.Background(), Request{Client: fmt.Sprint("node-", c), Kind: Watch, Bytes: idle})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, tk)
	}
	cm[0].Release(0)
	back, err := l.Admit(context.Background(), Request{Client: "controller", Kind: Watch, Bytes: idle + initial})
	if err != nil {
		l.mu.Lock()
		share := l.watchShareLocked()
		l.mu.Unlock()
		t.Fatalf("the controller's watch back after its timeout (holding %d bytes, share %d): %v", 199*idle, share, err)
	}
	back.Release(0)
}

// TestWatchShareLastEighth: past seven eighths of the watch budget a
// client over its share waits, and one below it gets one more watch even
// when that watch reserves more than the rest of its share.
func TestWatchShareLastEighth(t *testing.T) {
	const idle = 25 << 10
	cfg, _ := testConfig(1 << 30)
	cfg.MaxWatchBytes = 10000 * idle
	cfg.MaxQueued = 0
	cfg.ClientShare = defaultClientShare
	l := mustNew(t, cfg)
	a, err := admitN(l, Request{Client: "a", Kind: Watch, Bytes: idle}, 8750)
	defer func() { releaseAll(a) }()
	if err != nil {
		t.Fatal(err)
	}
	var others []Ticket
	defer func() { releaseAll(others) }()
	for c := range 100 {
		tk, err := l.Admit(context.Background(), Request{Client: fmt.Sprint("c", c), Kind: Watch, Bytes: idle})
		if err != nil {
			t.Fatalf("client c%d's first watch: %v", c, err)
		}
		others = append(others, tk)
	}
	// share = 8750 idle / 101 clients = 86 idle watches.
	if _, err := l.Admit(context.Background(), Request{Client: "a", Kind: Watch, Bytes: idle}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("client a over its share in the last eighth: %v, want ErrQueueFull", err)
	}
	tk, err := l.Admit(context.Background(), Request{Client: "c0", Kind: Watch, Bytes: 100 * idle})
	if err != nil {
		t.Fatalf("client c0 below its share (1 of 86 idle watches) asking 100: %v, want admitted", err)
	}
	others = append(others, tk)
	if _, err := l.Admit(context.Background(), Request{Client: "c0", Kind: Watch, Bytes: idle}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("client c0 then over its share: %v, want ErrQueueFull", err)
	}
}

// TestGrow: a watch's reservation grows (Ticket.Grow) only as a new watch
// of its client would be admitted: within the budget, into its last eighth
// only while the client holds less than its share; shrinking always
// succeeds, and nothing grows after Release.
func TestGrow(t *testing.T) {
	cfg, _ := testConfig(1 << 30)
	cfg.MaxWatchBytes = 8000
	cfg.MaxQueued = 0
	cfg.ClientShare = defaultClientShare
	l := mustNew(t, cfg)
	ctx := context.Background()
	a, err := l.Admit(ctx, Request{Client: "a", Kind: Watch, Bytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !a.Grow(7000) {
		t.Errorf("a alone growing to 7/8 of the budget: refused")
	}
	if a.Grow(7100) {
		t.Errorf("a alone growing into the last eighth: granted, want refused (a holds its share)")
	}
	b, err := l.Admit(ctx, Request{Client: "b", Kind: Watch, Bytes: 100})
	if err != nil {
		t.Fatalf("b's first watch beside a's 7/8: %v", err)
	}
	if !b.Grow(600) {
		t.Errorf("b (100 of a 3500 share) growing by 500 in the last eighth: refused")
	}
	if b.Grow(1100) {
		t.Errorf("b growing past the budget: granted")
	}
	if st := l.Stats(); st.WatchReservedBytes != 7600 {
		t.Errorf("WatchReservedBytes = %d, want 7600", st.WatchReservedBytes)
	}
	if !a.Grow(100) || !b.Grow(100) {
		t.Errorf("shrinking: refused")
	}
	a.Release(0)
	if a.Grow(200) {
		t.Errorf("Grow after Release: granted")
	}
	b.Release(0)
	if st := l.Stats(); st.WatchReservedBytes != 0 || st.WatchClients != 0 {
		t.Errorf("after releases Stats() = %+v", st)
	}
}
