package proxy

import (
	"testing"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/cache"
)

// TestRenderAdmissionSharedSlot: two object versions whose hashes share an
// admission slot, rendered in turn (a JSON LIST's item and a Table row of
// another object, in every round), are both kept on their second sight.
// With one slot a hash they overwrote each other forever and neither was
// kept: TestRenderCacheIdentical then saw 2 misses in a warm LIST (CI,
// 2026-12-04), whenever the random hash seed put two of its 240 renderings
// in one slot.
func TestRenderAdmissionSharedSlot(t *testing.T) {
	c, err := cache.New(cache.Config{Client: &clientv3.Client{}, MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRenderCache(metrics.NewSet(), c)
	h1 := uint64(0x1234_5678_9abc_0042)
	h2 := h1 ^ 1<<40 // the same low slot, another high one
	if h1%renderSeenSlots != h2%renderSeenSlots {
		t.Fatal("test hashes do not share a slot")
	}
	for round, want := range []bool{false, true, true} {
		if got := rc.seenBefore(h1); got != want {
			t.Fatalf("round %d: seenBefore(h1) = %v, want %v", round, got, want)
		}
		if got := rc.seenBefore(h2); got != want {
			t.Fatalf("round %d: seenBefore(h2) = %v, want %v", round, got, want)
		}
	}
	// A third hash on the same two slots as h1 evicts it: the table
	// remembers recent sights, not all.
	if rc.seenBefore(h1 ^ 1<<16 ^ 1<<48) {
		t.Fatal("a new hash reported seen")
	}
	if !rc.seenBefore(h2) || rc.seenBefore(h1) {
		t.Fatal("a third hash on both of h1's slots: want h2 remembered, h1 forgotten")
	}
}
