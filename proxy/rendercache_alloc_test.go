//go:build !race

package proxy

import (
	"testing"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// TestRenderCacheTightBudgetNoCopy: with the watch cache's budget over
// 3/4 in use, a rendering seen twice is not kept, and it is not copied
// either: the 400-Secret storm at --memory-limit=2Gi copied every 1 MiB
// Secret's rendering on its second sight and dropped it, ~1 byte of
// garbage per byte served (bench/RESULTS.md ## mem: the storm's garbage).
// With room in the budget the same rendering is kept (one copy).
func TestRenderCacheTightBudgetNoCopy(t *testing.T) {
	const budget = 64 << 20 // keeps renderings up to 256 KiB (a shard's share)
	c, err := cache.New(cache.Config{Client: &clientv3.Client{}, MemoryBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := newRenderCache(metrics.NewSet(), c)
	stored, err := storagefmt.Protobuf(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
		Data: map[string][]byte{"tls.key": make([]byte, 64<<10)}})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := codec.Unwrap(stored)
	if err != nil {
		t.Fatal(err)
	}
	sc := codec.DefaultSchema()
	key := []byte("/registry/secrets/ns/s")
	dst := make([]byte, 0, 256<<10)
	render := func() {
		var err error
		if dst, err = rc.appendJSON(sc, dst[:0], key, obj, 7, codec.JSONOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	render() // first sight: remembered
	// The cached resources' bytes: the budget in use over 3/4.
	if !c.ReserveBelow(budget*7/8, budget) {
		t.Fatal("cannot take the budget")
	}
	if allocs := testing.AllocsPerRun(20, render); allocs != 0 {
		t.Errorf("a rendering seen again with the budget tight: %v allocations, want 0 (no copy)", allocs)
	}
	if rc.bytes.Load() != 0 {
		t.Fatalf("render cache holds %d bytes with the budget tight", rc.bytes.Load())
	}
	c.Release(budget * 7 / 8)
	render()
	if got, want := rc.bytes.Load(), renderCost(len(dst), len(key)); got != want {
		t.Errorf("with room in the budget: render cache holds %d bytes, want %d (the rendering kept)", got, want)
	}
	if allocs := testing.AllocsPerRun(20, render); allocs != 0 {
		t.Errorf("a kept rendering copied out: %v allocations, want 0", allocs)
	}
}
