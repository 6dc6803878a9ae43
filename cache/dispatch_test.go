package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

var podSpec = Spec{Name: "pods", Prefix: "/registry/pods/", Namespaced: true, Fields: []string{"spec.nodeName", "status.podIPs", "status.phase"}}

func pod(t testing.TB, ns, name, node, phase, app string) (string, []byte) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodPhase(phase)},
	}
	v, err := storagefmt.Protobuf(p)
	if err != nil {
		t.Fatal(err)
	}
	return storagefmt.Key("/registry", "pods", ns, name), v
}

// selector is a random watch: exact terms (indexable), a != term and a
// label (not), and a namespace scope.
type selector struct {
	eq    []FieldTerm
	notPh string // status.phase != notPh ("": none)
	app   string // label app = app ("": none)
	ns    string // watch of one namespace ("": cluster-wide)
}

func (s selector) String() string {
	return fmt.Sprintf("eq=%v phase!=%q app=%q ns=%q", s.eq, s.notPh, s.app, s.ns)
}

// field reads a field as the proxy's filter does: from the attributes,
// or, for a value the cache could not peek (the test's "raw:NODE"), from
// the value itself.
func field(a Attrs, path string) string {
	if !a.Valid() && path == "spec.nodeName" {
		return strings.TrimPrefix(string(a.Value()), "raw:")
	}
	v, _ := a.Field(path)
	return v
}

func (s selector) match(a Attrs) bool {
	for _, t := range s.eq {
		if v := field(a, t.Path); v != t.Value {
			return false
		}
	}
	if s.notPh != "" {
		if v := field(a, "status.phase"); v == s.notPh {
			return false
		}
	}
	if s.app != "" {
		if v, ok := a.Label("app"); !ok || v != s.app {
			return false
		}
	}
	return true
}

// options returns the watch as the proxy opens it (indexed) and the same
// watch on the scan path: cluster-wide, no index terms, the namespace
// checked by the filter.
func (s selector) options(base WatchOptions) (indexed, scan WatchOptions) {
	indexed, scan = base, base
	indexed.Filter, indexed.Index = s.match, s.eq
	if s.ns != "" {
		indexed.From = podSpec.Prefix + s.ns + "/"
		indexed.To = prefixEnd(indexed.From)
	}
	scan.Filter = func(a Attrs) bool { return (s.ns == "" || a.Namespace() == s.ns) && s.match(a) }
	return indexed, scan
}

func randomSelector(rng *rand.Rand) selector {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	var s selector
	if rng.IntN(2) == 0 {
		s.eq = append(s.eq, FieldTerm{"metadata.name", pick("p0", "p1", "p2", "p3")})
	}
	if rng.IntN(2) == 0 {
		s.eq = append(s.eq, FieldTerm{"spec.nodeName", pick("n0", "n1", "")})
	}
	if rng.IntN(4) == 0 {
		s.eq = append(s.eq, FieldTerm{"metadata.namespace", pick("ns0", "ns1")})
	}
	if rng.IntN(4) == 0 {
		s.eq = append(s.eq, FieldTerm{"status.phase", pick("Running", "Pending")})
	}
	if rng.IntN(3) == 0 {
		s.notPh = pick("Running", "Pending")
	}
	if rng.IntN(3) == 0 {
		s.app = pick("a", "b")
	}
	if rng.IntN(2) == 0 {
		s.ns = pick("ns0", "ns1", "ns2")
	}
	return s
}

// cachedThrough waits until r applied the write at rev.
func cachedThrough(t *testing.T, r *Resource, rev int64) {
	t.Helper()
	poll(t, "cache at the last write", func() error {
		if got := r.Revision(); got < rev {
			return fmt.Errorf("cache at %d, want %d", got, rev)
		}
		return nil
	})
}

type seen struct {
	typ EventType
	key string
	rev int64
	val []byte
}

// drain returns every event w has ready (the cache is at the last write).
func drain(t *testing.T, w *Watcher) []seen {
	t.Helper()
	var out []seen
	for {
		ev, err := w.Next(doneCtx)
		if errors.Is(err, context.Canceled) {
			return out
		}
		if err != nil {
			t.Fatalf("watcher ended: %v", err)
		}
		if ev.Type == Bookmark {
			continue
		}
		out = append(out, seen{ev.Type, ev.Key, ev.Rev, ev.Value})
	}
}

