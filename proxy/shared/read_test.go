package shared

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

type testChunk struct{ Chunk }

type testGroup struct{ Read[*testChunk] }

type testReads = Reads[string, *testGroup]

func newTestReads(ms *metrics.Set) *testReads {
	return NewReads[string, *testGroup](ms, "reads_total", "joins_total", "chunks_total", "lagged_total", "held_bytes")
}

// start registers a new read of key "k" with its first member.
func start(r *testReads, ordered bool, limit int64) (*testGroup, *Member[*testChunk, *testGroup]) {
	g := &testGroup{}
	r.Lock()
	defer r.Unlock()
	Start(r, &g.Read, "k", g, ordered, limit, 0, context.Background())
	return g, AddMember(&g.Read, g, false)
}

// push publishes a chunk of n bytes (a new part when newPart); false when
// the read is over.
func push(g *testGroup, n int, newPart bool, part int) bool {
	if !g.waitRoom() {
		return false
	}
	g.Lock()
	defer g.Unlock()
	c := &testChunk{Chunk{Data: make([]byte, n)}}
	if !newPart {
		c.part = part
	}
	return g.pushLocked(c, newPart)
}

// TestOrderedReadEndsLaggedMember: in an ordered read (a shared LIST)
// whose window is full, a member that took nothing for LagWait while
// another is active is ended with ErrLagged and counted; the active one
// gets every part, in order, and the end. (About LagWait long.)
func TestOrderedReadEndsLaggedMember(t *testing.T) {
	ms := metrics.NewSet()
	r := newTestReads(ms)
	g, fast := start(r, true, 250) // full at three chunks of 100 bytes
	slow := AddMember(&g.Read, g, false)
	const parts = 10
	go func() {
		for range parts {
			if !push(g, 100, true, 0) {
				break
			}
		}
		g.End(nil)
	}()
	ctx := context.Background()
	c, _, err := slow.Take(ctx)
	if err != nil {
		t.Fatalf("the slow member's first Take: %v", err)
	}
	slow.Release(c) // then it takes nothing
	start := time.Now()
	var got []int
	for {
		c, end, err := fast.Take(ctx)
		if err != nil {
			t.Fatalf("the fast member's Take after parts %v: %v", got, err)
		}
		if end {
			break
		}
		got = append(got, c.part)
		fast.Release(c)
	}
	if len(got) != parts || got[0] != 0 || got[parts-1] != parts-1 {
		t.Errorf("the fast member took parts %v, want 0 to %d in order", got, parts-1)
	}
	if d := time.Since(start); d < LagWait/2 {
		t.Errorf("the fast member was through in %s: the window did not wait for the slow member (LagWait %s)", d, LagWait)
	}
	if _, _, err := slow.Take(ctx); !errors.Is(err, ErrLagged) {
		t.Errorf("the slow member's next Take = %v, want ErrLagged", err)
	}
	if n := ms.GetOrCreateCounter("lagged_total").Get(); n != 1 {
		t.Errorf("lagged members counted %d, want 1", n)
	}
	fast.Leave()
	slow.Leave()
	if held := r.held.Load(); held != 0 {
		t.Errorf("%d bytes held after every member left, want 0", held)
	}
}

// TestCircularReadPublishesMissedParts: a member that joins a circular
// read (a shared scan) after its first parts left the window takes the
// window's part, then nextNeeded names the parts it missed, published
// again, and it ends once it took every part; the first member ends after
// the first cycle. The last member out ends the read's context and its
// registration; nextNeeded then reports the read over.
func TestCircularReadPublishesMissedParts(t *testing.T) {
	ms := metrics.NewSet()
	r := newTestReads(ms)
	g, first := start(r, false, 1<<20)
	ctx := context.Background()
	take := func(m *Member[*testChunk, *testGroup]) (int, bool) {
		t.Helper()
		c, end, err := m.Take(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if end {
			return -1, true
		}
		m.Release(c)
		return c.part, false
	}
	push(g, 10, true, 0)
	push(g, 10, true, 0)
	if p0, _ := take(first); p0 != 0 {
		t.Fatalf("first member took part %d, want 0", p0)
	}
	if p1, _ := take(first); p1 != 1 {
		t.Fatalf("first member took part %d, want 1", p1)
	}
	push(g, 10, true, 0) // waitRoom trims parts 0 and 1: no member waits for them
	g.Lock()
	g.complete = true
	g.Unlock()
	late := AddMember(&g.Read, g, false)
	if p2, _ := take(first); p2 != 2 {
		t.Fatalf("first member took part %d, want 2", p2)
	}
	if _, end := take(first); !end {
		t.Fatal("first member: no end after every part")
	}
	first.Leave()
	got := []int{}
	p, _ := take(late)
	got = append(got, p)
	for pos := 0; ; {
		idx, ok := g.nextNeeded(pos)
		if !ok {
			t.Fatalf("nextNeeded(%d) reports the read over; the late member took %v", pos, got)
		}
		push(g, 10, false, idx)
		p, end := take(late)
		if end {
			t.Fatalf("the late member ended after %v", got)
		}
		got = append(got, p)
		if len(got) == 3 {
			break
		}
		pos = (idx + 1) % 3
	}
	if want := []int{2, 0, 1}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("the late member took parts %v, want %v", got, want)
	}
	if _, end := take(late); !end {
		t.Error("late member: no end after every part")
	}
	late.Leave()
	if _, ok := g.nextNeeded(0); ok {
		t.Error("nextNeeded after the last member left: want the read over")
	}
	if g.Context().Err() == nil {
		t.Error("the read's context did not end with its last member")
	}
	r.Lock()
	if r.GetLocked("k") != nil {
		t.Error("the read is still registered after its last member left")
	}
	r.Unlock()
	g.ClearWindow(func(*testChunk) bool { return true }) // no member: cleared anyway
	if held := r.held.Load(); held != 0 {
		t.Errorf("%d bytes held after the window was cleared, want 0", held)
	}
	if reads, joins := ms.GetOrCreateCounter("reads_total").Get(), ms.GetOrCreateCounter("joins_total").Get(); reads != 1 || joins != 1 {
		t.Errorf("reads %d, joins %d counted; want 1 and 1 (AddMember to a running read is counted by the caller, JoinedLocked)", reads, joins)
	}
}
