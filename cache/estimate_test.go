package cache

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// seedSizes writes one ConfigMap per size under prefix (keys
// prefix+"ns/cm-NNNN", in the order of sizes: the last is the newest
// change).
func seedSizes(t *testing.T, cli *clientv3.Client, prefix string, sizes []int) {
	t.Helper()
	for i, size := range sizes {
		name := fmt.Sprintf("cm-%04d", i)
		_, v := configMap(t, "ns", name, nil, size, uint64(i))
		put(t, cli, prefix+"ns/"+name, v)
	}
}

// fillCost returns the budget spec's resource is charged once filled with
// no history replayed (Config.ReplayBytes 1: not even one value fits the
// replay), in a cache with room to spare.
func fillCost(t *testing.T, cli *clientv3.Client, spec Spec, mutate func(*Config)) int64 {
	t.Helper()
	c := newTestCache(t, cli, func(cfg *Config) {
		cfg.ReplayBytes = 1
		if mutate != nil {
			mutate(cfg)
		}
	})
	defer c.Close()
	r := c.Resource(spec)
	waitState(t, r, StateReady)
	return r.Bytes()
}

// TestFillRefusedByEstimate: a resource that does not fit the budget is
// refused at its first fill after reading a sample of its values only
// (its objects times a sampled object's cost is over 5/4 of the budget
// left), counted in lazyapi_cache_refused_estimated_total and
// lazyapi_cache_refused_unread_total, with a reason naming the estimate;
// its retries are refused without reading values either (the estimate
// is its last refusal's measure). Before, the first fill read and charged
// values up to the budget's end (2 MiB here; 256 MiB of 400 Secrets of 1
// MiB at --memory-limit=1Gi) before it was refused.
func TestFillRefusedByEstimate(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, size, budget = 64, 64 << 10, 2 << 20 // 4 MiB of values, a 2 MiB budget
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = size
	}
	seedSizes(t, srv.Client, cmPrefix, sizes)
	sample := int64(replaySamples * (size + 1<<10))

	t.Run("first fill", func(t *testing.T) {
		cli, counted := countingClient(t, srv.Endpoint)
		c, logs := budgetCache(t, cli, budget, time.Hour) // one try only
		r := c.Resource(cmSpec)
		waitState(t, r, StateRefused)
		got, read := counted.all.Load(), int64(r.fillRead.Get())
		t.Logf("refused after receiving %d bytes from etcd (%d of keys and values read), budget %d", got, read, budget)
		// The keys-only list of 64 keys is a few KB; the rest is the
		// samples.
		if limit := sample + 64<<10; got > limit {
			t.Errorf("the refused fill received %d bytes from etcd, want at most %d (%d samples of %d bytes and the keys)", got, limit, replaySamples, size)
		}
		if read > sample {
			t.Errorf("the refused fill read %d bytes of keys and values, want at most the %d of its samples", read, sample)
		}
		if r.refusedEstimated.Get() != 1 || r.refusedUnread.Get() != 1 || r.refused.Get() != 1 {
			t.Errorf("refusals %d, unread %d, estimated %d; want 1, 1, 1", r.refused.Get(), r.refusedUnread.Get(), r.refusedEstimated.Get())
		}
		if c.UsedBytes() != 0 {
			t.Errorf("the budget holds %d bytes after the refusal, want 0", c.UsedBytes())
		}
		entries := logs.FilterMessageSnippet("resource not cached").All()
		if len(entries) != 1 {
			t.Fatalf("%d refusal log lines, want 1", len(entries))
		}
		if reason, _ := entries[0].ContextMap()["reason"].(string); !strings.Contains(reason, "by estimate") || !strings.Contains(reason, "MemoryBytes=") {
			t.Errorf("refusal reason %q, want the estimate and the flag", reason)
		}
	})

	t.Run("retries", func(t *testing.T) {
		c, logs := budgetCache(t, srv.Client, budget, 10*time.Millisecond)
		r := c.Resource(cmSpec)
		const tries = 4
		poll(t, "wait for refusals", func() error {
			if got := r.refused.Get(); got < tries {
				return fmt.Errorf("%d refusals, want %d", got, tries)
			}
			return nil
		})
		// Counted before the refusal it belongs to: read it last.
		refused := int64(r.refused.Get())
		read, unread, estimated := int64(r.fillRead.Get()), int64(r.refusedUnread.Get()), int64(r.refusedEstimated.Get())
		if unread < refused || estimated != 1 {
			t.Errorf("%d refusals, %d unread, %d by estimate; want all unread, the first by estimate", refused, unread, estimated)
		}
		if limit := (refused + 1) * sample; read > limit {
			t.Errorf("%d refusals read %d bytes, want at most %d (samples only)", refused, read, limit)
		}
		entries := logs.FilterMessageSnippet("resource not cached").All()
		if len(entries) < 2 {
			t.Fatalf("%d refusal log lines, want at least 2", len(entries))
		}
		if reason, _ := entries[1].ContextMap()["reason"].(string); !strings.Contains(reason, "estimated at the last refusal") {
			t.Errorf("second refusal's reason %q, want the estimate as the last refusal", reason)
		}
	})
}

