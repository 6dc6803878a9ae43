package estimate

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestCollStatsSize(t *testing.T) {
	c := NewStats(2)
	now := time.Unix(1000, 0)
	if _, ok := c.Size("a", now); ok {
		t.Fatal("size of an unknown key ok")
	}
	c.SetSize("a", Collection{Items: 10, AvgBytes: 100}, now)
	now = now.Add(4 * time.Second)
	if sz, ok := c.Size("a", now); !ok || sz != (Collection{10, 100}) {
		t.Fatalf("size(a) = %+v, %v; want {10 100}, true", sz, ok)
	}
	now = now.Add(time.Second)
	if _, ok := c.Size("a", now); ok {
		t.Fatal("size(a) still ok after 5 s")
	}
	c.SetSize("a", Collection{Items: 11}, now)
	c.SetSize("b", Collection{Items: 12}, now)
	c.SetSize("c", Collection{Items: 13}, now) // over max: forgets a and b
	if _, ok := c.Size("a", now); ok {
		t.Fatal("size(a) kept beyond max")
	}
	if sz, ok := c.Size("c", now); !ok || sz.Items != 13 {
		t.Fatalf("size(c) = %+v, %v; want 13 items, true", sz, ok)
	}
}

func TestCollStatsObserveResponse(t *testing.T) {
	c := NewStats(2)
	now := time.Unix(1000, 0)
	if n := c.ObservedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(unknown) = %d, want 0", n)
	}
	c.ObserveResponse("a", 100, now)
	c.ObserveResponse("a", 50, now) // the largest in the last minute counts
	now = now.Add(59 * time.Second)
	if n := c.ObservedResponse("a", now); n != 100 {
		t.Fatalf("observedResponse(a) = %d, want 100", n)
	}
	now = now.Add(time.Second)
	if n := c.ObservedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(a) after a minute = %d, want 0", n)
	}
	c.ObserveResponse("a", 10, now) // the old, expired 100 does not come back
	if n := c.ObservedResponse("a", now); n != 10 {
		t.Fatalf("observedResponse(a) = %d, want 10", n)
	}
	c.ObserveResponse("b", 20, now)
	c.ObserveResponse("c", 30, now) // over max: forgets a and b
	if n := c.ObservedResponse("a", now); n != 0 {
		t.Fatalf("observedResponse(a) kept beyond max: %d", n)
	}
	if n := c.ObservedResponse("c", now); n != 30 {
		t.Fatalf("observedResponse(c) = %d, want 30", n)
	}
}

func TestCollStatsHint(t *testing.T) {
	c := NewStats(2)
	if h := c.Hint("a"); h != 0 {
		t.Fatalf("hint(unknown) = %d, want 0", h)
	}
	c.SetHint("a", 4096)
	if h := c.Hint("a"); h != 4096 {
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
		if got := List(tt.avg, tt.items, tt.buf); got != tt.want {
			t.Errorf("List(%d, %d, %d) = %d, want %d", tt.avg, tt.items, tt.buf, got, tt.want)
		}
	}
}

// TestCollStatsSampleSizeOnce: 32 callers asking for the size of one
// collection while its sample is in flight share that one sample (a burst
// of LISTs of a collection that is not cached read one value from etcd,
// not one each); once it returned, the size is remembered; a failed
// sample is not, and a waiter whose context ends returns its error.
func TestCollStatsSampleSizeOnce(t *testing.T) {
	c := NewStats(8)
	now := time.Unix(1000, 0)
	release := make(chan struct{})
	var calls atomic.Int32
	sample := func() (Collection, error) {
		calls.Add(1)
		<-release
		return Collection{Items: 400, AvgBytes: 1 << 20}, nil
	}
	const n = 32
	var wg sync.WaitGroup
	got := make([]Collection, n)
	wg.Go(func() {
		sz, err := c.SampleSize(context.Background(), "s", now, sample)
		if err != nil {
			t.Error(err)
		}
		got[0] = sz
	})
	pollUntil(t, func() bool { return calls.Load() == 1 })
	for i := 1; i < n; i++ {
		wg.Go(func() {
			sz, err := c.SampleSize(context.Background(), "s", now, sample)
			if err != nil {
				t.Error(err)
			}
			got[i] = sz
		})
	}
	pollUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.waiting == n-1 })
	close(release)
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("%d samples for %d concurrent callers, want 1", calls.Load(), n)
	}
	for i, sz := range got {
		if sz != (Collection{400, 1 << 20}) {
			t.Fatalf("caller %d got %+v", i, sz)
		}
	}
	if sz, _ := c.SampleSize(context.Background(), "s", now.Add(time.Second), sample); sz.Items != 400 || calls.Load() != 1 {
		t.Fatalf("within sizeTTL: %+v after %d samples, want the remembered size and no new sample", sz, calls.Load())
	}

	// A failed sample is not remembered; a waiter whose context ends
	// returns its error.
	boom := errors.New("boom")
	fail := make(chan struct{})
	failing := func() (Collection, error) { <-fail; return Collection{}, boom }
	errc := make(chan error, 1)
	go func() {
		_, err := c.SampleSize(context.Background(), "f", now, failing)
		errc <- err
	}()
	pollUntil(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.sampling["f"] != nil })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.SampleSize(ctx, "f", now, failing); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiter with an ended context: %v, want context.Canceled", err)
	}
	close(fail)
	if err := <-errc; !errors.Is(err, boom) {
		t.Fatalf("failed sample: %v", err)
	}
	if _, ok := c.Size("f", now); ok {
		t.Fatal("a failed sample was remembered")
	}
}

// pollUntil polls cond until it holds, failing t after a minute.
func pollUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
