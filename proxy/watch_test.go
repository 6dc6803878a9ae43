package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// watchEnv is startEnv with the watch cache (cached=true, waiting until
// ConfigMaps are cached) or without (every watch goes to etcd).
func watchEnv(t *testing.T, cached bool, history int) *env {
	t.Helper()
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		if !cached {
			return
		}
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 64 << 20, DefaultHistory: history,
			BookmarkInterval: 200 * time.Millisecond, ProgressInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	if cached {
		r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
		waitCached(t, r, "configmaps cached")
	}
	return e
}

func cm(name, app, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), Labels: map[string]string{"app": app},
			CreationTimestamp: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))},
		Data: map[string]string{"v": v},
	}
}

// nextEvent returns the next event of w, failing after 20 s.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
	}
	return watch.Event{}
}

// expect checks a ConfigMap event's type, name, data and resourceVersion.
func expect(t *testing.T, ev watch.Event, typ watch.EventType, name, v string, rv int64) {
	t.Helper()
	got, ok := ev.Object.(*corev1.ConfigMap)
	if ev.Type != typ || !ok || got.Name != name || got.Data["v"] != v || got.ResourceVersion != strconv.FormatInt(rv, 10) {
		t.Fatalf("event = %s %#v, want %s %s v=%s at rv %d", ev.Type, ev.Object, typ, name, v, rv)
	}
}

type watchMode struct {
	name   string
	cached bool
}

var watchModes = []watchMode{{"etcd", false}, {"cache", true}}

func clients(e *env) map[string]kubernetes.Interface {
	return map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs}
}

func TestWatchEvents(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			e := watchEnv(t, m.cached, 1000)
			ctx := context.Background()
			rev0 := e.put(t, "configmaps", cm("pre", "web", "0"))
			for cname, cs := range clients(e) {
				t.Run(cname, func(t *testing.T) {
					name := "cm-" + cname
					// rv unset: the current state as ADDED, then changes.
					w0, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					defer w0.Stop()
					expect(t, nextEvent(t, w0), watch.Added, "pre", "0", rev0)

					list, err := cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Stop()
					r1 := e.put(t, "configmaps", cm(name, "web", "1"))
					expect(t, nextEvent(t, w), watch.Added, name, "1", r1)
					r2 := e.put(t, "configmaps", cm(name, "web", "2"))
					expect(t, nextEvent(t, w), watch.Modified, name, "2", r2)
					del, err := e.cli.Delete(ctx, "/registry/configmaps/ns/"+name)
					if err != nil {
						t.Fatal(err)
					}
					// DELETED: the last state at the deletion's revision.
					expect(t, nextEvent(t, w), watch.Deleted, name, "2", del.Header.Revision)
					for _, want := range []struct {
						typ watch.EventType
						v   string
						rv  int64
					}{{watch.Added, "1", r1}, {watch.Modified, "2", r2}, {watch.Deleted, "2", del.Header.Revision}} {
						expect(t, nextEvent(t, w0), want.typ, name, want.v, want.rv)
					}
				})
			}
			if v, err := metricValue(e.ms, "lazyapi_watch_etcd_fallback_total"); m.cached && (err != nil || v != 0) {
				t.Errorf("cached mode: lazyapi_watch_etcd_fallback_total = %v, %v; want 0", v, err)
			}
			if v, err := metricValue(e.ms, "lazyapi_watch_events_sent_total"); err != nil || v < 10 {
				t.Errorf("lazyapi_watch_events_sent_total = %v, %v; want >= 10", v, err)
			}
		})
	}
}

// TestWatchTooOld: a watch from a compacted revision is 410 Expired "too
// old resource version"; in cached mode one older than the history but not
// compacted is served by etcd's watch.
func TestWatchTooOld(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			e := watchEnv(t, m.cached, 5)
			ctx := context.Background()
			first := e.put(t, "configmaps", cm("a", "web", "0"))
			var last int64
			for i := range 20 {
				last = e.put(t, "configmaps", cm("a", "web", strconv.Itoa(i)))
			}
			if m.cached {
				// Older than the cache's history of 5 but not compacted:
				// served by etcd's watch (kube-apiserver's cacher would
				// answer 410), from the change after first.
				w, err := clients(e)["json"].CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(first, 10)})
				if err != nil {
					t.Fatal(err)
				}
				expect(t, nextEvent(t, w), watch.Modified, "a", "0", first+1)
				w.Stop()
			}
			if rev := compactLikeKubeAPIServer(t, e.cli); rev < last {
				t.Fatalf("compacted at %d, before the last write %d", rev, last)
			}
			for cname, cs := range clients(e) {
				t.Run(cname, func(t *testing.T) {
					w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(first, 10)})
					if err != nil {
						t.Fatalf("watch = %v, want HTTP 200 then an ERROR event", err)
					}
					defer w.Stop()
					ev := nextEvent(t, w)
					if ev.Type != watch.Error {
						t.Fatalf("event = %s %#v, want ERROR", ev.Type, ev.Object)
					}
					err = apierrors.FromObject(ev.Object)
					if !apierrors.IsResourceExpired(err) || !strings.Contains(err.Error(), "too old resource version: "+strconv.FormatInt(first, 10)) {
						t.Errorf("ERROR event = %v, want 410 Expired too old resource version: %d (...)", err, first)
					}
				})
			}
		})
	}
}

