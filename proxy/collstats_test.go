package proxy

import (
	"math"
	"testing"
	"time"
)

func TestCollStatsSize(t *testing.T) {
	c := newCollStats(2)
	now := time.Unix(1000, 0)
	if _, ok := c.size("a", now); ok {
		t.Fatal("size of an unknown key ok")
	}
	c.setSize("a", collSize{Items: 10, AvgBytes: 100}, now)
	now = now.Add(4 * time.Second)
	if sz, ok := c.size("a", now); !ok || sz != (collSize{10, 100}) {
		t.Fatalf("size(a) = %+v, %v; want {10 100}, true", sz, ok)
	}
	now = now.Add(time.Second)
	if _, ok := c.size("a", now); ok {
		t.Fatal("size(a) still ok after 5 s")
	}
	c.setSize("a", collSize{Items: 11}, now)
	c.setSize("b", collSize{Items: 12}, now)
	c.setSize("c", collSize{Items: 13}, now) // over max: forgets a and b
	if _, ok := c.size("a", now); ok {
		t.Fatal("size(a) kept beyond max")
	}
	if sz, ok := c.size("c", now); !ok || sz.Items != 13 {
		t.Fatalf("size(c) = %+v, %v; want 13 items, true", sz, ok)
	}
}

func TestCollStatsObserveResponse(t *testing.T) {
	c := newCollStats(2)
	now := time.Unix(1000, 0)
	if n := c.observedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(unknown) = %d, want 0", n)
	}
	c.observeResponse("a", 100, now)
	c.observeResponse("a", 50, now) // the largest in the last minute counts
	now = now.Add(59 * time.Second)
	if n := c.observedResponse("a", now); n != 100 {
		t.Fatalf("observedResponse(a) = %d, want 100", n)
	}
	now = now.Add(time.Second)
	if n := c.observedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(a) after a minute = %d, want 0", n)
	}
	c.observeResponse("a", 10, now) // the old, expired 100 does not come back
	if n := c.observedResponse("a", now); n != 10 {
		t.Fatalf("observedResponse(a) = %d, want 10", n)
	}
	c.observeResponse("b", 20, now)
	c.observeResponse("c", 30, now) // over max: forgets a and b
	if n := c.observedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(a) kept beyond max: %d", n)
	}
	if n := c.observedResponse("c", now); n != 30 {
		t.Fatalf("observedResponse(c) = %d, want 30", n)
	}
}

func TestCollStatsHint(t *testing.T) {
	c := newCollStats(2)
	if h := c.hint("a"); h != 0 {
		t.Fatalf("hint(unknown) = %d, want 0", h)
	}
	c.setHint("a", 4096)
	if h := c.hint("a"); h != 4096 {
		t.Fatalf("hint(a) = %d, want 4096", h)
	}
}

func TestEstimateList(t *testing.T) {
	tests := []struct {
		avg   int64
		items int
		buf   int64
		want  int64
	}{
		{100 << 10, 500, 64 << 10, 500*(2*(100<<10)+256) + 64<<10},
		{1000, 1, 4096, 2000 + 256 + 4096},
		{0, 0, 4096, 4096},
		{-5, -1, -1, 0},
		{math.MaxInt64 / 2, 10, 0, math.MaxInt64},
		{1 << 20, 1 << 30, math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := estimateList(tt.avg, tt.items, tt.buf); got != tt.want {
			t.Errorf("estimateList(%d, %d, %d) = %d, want %d", tt.avg, tt.items, tt.buf, got, tt.want)
		}
	}
}
