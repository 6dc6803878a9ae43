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
func TestMemoryLimitCapsGarbage(t *testing.T) {
	etcd := etcdtest.Start(t)
	payload := strings.Repeat("x", 900<<10)
	for i := range 40 {
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

	p := start(t, "--etcd-servers="+etcd.Endpoint, "--memory-limit=256Mi")
	deadline := time.Now().Add(time.Minute)
	for {
		// Each LIST (from the cache once it is filled) allocates, so
		// collections run and the cap follows the live heap.
		if got := strings.Count(string(httpGet(t, p.URL+"/api/v1/namespaces/big/configmaps", "application/json")), `"payload"`); got != 40 {
			t.Fatalf("LIST big/configmaps: %d items, want 40", got)
		}
		gogc, err := metricValue(p.URL, "lazyapi_gc_percent")
		cached, _ := metricValue(p.URL, "lazyapi_cache_used_bytes")
		if err == nil && gogc >= 1 && gogc <= 45 && cached >= 35<<20 {
			t.Logf("lazyapi_gc_percent %v with %.1f MiB cached", gogc, cached/(1<<20))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: lazyapi_gc_percent %v (%v), cache %v bytes; want at most 45 with the 35 MiB cached", gogc, err, cached)
		}
		time.Sleep(50 * time.Millisecond) // polling /metrics to a deadline
	}

	q := start(t, "--etcd-servers="+etcd.Endpoint)
	httpGet(t, q.URL+"/api/v1/namespaces/big/configmaps", "application/json")
	if gogc, err := metricValue(q.URL, "lazyapi_gc_percent"); err != nil || gogc != 100 {
		t.Errorf("without --memory-limit: lazyapi_gc_percent %v (%v), want 100 (GOGC untouched)", gogc, err)
	}
}