func TestWatchSelectorMoves(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			e := watchEnv(t, m.cached, 1000)
			ctx := context.Background()
			for cname, cs := range clients(e) {
				t.Run(cname, func(t *testing.T) {
					name := "mover-" + cname
					r0 := e.put(t, "configmaps", cm(name, "other", "0"))
					w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{
						ResourceVersion: strconv.FormatInt(r0, 10), LabelSelector: "app=web"})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Stop()
					e.put(t, "configmaps", cm(name, "other", "1")) // not selected before or after
					rin := e.put(t, "configmaps", cm(name, "web", "2"))
					expect(t, nextEvent(t, w), watch.Added, name, "2", rin)
					rmod := e.put(t, "configmaps", cm(name, "web", "3"))
					expect(t, nextEvent(t, w), watch.Modified, name, "3", rmod)
					rout := e.put(t, "configmaps", cm(name, "other", "4"))
					// Moving out: DELETED with the last selected state.
					expect(t, nextEvent(t, w), watch.Deleted, name, "3", rout)
					// Field selector too.
					wf, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{
						ResourceVersion: strconv.FormatInt(rout, 10), FieldSelector: "metadata.name=" + name})
					if err != nil {
						t.Fatal(err)
					}
					defer wf.Stop()
					e.put(t, "configmaps", cm("unrelated-"+cname, "web", "x"))
					r5 := e.put(t, "configmaps", cm(name, "other", "5"))
					expect(t, nextEvent(t, wf), watch.Modified, name, "5", r5)
				})
			}
		})
	}
}

func TestWatchBookmarks(t *testing.T) {
	// etcd-backed watches ask etcd for progress once a minute; the cache's
	// bookmark interval is set to 200ms here.
	e := watchEnv(t, true, 1000)
	ctx := context.Background()
	for cname, cs := range clients(e) {
		t.Run(cname, func(t *testing.T) {
			r0 := e.put(t, "configmaps", cm("bm-"+cname, "web", "0"))
			w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{
				ResourceVersion: strconv.FormatInt(r0, 10), AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			// A write elsewhere advances the revision without an event here.
			rev, err := e.cli.Put(ctx, "/registry/secrets/ns/s", "x")
			if err != nil {
				t.Fatal(err)
			}
			for {
				ev := nextEvent(t, w)
				if ev.Type != watch.Bookmark {
					t.Fatalf("event = %s, want BOOKMARK", ev.Type)
				}
				acc, _ := meta.Accessor(ev.Object)
				got, _ := strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
				if got >= rev.Header.Revision {
					break
				}
			}
		})
	}
}

func TestWatchSendInitialEvents(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			e := watchEnv(t, m.cached, 1000)
			ctx := context.Background()
			want := map[string]int64{}
			for i := range 30 {
				n := fmt.Sprintf("init-%02d", i)
				want[n] = e.put(t, "configmaps", cm(n, "web", "0"))
			}
			for cname, cs := range clients(e) {
				t.Run(cname, func(t *testing.T) {
					yes := true
					w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes,
						ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Stop()
					seen := map[string]bool{}
					for {
						ev := nextEvent(t, w)
						if ev.Type == watch.Bookmark {
							acc, _ := meta.Accessor(ev.Object)
							if acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
								continue // a progress bookmark
							}
							break
						}
						got, ok := ev.Object.(*corev1.ConfigMap)
						if ev.Type != watch.Added || !ok || got.ResourceVersion != strconv.FormatInt(want[got.Name], 10) {
							t.Fatalf("initial event = %s %#v, want ADDED at its mod revision", ev.Type, ev.Object)
						}
						seen[got.Name] = true
					}
					if len(seen) != len(want) {
						t.Errorf("initial events named %d objects, want %d", len(seen), len(want))
					}
				})
			}
		})
	}
}

func TestWatchTimeoutSeconds(t *testing.T) {
	for _, m := range watchModes {
		t.Run(m.name, func(t *testing.T) {
			e := watchEnv(t, m.cached, 1000)
			for cname, cs := range clients(e) {
				t.Run(cname, func(t *testing.T) {
					one := int64(1)
					w, err := cs.CoreV1().ConfigMaps("ns").Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: &one})
					if err != nil {
						t.Fatal(err)
					}
					defer w.Stop()
					select {
					case ev, ok := <-w.ResultChan():
						if ok {
							t.Fatalf("event %s %#v on an empty collection, want the stream to end", ev.Type, ev.Object)
						}
					case <-time.After(15 * time.Second):
						t.Fatal("watch with timeoutSeconds=1 still open after 15s")
					}
				})
			}
		})
	}
}