var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// TestIndexedDispatchMatchesScan: for random selectors (names, nodes,
// namespaces, phases, labels, scopes) and random writes that move pods
// in and out of them (node, phase and label changes, deletes, creates),
// an indexed watcher sends exactly the events the same watch sends on the
// scan path (every watcher reads every change), ADDED/MODIFIED/DELETED,
// revisions and values alike: from now, from a revision in the history,
// and with initial events. Real etcd.
func TestIndexedDispatchMatchesScan(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	write := func() int64 {
		ns, name := fmt.Sprintf("ns%d", rng.IntN(3)), fmt.Sprintf("p%d", rng.IntN(4))
		key := storagefmt.Key("/registry", "pods", ns, name)
		switch rng.IntN(12) {
		case 0, 1:
			return del(t, cli, key)
		case 2:
			// A value the cache cannot peek: attributes not derived.
			return put(t, cli, key, []byte("raw:"+[]string{"n0", "n1", ""}[rng.IntN(3)]))
		}
		k, v := pod(t, ns, name, []string{"n0", "n1", ""}[rng.IntN(3)], []string{"Running", "Pending"}[rng.IntN(2)], []string{"a", "b"}[rng.IntN(2)])
		return put(t, cli, k, v)
	}
	for range 20 {
		write()
	}
	c := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"pods": 2000} })
	r := c.Resource(podSpec)
	waitState(t, r, StateReady)
	from := r.Revision()
	var last int64
	for range 30 {
		last = write()
	}
	cachedThrough(t, r, last)

	type pair struct {
		sel           selector
		indexed, scan *Watcher
	}
	var pairs []pair
	starts := []WatchOptions{{}, {RV: from}, {Initial: true, Mode: ReadAny}}
	for i := range 120 {
		s := randomSelector(rng)
		oi, os := s.options(starts[i%len(starts)])
		wi, err := r.Watch(context.Background(), oi)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(wi.Close)
		ws, err := r.Watch(context.Background(), os)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ws.Close)
		if want := len(s.eq) > 0 || s.ns != ""; wi.indexed != want || ws.indexed {
			t.Fatalf("%v: indexed %v (want %v), scan twin indexed %v", s, wi.indexed, want, ws.indexed)
		}
		pairs = append(pairs, pair{s, wi, ws})
	}
	for range 400 {
		last = write()
	}
	cachedThrough(t, r, last)
	var total, deleted int
	for _, p := range pairs {
		got, want := drain(t, p.indexed), drain(t, p.scan)
		total += len(want)
		for _, e := range want {
			if e.typ == Deleted {
				deleted++
			}
		}
		if len(got) != len(want) {
			t.Errorf("%v: %d events indexed, %d on the scan path", p.sel, len(got), len(want))
			continue
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.typ != w.typ || g.key != w.key || g.rev != w.rev || !bytes.Equal(g.val, w.val) {
				t.Errorf("%v: event %d indexed %v %s@%d, scan %v %s@%d (values equal %v)", p.sel, i, g.typ, g.key, g.rev, w.typ, w.key, w.rev, bytes.Equal(g.val, w.val))
				break
			}
		}
	}
	if total < 200 || deleted < 20 {
		t.Fatalf("the writes produced %d events (%d DELETED) for 120 selectors: too few to compare", total, deleted)
	}
	t.Logf("%d events compared (%d DELETED)", total, deleted)
}

// TestIndexedWatcherLagIdleAndBookmarks: an indexed watcher is judged by
// the lag rules on what is queued for it: one that does not read its
// events is cut when they leave the history, one whose selector matches
// nothing stays however far the history moves, and gets bookmarks.
func TestIndexedWatcherLagIdleAndBookmarks(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	c := newTestCache(t, cli, func(c *Config) {
		c.Sizes = map[string]int{"configmaps": 10}
		c.BookmarkInterval = 50 * time.Millisecond
	})
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	ctx := context.Background()
	named := func(name string, bookmarks bool) *Watcher {
		w, err := r.Watch(ctx, WatchOptions{Filter: func(a Attrs) bool { return a.Name() == name },
			Index: []FieldTerm{{"metadata.name", name}}, Bookmarks: bookmarks})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		return w
	}
	slow, idle := named("x", false), named("y", true)
	var last int64
	for i := range 25 {
		k, v := configMap(t, "ns", "x", nil, 10, uint64(i))
		last = put(t, cli, k, v)
	}
	cachedThrough(t, r, last)
	select {
	case <-slow.Done():
		if _, err := slow.Next(ctx); !errors.Is(err, ErrLagging) {
			t.Fatalf("slow watcher ended with %v, want ErrLagging", err)
		}
	default:
		t.Fatal("a watcher whose 25 events left a history of 10 is still open")
	}
	if idle.closed() {
		t.Fatalf("the idle watcher was cut: %v", idle.err)
	}
	// Bookmark: the revision of the last write, although nothing was
	// delivered to it.
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		ev, err := idle.Next(bctx)
		if err != nil {
			t.Fatalf("no bookmark reached the idle indexed watcher: %v", err)
		}
		if ev.Type != Bookmark {
			t.Fatalf("idle watcher got %v %s", ev.Type, ev.Key)
		}
		if ev.Rev >= last {
			break
		}
	}
	if rev, ok := idle.Bookmark(); !ok || rev < last {
		t.Fatalf("idle watcher Bookmark() = %d, %v, want >= %d", rev, ok, last)
	}
	// A due bookmark with nothing newer to carry waits for the next
	// change (bookmarkWaiters), then comes at once.
	type result struct {
		ev  Event
		err error
	}
	got := make(chan result, 1)
	go func() {
		ev, err := idle.Next(bctx)
		got <- result{ev, err}
	}()
	poll(t, "the idle watcher waits for a change to send its due bookmark", func() error {
		r.bmu.Lock()
		defer r.bmu.Unlock()
		if _, ok := r.bookmarkWaiters[idle]; !ok {
			return errors.New("not waiting")
		}
		return nil
	})
	k, v := configMap(t, "ns", "z", nil, 10, 1)
	rz := put(t, cli, k, v)
	res := <-got
	if res.err != nil || res.ev.Type != Bookmark || res.ev.Rev < rz {
		t.Fatalf("after a change elsewhere: %v %d %v, want a bookmark at >= %d", res.ev.Type, res.ev.Rev, res.err, rz)
	}
	k, v = configMap(t, "ns", "y", nil, 10, 2)
	ry := put(t, cli, k, v)
	ev, err := idle.Next(bctx)
	if err != nil || ev.Type != Added || ev.Rev != ry {
		t.Fatalf("its own change: %v %d %v, want ADDED at %d", ev.Type, ev.Rev, err, ry)
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if n := len(r.scan); n != 0 {
		t.Errorf("%d watchers on the scan path, want 0", n)
	}
	if b := r.index["metadata.name"]; len(b) != 1 || len(b[idxKey{value: "y"}]) != 1 {
		t.Errorf("name index %v, want the bucket of y only (x was cut)", b)
	}
}

