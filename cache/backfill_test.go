package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestBackfillWatchFromBeforeFill: a resource filled after changes were
// made (a restart of lazyapi) serves a watch from a resourceVersion before
// its fill, as the informers that re-watch after the restart ask: the
// changes after that revision, in order, with DELETED carrying the last
// state. An Exact read at an older revision works too. Dropping the
// resource returns every byte it charged.
func TestBackfillWatchFromBeforeFill(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	_, va2 := configMap(t, "ns", "a", nil, 100, 3)
	r1 := put(t, cli, ka, va1)
	r2 := put(t, cli, kb, vb)
	r3 := put(t, cli, ka, va2)
	r4 := del(t, cli, kb)
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	if got := r.Revision(); got < r4 {
		t.Fatalf("revision %d, want >= %d", got, r4)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := r.Watch(ctx, WatchOptions{RV: r1})
	if err != nil {
		t.Fatalf("Watch from %d (before the fill at %d) = %v", r1, r.Revision(), err)
	}
	defer w.Close()
	want := []struct {
		typ EventType
		key string
		val []byte
		rev int64
	}{{Added, kb, vb, r2}, {Modified, ka, va2, r3}, {Deleted, kb, vb, r4}}
	for i, wa := range want {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Type != wa.typ || ev.Key != wa.key || string(ev.Value) != string(wa.val) || ev.Rev != wa.rev {
			t.Fatalf("event %d = %s %s rev %d, want %s %s rev %d", i, ev.Type, ev.Key, ev.Rev, wa.typ, wa.key, wa.rev)
		}
	}
	snap, err := r.Snapshot(ctx, ReadOptions{Mode: ReadExact, RV: r2})
	if err != nil {
		t.Fatalf("Exact read at %d: %v", r2, err)
	}
	if it, ok := snap.Get(ka); !ok || string(it.Value) != string(va1) {
		t.Fatalf("Exact read at %d: a = %v, want its first value", r2, ok)
	}
	if _, ok := snap.Get(kb); !ok {
		t.Fatalf("Exact read at %d: b missing", r2)
	}
	// Before the history (the etcd revision 1 of an empty store): 410.
	if _, err := r.Watch(ctx, WatchOptions{RV: 1}); r1 > 2 && !errors.Is(err, ErrTooOld) {
		t.Fatalf("Watch from 1 = %v, want ErrTooOld", err)
	}
	w.Close()
	c.Drop(cmSpec.Prefix)
	if used := c.UsedBytes(); used != 0 {
		t.Fatalf("after Drop the budget holds %d bytes, want 0", used)
	}
}

// TestFillReplaysHistory: the history before a fill is the changes after
// its start applied to the tree read there, so each key's last change
// holds the tree's entry (one copy of the value), older changes their own;
// Config.Filled is called once, before the resource is ready, with the
// bytes it holds.
func TestFillReplaysHistory(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	_, va2 := configMap(t, "ns", "a", nil, 100, 3)
	ra1 := put(t, cli, ka, va1)
	rb := put(t, cli, kb, vb)
	ra := put(t, cli, ka, va2)
	type call struct {
		resource string
		bytes    int64
		state    State
	}
	calls := make(chan call, 4)
	var c *Cache
	c = newTestCache(t, cli, func(cfg *Config) {
		cfg.Filled = func(resource string, bytes int64) {
			s, _ := c.Resource(cmSpec).Status() // the resource is in c before its goroutine runs
			calls <- call{resource, bytes, s}
		}
	})
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	var got call
	select {
	case got = <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("Config.Filled not called after the fill")
	}
	if got.resource != cmSpec.Name || got.bytes != r.bytes.Load() || got.state == StateReady {
		t.Errorf("Filled(%q, %d) in state %s, want (%q, %d) before ready", got.resource, got.bytes, got.state, cmSpec.Name, r.bytes.Load())
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.ring.startRev >= ra1 {
		t.Fatalf("history starts at %d, want before the first write %d", r.ring.startRev, ra1)
	}
	byRev := map[int64]*event{}
	for i := range r.ring.n {
		ev := r.ring.buf[(r.ring.start+i)%len(r.ring.buf)]
		byRev[ev.rev] = ev
	}
	for _, rev := range []int64{ra1, rb, ra} {
		if byRev[rev] == nil {
			t.Fatalf("history lacks the change at %d (history: %d events)", rev, r.ring.n)
		}
	}
	for _, rev := range []int64{rb, ra} {
		if ev := byRev[rev]; ev.cur != get(r.t.root, ev.cur.key()) {
			t.Errorf("history event at %d holds its own copy of the tree's value", rev)
		}
	}
	if ev := byRev[ra]; ev.prev != byRev[ra1].cur || string(ev.prev.value()) != string(va1) {
		t.Errorf("the change at %d does not carry the change at %d as its previous state", ra, ra1)
	}
}

// byteCounter counts the bytes of the gRPC messages a client receives,
// and those of watch streams apart.
type byteCounter struct{ all, watch atomic.Int64 }

type methodKey struct{}

func (b *byteCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}
func (b *byteCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if p, ok := s.(*stats.InPayload); ok {
		b.all.Add(int64(p.WireLength))
		if m, _ := ctx.Value(methodKey{}).(string); strings.HasSuffix(m, "/Watch") {
			b.watch.Add(int64(p.WireLength))
		}
	}
}
func (b *byteCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (b *byteCounter) HandleConn(context.Context, stats.ConnStats)                       {}

// countingClient returns an etcd client of endpoint whose received bytes
// the returned byteCounter counts, closed when the test ends.
func countingClient(t *testing.T, endpoint string) (*clientv3.Client, *byteCounter) {
	t.Helper()
	counted := new(byteCounter)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStatsHandler(counted)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, counted
}

// TestFillReadsValuesOnce: filling a resource whose objects were all
// written within the history's revisions reads each value from etcd once
// (the state at the history's start, then the watch of the changes), not
// twice (the state at the current revision, then a second watch of the
// history, as before: 2x), and the history holds every change it can:
// all of them with a history of 1,000 events; the last 20 with one of 20,
// whose replay carries those only (the older values come from the fill's
// ranges, page by page, not from watch responses).
func TestFillReadsValuesOnce(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, size = 200, 8 << 10
	keys := make([]string, n)
	revs := make([]int64, n)
	for i := range n {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, size, uint64(i))
		keys[i] = k
		revs[i] = put(t, srv.Client, k, v)
	}
	for _, history := range []int{1000, 20} {
		t.Run(fmt.Sprint("history ", history), func(t *testing.T) {
			cli, counted := countingClient(t, srv.Endpoint)
			c := newTestCache(t, cli, func(cfg *Config) { cfg.Sizes = map[string]int{"configmaps": history} })
			r := c.Resource(cmSpec)
			waitState(t, r, StateReady)
			got, watched := counted.all.Load(), counted.watch.Load()
			if limit := int64(n * size * 3 / 2); got > limit {
				t.Errorf("the fill of %d values of %d bytes received %d bytes from etcd, want at most %d (1.5x the values)", n, size, got, limit)
			}
			kept := min(history, n)
			if limit := int64((kept + 2) * size * 3 / 2); watched > limit {
				t.Errorf("the replay received %d bytes, want at most %d (1.5x the %d values the history keeps)", watched, limit, kept)
			}
			t.Logf("received %d bytes (%d by watches) for %d bytes of values (%.2fx)", got, watched, n*size, float64(got)/float64(n*size))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			first := n - kept
			if first > 0 {
				if _, err := r.Watch(ctx, WatchOptions{RV: revs[first-1] - 1}); !errors.Is(err, ErrTooOld) {
					t.Fatalf("Watch from %d (before the history) = %v, want ErrTooOld", revs[first-1]-1, err)
				}
			}
			w, err := r.Watch(ctx, WatchOptions{RV: revs[first] - 1})
			if err != nil {
				t.Fatalf("Watch from %d = %v", revs[first]-1, err)
			}
			defer w.Close()
			for i := first; i < n; i++ {
				ev, err := w.Next(ctx)
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if ev.Type != Added || ev.Key != keys[i] {
					t.Fatalf("event %d = %s %s, want ADDED %s", i, ev.Type, ev.Key, keys[i])
				}
			}
		})
	}
}

// TestFillHistoryAfterCompaction: when etcd compacted after the start of
// the history the fill aims at, the history starts at the compaction: a
// watch from there resumes, one from before gets ErrTooOld.
func TestFillHistoryAfterCompaction(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	_, va2 := configMap(t, "ns", "a", nil, 100, 2)
	kb, vb := configMap(t, "ns", "b", nil, 100, 3)
	r1 := put(t, cli, ka, va1)
	r2 := put(t, cli, ka, va2)
	if _, err := cli.Compact(context.Background(), r2, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	r3 := put(t, cli, kb, vb)
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Watch(ctx, WatchOptions{RV: r1}); !errors.Is(err, ErrTooOld) {
		t.Fatalf("Watch from %d (compacted at %d) = %v, want ErrTooOld", r1, r2, err)
	}
	w, err := r.Watch(ctx, WatchOptions{RV: r2})
	if err != nil {
		t.Fatalf("Watch from the compaction %d = %v", r2, err)
	}
	defer w.Close()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != Added || ev.Key != kb || ev.Rev != r3 {
		t.Fatalf("event = %s %s rev %d, want ADDED %s rev %d", ev.Type, ev.Key, ev.Rev, kb, r3)
	}
	snap, err := r.Snapshot(ctx, ReadOptions{Mode: ReadAny})
	if err != nil {
		t.Fatal(err)
	}
	if it, ok := snap.Get(ka); !ok || string(it.Value) != string(va2) {
		t.Fatalf("a = %v, want its value at the compaction", ok)
	}
}

// TestCheckReplay: a replay is complete only when the tree holds etcd's
// state at its revision (the same keys at the same modification
// revisions): a tree that lacks a change, holds a key etcd deleted or
// lacks a key is incomplete, and counted.
func TestCheckReplay(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	_, va2 := configMap(t, "ns", "a", nil, 100, 3)
	put(t, cli, ka, va1)
	put(t, cli, kb, vb)
	ra := put(t, cli, ka, va2)
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	ctx := context.Background()
	var since time.Time
	if ok, err := r.checkReplay(ctx, 0, &since); !ok || err != nil {
		t.Fatalf("checkReplay of the ready resource = %v, %v; want complete", ok, err)
	}
	d := r.deriver()
	r.mu.Lock()
	defer r.mu.Unlock()
	root := r.t.snapshot()
	for _, tc := range []struct {
		name   string
		change func(*tree)
	}{
		{"a change missing", func(tr *tree) { tr.put(d.newEntry([]byte(ka), va1, ra-2)) }},
		{"a key etcd does not hold", func(tr *tree) { tr.put(d.newEntry([]byte(ka+"x"), va1, ra)) }},
		{"a key missing", func(tr *tree) { tr.delete(kb) }},
	} {
		tr := treeFrom(root)
		tc.change(tr)
		r.t = tr
		r.mu.Unlock()
		ok, err := r.checkReplay(ctx, 0, &since)
		r.mu.Lock()
		if ok || err != nil {
			t.Errorf("%s: checkReplay = %v, %v; want incomplete", tc.name, ok, err)
		}
	}
	r.t = treeFrom(root)
	if since.IsZero() || r.replaysIncomplete.Get() != 3 {
		t.Errorf("incomplete replays: since %v, counted %d; want set, 3", since, r.replaysIncomplete.Get())
	}
}

// TestFillReplayByteBound: a collection whose values, all written within
// the history's revisions, exceed Config.ReplayBytes is filled with a
// replay of at most ReplayBytes (the newest changes that fit, as a sample
// of their values estimates them), the rest read by the fill's ranges:
// the tree holds every value, and a watch from the history's start
// resumes with the replayed changes. When not even the newest change
// fits, nothing is replayed: the history starts at the fill.
func TestFillReplayByteBound(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, size = 40, 256 << 10 // 10 MiB
	keys := make([]string, n)
	vals := make([][]byte, n)
	revs := make([]int64, n)
	for i := range n {
		keys[i], vals[i] = configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, size, uint64(i))
		revs[i] = put(t, srv.Client, keys[i], vals[i])
	}
	for _, tc := range []struct {
		name   string
		bound  int64
		replay bool
	}{{"1 MiB", 1 << 20, true}, {"100 KiB", 100 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			cli, counted := countingClient(t, srv.Endpoint)
			c := newTestCache(t, cli, func(cfg *Config) { cfg.ReplayBytes = tc.bound })
			r := c.Resource(cmSpec)
			waitState(t, r, StateReady)
			replayed, watched := int64(r.replayed.Get()), counted.watch.Load()
			t.Logf("replayed %d bytes, %d bytes received by watches, %d by all (%d bytes of values)", replayed, watched, counted.all.Load(), n*size)
			if replayed > tc.bound {
				t.Errorf("the replay carried %d bytes, want at most Config.ReplayBytes = %d", replayed, tc.bound)
			}
			if limit := tc.bound * 3 / 2; watched > limit {
				t.Errorf("watches received %d bytes, want at most %d (1.5x Config.ReplayBytes)", watched, limit)
			}
			if tc.replay != (replayed > 0) {
				t.Errorf("replayed %d bytes, want a replay: %v", replayed, tc.replay)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			snap, err := r.Snapshot(ctx, ReadOptions{Mode: ReadAny})
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				if it, ok := snap.Get(k); !ok || string(it.Value) != string(vals[i]) || it.Rev != revs[i] {
					t.Fatalf("%s: cached %v, want its value at revision %d", k, ok, revs[i])
				}
			}
			r.mu.RLock()
			start := r.ring.startRev
			r.mu.RUnlock()
			// The history starts at the revision of the newest change
			// left out: the changes after it were replayed.
			first := 0
			for first < n && revs[first] <= start {
				first++
			}
			if first == 0 || (tc.replay && first == n) || (!tc.replay && first != n) {
				t.Fatalf("history starts at %d: %d of %d changes replayed, want some but not all: %v", start, n-first, n, tc.replay)
			}
			if _, err := r.Watch(ctx, WatchOptions{RV: start - 1}); !errors.Is(err, ErrTooOld) {
				t.Fatalf("Watch from %d (before the history at %d) = %v, want ErrTooOld", start-1, start, err)
			}
			if !tc.replay {
				return
			}
			w, err := r.Watch(ctx, WatchOptions{RV: start})
			if err != nil {
				t.Fatalf("Watch from the history's start %d = %v", start, err)
			}
			defer w.Close()
			for i := first; i < n; i++ {
				ev, err := w.Next(ctx)
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				if ev.Type != Added || ev.Key != keys[i] || ev.Rev != revs[i] {
					t.Fatalf("event %d = %s %s rev %d, want ADDED %s rev %d", i, ev.Type, ev.Key, ev.Rev, keys[i], revs[i])
				}
			}
		})
	}
}

// TestRefusedFillRetriesUnread: a resource whose fill was refused after
// reading values (its estimate was within the margin: it costs 10/9 of
// the budget) is refused again at its retries without reading its values
// (only a keys-only list and a sample of a few values) once its measure,
// times its objects now, is well over the budget left (it doubled); once
// it shrinks to fit, a retry fills it.
func TestRefusedFillRetriesUnread(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, size = 40, 64 << 10 // 2.5 MiB of values
	keys := make([]string, 2*n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sns/cm-%03d", cmPrefix, i)
	}
	value := func(i int) []byte {
		_, v := configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, size, uint64(i))
		return v
	}
	for i := range n {
		put(t, srv.Client, keys[i], value(i))
	}
	cost := fillCost(t, srv.Client, cmSpec, nil)
	budget := cost * 9 / 10
	c, logs := budgetCache(t, srv.Client, budget, 10*time.Millisecond)
	r := c.Resource(cmSpec)
	poll(t, "wait for the first refusal", func() error {
		if got := r.refused.Get(); got < 1 {
			return fmt.Errorf("%d refusals, want 1", got)
		}
		return nil
	})
	if read := int64(r.fillRead.Get()); read < budget/2 || r.refusedEstimated.Get() != 0 {
		t.Fatalf("the first refusal read %d bytes, %d by estimate; want the real fill's (up to the %d-byte budget)", read, r.refusedEstimated.Get(), budget)
	}
	// Grown to twice its size: the retries are refused unread.
	for i := n; i < 2*n; i++ {
		put(t, srv.Client, keys[i], value(i))
	}
	poll(t, "wait for a refusal unread", func() error {
		if got := r.refusedUnread.Get(); got < 1 {
			return fmt.Errorf("%d refusals unread, want 1", got)
		}
		return nil
	})
	// A try counts its reads before its refusal: read the reads after
	// the refusals, so that they cover those counted and one running.
	refused0 := int64(r.refused.Get())
	read0, unread0 := int64(r.fillRead.Get()), int64(r.refusedUnread.Get())
	const tries = 3
	poll(t, "wait for refusals", func() error {
		if got := int64(r.refused.Get()); got < refused0+tries {
			return fmt.Errorf("%d refusals, want %d", got, refused0+tries)
		}
		return nil
	})
	refused := int64(r.refused.Get()) - refused0
	read, unread := int64(r.fillRead.Get())-read0, int64(r.refusedUnread.Get())-unread0
	sample := int64(replaySamples * (size + 1<<10))
	if limit := (refused + 1) * sample; read > limit {
		t.Errorf("%d refusals read %d bytes, want at most %d (samples only)", refused, read, limit)
	}
	if unread < refused || r.refusedEstimated.Get() != 0 {
		t.Errorf("%d of %d refusals without reading values (%d by estimate), want all (none)", unread, refused, r.refusedEstimated.Get())
	}
	t.Logf("%d refusals (%d unread) read %d bytes; before them %d refusals read %d", refused, unread, read, refused0, read0)
	entries := logs.FilterMessageSnippet("resource not cached").All()
	if len(entries) < 2 {
		t.Fatalf("%d refusal log lines, want at least 2", len(entries))
	}
	for i, e := range []observer.LoggedEntry{entries[0], entries[len(entries)-1]} {
		reason, _ := e.ContextMap()["reason"].(string)
		if unreadReason := strings.Contains(reason, "measured at the last refusal"); unreadReason != (i > 0) || !strings.Contains(reason, "MemoryBytes=") {
			t.Errorf("refusal %d: reason %q", i, reason)
		}
	}
	// Shrunk to a fourth of the budget: a retry reads it and fills it.
	for _, k := range keys[n/8:] {
		del(t, srv.Client, k)
	}
	waitState(t, r, StateReady)
	if got := r.Objects(); got != n/8 {
		t.Fatalf("%d objects cached, want %d", got, n/8)
	}
}

// TestFillReplayByteBoundChurn: the replay's bound holds when most of the
// changes within the history's revisions are of keys deleted since (a
// value each in the watch, none in a keys-only range at the fill): the
// window is bounded in revisions, at most Config.ReplayBytes over the
// largest sampled value.
func TestFillReplayByteBoundChurn(t *testing.T) {
	srv := etcdtest.Start(t)
	const n, kept, size, bound = 24, 4, 256 << 10, 1 << 20
	keys := make([]string, n)
	for i := range n {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, size, uint64(i))
		keys[i] = k
		put(t, srv.Client, k, v)
	}
	for _, k := range keys[kept:] {
		del(t, srv.Client, k)
	}
	c := newTestCache(t, srv.Client, func(cfg *Config) { cfg.ReplayBytes = bound })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	if got := int64(r.replayed.Get()); got > bound {
		t.Errorf("the replay carried %d bytes, want at most Config.ReplayBytes = %d (%d values of %d bytes were written and deleted within the window)", got, bound, n-kept, size)
	}
	if got := r.Objects(); got != kept {
		t.Errorf("%d objects cached, want %d", got, kept)
	}
}