// TestFillEstimateFits: the estimate never refuses a resource that fits.
// Each collection is filled in a budget of exactly what it costs once
// filled (fillCost), so that one byte less would refuse it: 64 values of
// 64 KiB; a collection of small values whose 24 newest changes are 64
// KiB each, with a history of 20 (the samples of the newest changes are
// all large: the estimate samples all the objects, evenly in key order);
// one of small values with 2 large ones among the newest (one of them a
// sample of the newest changes: their mean, times the objects, is 4x the
// collection). One byte less than the uniform collection's cost is
// within the estimate's margin: the real fill runs and refuses it after
// reading values, not the estimate.
func TestFillEstimateFits(t *testing.T) {
	srv := etcdtest.Start(t)
	uniform := make([]int, 64)
	for i := range uniform {
		uniform[i] = 64 << 10
	}
	newestLarge := make([]int, 600+24)
	for i := range newestLarge {
		newestLarge[i] = 512
		if i >= 600 {
			newestLarge[i] = 64 << 10
		}
	}
	// 102 changes, newest first: the samples are the middles of 8
	// strata, the first at index 6 (the 7th newest).
	fewLarge := make([]int, 102)
	for i := range fewLarge {
		fewLarge[i] = 1 << 10
	}
	fewLarge[len(fewLarge)-7] = 128 << 10
	fewLarge[len(fewLarge)-40] = 128 << 10
	for _, tc := range []struct {
		name    string
		sizes   []int
		history int
	}{
		{"uniform", uniform, 0},
		{"newest changes large", newestLarge, 20},
		{"a few large values sampled", fewLarge, 0},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			spec := Spec{Name: "configmaps", Prefix: "/registry/" + strings.ReplaceAll(tc.name, " ", "-") + "/", Namespaced: true}
			seedSizes(t, srv.Client, spec.Prefix, tc.sizes)
			mutate := func(cfg *Config) {
				cfg.ReplayBytes = 1
				cfg.RetryInterval = time.Hour // one try only
				if tc.history > 0 {
					cfg.Sizes = map[string]int{"configmaps": tc.history}
				}
			}
			cost := fillCost(t, srv.Client, spec, mutate)
			c := newTestCache(t, srv.Client, func(cfg *Config) { mutate(cfg); cfg.MemoryBytes = cost })
			r := c.Resource(spec)
			waitState(t, r, StateReady)
			if got := r.Objects(); got != int64(len(tc.sizes)) || r.refusedEstimated.Get() != 0 {
				t.Fatalf("%d objects cached, %d refusals by estimate; want %d, 0", got, r.refusedEstimated.Get(), len(tc.sizes))
			}
			t.Logf("filled %d objects in a budget of %d bytes (their cost)", len(tc.sizes), cost)
			if tc.name != "uniform" {
				return
			}
			c.Close()
			core, logs := observer.New(zap.WarnLevel)
			c = newTestCache(t, srv.Client, func(cfg *Config) { mutate(cfg); cfg.MemoryBytes = cost - 1; cfg.Logger = zap.New(core) })
			r = c.Resource(spec)
			waitState(t, r, StateRefused)
			if r.refusedEstimated.Get() != 0 || r.refusedUnread.Get() != 0 || int64(r.fillRead.Get()) < cost/2 {
				t.Errorf("one byte short: %d refusals by estimate, %d unread, %d bytes read; want the real fill's refusal after reading values", r.refusedEstimated.Get(), r.refusedUnread.Get(), r.fillRead.Get())
			}
			if e := logs.FilterMessageSnippet("resource not cached").All(); len(e) != 1 || !strings.Contains(e[0].ContextMap()["reason"].(string), "after 63 objects") {
				t.Errorf("one byte short: refusals logged %v, want one after 63 objects", e)
			}
		})
	}
}