// TestBookmarkGridPhases: watchers whose bookmarks fall due together are
// woken at their phases of the bookmark grid, not all in one instant
// (bookmarkPhases), and gridWait puts a wake-up on the watcher's phase,
// after the due time by at most one grid step.
func TestBookmarkGridPhases(t *testing.T) {
	now := time.Unix(1_800_000_000, 123_456_789)
	grid := time.Second
	for _, phase := range []time.Duration{0, 100 * time.Millisecond, 900 * time.Millisecond} {
		for _, wait := range []time.Duration{time.Nanosecond, 876_543_211 * time.Nanosecond, time.Minute, time.Minute + 999*time.Millisecond} {
			got := gridWait(now, wait, grid, phase)
			at := now.Add(got)
			if got <= wait || got > wait+grid || at.Sub(at.Truncate(grid)) != phase {
				t.Errorf("gridWait(wait %s, phase %s) = %s: wakes at %s, want after the due time by at most %s, %s past a second",
					wait, phase, got, at.Format("15:04:05.000000000"), grid, phase)
			}
		}
	}

	// 20 indexed watchers opened together, their bookmarks due together
	// (a grid of 100 ms: BookmarkInterval 6 s): the bookmarks come over
	// the grid's phases, not in one instant.
	srv := etcdtest.Start(t)
	cli := srv.Client
	c := newTestCache(t, cli, func(c *Config) { c.BookmarkInterval = 6 * time.Second })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 20
	ws := make([]*Watcher, n)
	phases := map[time.Duration]bool{}
	for i := range ws {
		name := fmt.Sprintf("idle-%d", i)
		w, err := r.Watch(ctx, WatchOptions{Filter: func(a Attrs) bool { return a.Name() == name },
			Index: []FieldTerm{{"metadata.name", name}}, Bookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		ws[i] = w
		phases[w.bmPhase] = true
	}
	if len(phases) != bookmarkPhases {
		t.Errorf("%d watchers on %d phases of the grid, want %d", n, len(phases), bookmarkPhases)
	}
	k, v := configMap(t, "ns", "other", nil, 10, 1)
	last := put(t, cli, k, v) // a revision newer than the watchers sent
	cachedThrough(t, r, last)
	at := make([]time.Time, n)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			ev, err := w.Next(ctx)
			if err != nil || ev.Type != Bookmark || ev.Rev < last {
				t.Errorf("watcher %d: %v %d, %v; want a bookmark at %d", i, ev.Type, ev.Rev, err, last)
			}
			at[i] = time.Now()
		})
	}
	wg.Wait()
	first, lastAt := slices.MinFunc(at, time.Time.Compare), slices.MaxFunc(at, time.Time.Compare)
	// Phases 0-90 ms apart: the bookmarks span about 90 ms (one
	// instant with a single phase).
	if span := lastAt.Sub(first); span < 40*time.Millisecond || span > 2*time.Second {
		t.Errorf("20 bookmarks due together came over %s, want spread over the grid's phases (about 90 ms)", span)
	}
}
