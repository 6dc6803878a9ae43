package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestCachedWatchSelectsUnderivedObjects: a label-selector watch served
// from the watch cache selects objects whose attributes the cache could
// not derive (every Pod: status.podIPs is a list, not a field value) by
// reading their values, as an etcd watch does. Before, such objects never
// matched: a WatchList of Pods with a label selector sent no initial
// events and its watch no change (found by the robustness suite,
// internal/robustness, seed 2).
func TestCachedWatchSelectsUnderivedObjects(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	pod := func(name, tier string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"tier": tier}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	}
	e.put(t, "pods", pod("p0", "a"))
	e.put(t, "pods", pod("p1", "b"))
	e.put(t, "pods", pod("p2", "a"))
	for _, c := range []struct {
		name string
		cs   kubernetes.Interface
	}{{"cached", e.cs}, {"etcd", kubernetes.NewForConfigOrDie(&rest.Config{Host: tw.etcd.url, QPS: -1})}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var w watch.Interface
			// The first request starts the Pods' cache: wait until a
			// WatchList is served from it (hits counted) on the cached proxy.
			waitFor(t, "a WatchList of pods", func() error {
				if w != nil {
					w.Stop()
				}
				w = nil
				yes := true
				wi, err := c.cs.CoreV1().Pods("ns").Watch(ctx, metav1.ListOptions{LabelSelector: "tier=a", SendInitialEvents: &yes,
					ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
				if err != nil {
					return err
				}
				w = wi
				if c.name == "cached" {
					if v, err := metricValue(e.ms, `lazyapi_cache_requests_total{resource="pods",result="hit"}`); err != nil || v == 0 {
						return fmt.Errorf("not served from the cache yet (%v)", err)
					}
				}
				return nil
			})
			defer w.Stop()
			var got []string
			next := func() watch.Event {
				t.Helper()
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("watch ended after %v", got)
					}
					return ev
				case <-ctx.Done():
					t.Fatalf("no event after %v", got)
				}
				return watch.Event{}
			}
			for {
				ev := next()
				p := ev.Object.(*corev1.Pod)
				if ev.Type == watch.Bookmark {
					if p.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
						break
					}
					continue
				}
				got = append(got, string(ev.Type)+" "+p.Name)
			}
			if fmt.Sprint(got) != "[ADDED p0 ADDED p2]" {
				t.Errorf("initial events = %v, want [ADDED p0 ADDED p2]", got)
			}
			// p1 enters the selection, p0 leaves it.
			e.put(t, "pods", pod("p1", "a"))
			e.put(t, "pods", pod("p0", "b"))
			got = got[:0]
			for len(got) < 2 {
				if ev := next(); ev.Type != watch.Bookmark {
					got = append(got, string(ev.Type)+" "+ev.Object.(*corev1.Pod).Name)
				}
			}
			if fmt.Sprint(got) != "[ADDED p1 DELETED p0]" {
				t.Errorf("events = %v, want [ADDED p1 DELETED p0]", got)
			}
			// Put them back for the next subtest.
			e.put(t, "pods", pod("p1", "b"))
			e.put(t, "pods", pod("p0", "a"))
		})
	}
}

// TestPodIPsFieldSelectorReadsAbsent: kube-apiserver accepts the field
// label status.podIPs for Pods (its conversion function lists it) but its
// selectable fields (pod.ToSelectableFields) do not hold it, so it reads as
// empty: status.podIPs=X selects nothing and status.podIPs!=X every Pod,
// with 200. Before, a LIST served from etcd failed with an error for it
// (the peek refused a list), while one from the watch cache read it as
// empty.
func TestPodIPsFieldSelectorReadsAbsent(t *testing.T) {
	tw := startCacheTwins(t, 0)
	e := tw.cached
	for i, ip := range []string{"10.0.0.1", "10.0.0.2"} {
		e.put(t, "pods", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: "ns"},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}})
	}
	for _, c := range []struct {
		name string
		cs   kubernetes.Interface
	}{{"cached", e.cs}, {"etcd", kubernetes.NewForConfigOrDie(&rest.Config{Host: tw.etcd.url, QPS: -1})}} {
		t.Run(c.name, func(t *testing.T) {
			for _, tc := range []struct {
				sel  string
				want int
			}{{"status.podIPs=10.0.0.1", 0}, {"status.podIPs!=10.0.0.1", 2}, {"status.podIPs=", 2}, {"status.podIP=10.0.0.1", 1}} {
				l, err := c.cs.CoreV1().Pods("ns").List(context.Background(), metav1.ListOptions{FieldSelector: tc.sel})
				if err != nil {
					t.Errorf("%s: %v", tc.sel, err)
					continue
				}
				if len(l.Items) != tc.want {
					t.Errorf("%s: %d pods, want %d", tc.sel, len(l.Items), tc.want)
				}
			}
		})
	}
}