func TestWatchBadRequests(t *testing.T) {
	e := watchEnv(t, false, 0)
	for _, q := range []string{
		"watch=true&sendInitialEvents=true&allowWatchBookmarks=true",                                              // no NotOlderThan
		"watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",                                     // no bookmarks
		"watch=true&resourceVersion=3&resourceVersionMatch=NotOlderThan",                                          // match without sendInitialEvents
		"watch=true&labelSelector=a+in+(",                                                                         // selector
		"watch=true&sendInitialEvents=true&resourceVersionMatch=Exact&allowWatchBookmarks=true&resourceVersion=3", // Exact
	} {
		code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?"+q, "")
		if code != 400 || !strings.Contains(string(body), `"reason":"BadRequest"`) {
			t.Errorf("GET ?%s = %d %s, want 400 BadRequest", q, code, body)
		}
	}
}

// oneWatchSeat is a limiter with one watch seat and no queue.
func oneWatchSeat(t *testing.T) *ratelimit.Limiter {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.MaxWatchesInflight = 1
	cfg.MaxQueued = 0
	cfg.MaxInflightBytes = 1 << 30
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// TestWatchAdmission: with one watch slot and no queue, a second watch gets
// 429 while the first is open; the slot is released when the watch ends,
// and server shutdown ends an open watch promptly.
func TestWatchAdmission(t *testing.T) {
	lim := oneWatchSeat(t)
	e2 := startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	ctx := context.Background()
	w, err := e2.cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// (raw HTTP: client-go retries 429s for ~10 s)
	if code, hdr, body := e2.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?watch=true", ""); code != 429 || hdr.Get("Retry-After") == "" {
		t.Fatalf("second watch = %d %s, want 429 TooManyRequests with Retry-After", code, body)
	}
	w.Stop()
	waitFor(t, "watch slot released", func() error {
		w, err := e2.cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		defer w.Stop()
		return nil
	})
	// Shutdown ends an open watch promptly.
	w, err = e2.cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := e2.srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown with an open watch = %v after %s", err, time.Since(start))
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("event after shutdown, want the stream to end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch still open 10s after Shutdown")
	}
}

// TestWatchTooOldAdmitted: a watch older than the watch cache's history
// (not compacted), which etcd's watch serves (TestWatchTooOld), holds a
// watch seat and the bytes of any watch while it is open: with one watch
// seat and no queue a second watch is 429, and once it ends the seat and
// its bytes are given back.
func TestWatchTooOldAdmitted(t *testing.T) {
	lim := oneWatchSeat(t)
	var err error
	var c *cache.Cache
	e := startEnv(t, func(pc *proxy.Config) {
		c, err = cache.New(cache.Config{Client: pc.Client, MemoryBytes: 64 << 20, DefaultHistory: 5,
			BookmarkInterval: 200 * time.Millisecond, ProgressInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		pc.Cache, pc.Limiter = c, lim
	})
	waitCached(t, c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true}), "configmaps cached")
	ctx := context.Background()
	first := e.put(t, "configmaps", cm("a", "web", "0"))
	var last int64
	for i := range 20 {
		last = e.put(t, "configmaps", cm("a", "web", strconv.Itoa(i)))
	}
	released := func(what string) {
		waitFor(t, what, func() error {
			if st := lim.Stats(); st.InflightWatches != 0 || st.WatchReservedBytes != 0 {
				return fmt.Errorf("%d watches admitted, %d bytes reserved", st.InflightWatches, st.WatchReservedBytes)
			}
			return nil
		})
	}
	// An ordinary watch, from the cache: what a watch holds.
	w, err := e.cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(last, 10)})
	if err != nil {
		t.Fatal(err)
	}
	cached := lim.Stats()
	w.Stop()
	released("the cached watch's seat released")
	fallbacks := func() float64 { v, _ := metricValue(e.ms, "lazyapi_watch_etcd_fallback_total"); return v }
	before := fallbacks()

	w, err = e.cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(first, 10)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expect(t, nextEvent(t, w), watch.Modified, "a", "0", first+1)
	if got := fallbacks() - before; got != 1 {
		t.Fatalf("lazyapi_watch_etcd_fallback_total grew by %v, want 1 (the watch must be etcd's)", got)
	}
	// Once etcd's responses queued for it are written (the feed's charge
	// given back), the too-old watch holds what a cached watch holds.
	waitFor(t, "the too-old watch's reservation", func() error {
		if st := lim.Stats(); st.InflightWatches != 1 || st.WatchReservedBytes != cached.WatchReservedBytes || st.WatchReservedBytes == 0 {
			return fmt.Errorf("the too-old watch holds %d watch seats and %d bytes, want 1 and %d as a cached watch",
				st.InflightWatches, st.WatchReservedBytes, cached.WatchReservedBytes)
		}
		return nil
	})
	// (raw HTTP: client-go retries 429s for ~10 s)
	if code, _, body := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps?watch=true&resourceVersion="+strconv.FormatInt(first, 10), ""); code != 429 {
		t.Errorf("second too-old watch with the seat held = %d %s, want 429", code, body)
	}
	w.Stop()
	released("the too-old watch's seat released")
}
