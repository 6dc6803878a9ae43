package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
)

func nodePod(name, node, v string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{"v": v},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		Spec: corev1.PodSpec{NodeName: node},
	}
}

// TestWatchKubeletIndexed: kubelet-shaped watches served from the cache
// (its Pods by fieldSelector=spec.nodeName, cluster-wide; one object by
// metadata.name in its namespace) are indexed by the cache, and a Pod
// moved between nodes is DELETED (its last state on the old node) for the
// old node's watch and ADDED for the new one's, as kube-apiserver's
// triggers deliver it. client-go, JSON and protobuf.
func TestWatchKubeletIndexed(t *testing.T) {
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	ctx := context.Background()
	if _, err := e.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0"}); err != nil {
		t.Fatal(err)
	}
	r := c.Resource(cache.Spec{Name: "pods", Prefix: "/registry/pods/", Namespaced: true})
	waitCached(t, r, "pods cached")
	for cname, cs := range clients(e) {
		t.Run(cname, func(t *testing.T) {
			name := "p-" + cname
			r0 := e.put(t, "pods", nodePod(name, "n1", "0"))
			opts := func(sel string) metav1.ListOptions {
				return metav1.ListOptions{ResourceVersion: strconv.FormatInt(r0, 10), FieldSelector: sel}
			}
			before := r.IndexedWatchers()
			w1, err := cs.CoreV1().Pods("").Watch(ctx, opts("spec.nodeName=n1"))
			if err != nil {
				t.Fatal(err)
			}
			defer w1.Stop()
			w2, err := cs.CoreV1().Pods("").Watch(ctx, opts("spec.nodeName=n2"))
			if err != nil {
				t.Fatal(err)
			}
			defer w2.Stop()
			wn, err := cs.CoreV1().Pods("ns").Watch(ctx, opts("metadata.name="+name))
			if err != nil {
				t.Fatal(err)
			}
			defer wn.Stop()
			waitFor(t, "three more indexed watchers", func() error {
				if got := r.IndexedWatchers() - before; got != 3 {
					return fmt.Errorf("%d more indexed watchers, want 3", got)
				}
				return nil
			})
			e.put(t, "pods", nodePod("other-"+cname, "n3", "x")) // no watch's
			rmod := e.put(t, "pods", nodePod(name, "n1", "1"))
			rmove := e.put(t, "pods", nodePod(name, "n2", "2"))
			expectPod(t, nextEvent(t, w1), watch.Modified, name, "n1", "1", rmod)
			expectPod(t, nextEvent(t, w1), watch.Deleted, name, "n1", "1", rmove)
			expectPod(t, nextEvent(t, w2), watch.Added, name, "n2", "2", rmove)
			expectPod(t, nextEvent(t, wn), watch.Modified, name, "n1", "1", rmod)
			expectPod(t, nextEvent(t, wn), watch.Modified, name, "n2", "2", rmove)
			// The server unregisters a watch when it notices the client's
			// hang-up (conn.Hangups), after Stop has returned: stopped
			// watches must leave the index (a kubelet's churn must not
			// grow it), and the next client's count starts from a settled
			// one (read at once, it counted these until they left).
			w1.Stop()
			w2.Stop()
			wn.Stop()
			waitFor(t, "stopped watches unindexed", func() error {
				if got := r.IndexedWatchers(); got != before {
					return fmt.Errorf("%d indexed watchers, want %d", got, before)
				}
				return nil
			})
		})
	}
}

func expectPod(t *testing.T, ev watch.Event, typ watch.EventType, name, node, v string, rv int64) {
	t.Helper()
	p, ok := ev.Object.(*corev1.Pod)
	if ev.Type != typ || !ok || p.Name != name || p.Spec.NodeName != node || p.Labels["v"] != v || p.ResourceVersion != strconv.FormatInt(rv, 10) {
		t.Fatalf("event = %s %#v, want %s %s on %s v=%s at rv %d", ev.Type, ev.Object, typ, name, node, v, rv)
	}
}
