package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestMemoryLimitCapsGarbage: with --memory-limit=256Mi the collector may
// let at most 16 MiB of garbage (a sixteenth) gather above the live heap,
// so once the watch cache holds 35 MiB of ConfigMaps (40 × 900 KiB from a
// real etcd) GOGC (lazyapi_gc_percent) falls to at most 16 MiB / 35 MiB
// = 45%, where it stayed at 100 before and the heap could grow by the
// cache's size again (bench/RESULTS.md, ## storm: the 1,024-stream
// overshoot). Without --memory-limit GOGC is left alone.
// Under the race detector, half of everything: --memory-limit=128Mi (8 MiB
// of garbage), 20 ConfigMaps (17.6 MiB), GOGC at most 8 / 17.6 = 45% again.
// There the LISTs of 36 MiB (from the instrumented etcd, then the cache)
// made it one of CI's slowest tests (57 s), and at load ~17 the first one
// outran lazyapi's 5 s bound on an etcd answer (503).
func TestMemoryLimitCapsGarbage(t *testing.T) {
	items, limit := 40, "256Mi"
	if raceEnabled {
		items, limit = 20, "128Mi"
	}
	// The cache holds them all: 35 MiB for 40.
	minCached := float64(items) * (35 << 20) / 40
	etcd := etcdtest.Start(t)
	payload := strings.Repeat("x", 900<<10)
	for i := range items {
		name := fmt.Sprintf("big-%03d", i)
		val, err := storagefmt.Protobuf(&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: name, UID: types.UID("u-" + name)}, Data: map[string]string{"payload": payload}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Client.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "big", name), string(val)); err != nil {
			t.Fatal(err)
		}
	}

	p := start(t, "--etcd-servers="+etcd.Endpoint, "--memory-limit="+limit)
	deadline := time.Now().Add(time.Minute)
	for {
		// Each LIST (from the cache once it is filled) allocates, so
		// collections run and the cap follows the live heap.
		if got := strings.Count(string(httpGet(t, p.URL+"/api/v1/namespaces/big/configmaps", "application/json")), `"payload"`); got != items {
			t.Fatalf("LIST big/configmaps: %d items, want %d", got, items)
		}
		gogc, err := metricValue(p.URL, "lazyapi_gc_percent")
		cached, _ := metricValue(p.URL, "lazyapi_cache_used_bytes")
		if err == nil && gogc >= 1 && gogc <= 45 && cached >= minCached {
			t.Logf("lazyapi_gc_percent %v with %.1f MiB cached", gogc, cached/(1<<20))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: lazyapi_gc_percent %v (%v), cache %v bytes; want at most 45 with %.0f bytes cached", gogc, err, cached, minCached)
		}
		time.Sleep(50 * time.Millisecond) // polling /metrics to a deadline
	}

	q := start(t, "--etcd-servers="+etcd.Endpoint)
	httpGet(t, q.URL+"/api/v1/namespaces/big/configmaps", "application/json")
	if gogc, err := metricValue(q.URL, "lazyapi_gc_percent"); err != nil || gogc != 100 {
		t.Errorf("without --memory-limit: lazyapi_gc_percent %v (%v), want 100 (GOGC untouched)", gogc, err)
	}
}
