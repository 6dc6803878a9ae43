package cache

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/internal/etcdtest"
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

// TestBackfillSharesFilledValues: the history before a fill shares the
// tree's entry for a change whose value the fill read (each key's last
// change), rather than holding a second copy while the history arrives;
// Config.Filled is called once, after the backfill, with the bytes held.
func TestBackfillSharesFilledValues(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	_, va2 := configMap(t, "ns", "a", nil, 100, 3)
	put(t, cli, ka, va1)
	rb := put(t, cli, kb, vb)
	ra := put(t, cli, ka, va2)
	type call struct {
		resource string
		bytes    int64
	}
	calls := make(chan call, 4)
	c := newTestCache(t, cli, func(cfg *Config) {
		cfg.Filled = func(resource string, bytes int64) { calls <- call{resource, bytes} }
		cfg.ProgressInterval = 100 * time.Millisecond
	})
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	var got call
	select {
	case got = <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("Config.Filled not called after the fill")
	}
	if got.resource != cmSpec.Name || got.bytes != r.bytes.Load() {
		t.Errorf("Filled(%q, %d), want (%q, %d)", got.resource, got.bytes, cmSpec.Name, r.bytes.Load())
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.backfilling {
		t.Fatal("Filled called while the backfill runs")
	}
	shared := 0
	for i := range r.ring.n {
		ev := r.ring.buf[(r.ring.start+i)%len(r.ring.buf)]
		if ev.cur == nil {
			continue
		}
		te := get(r.t.root, ev.cur.key())
		switch {
		case ev.rev == ra || ev.rev == rb:
			if ev.cur != te {
				t.Errorf("history event at %d holds its own copy of the tree's value", ev.rev)
			}
			shared++
		case ev.cur == te:
			t.Errorf("history event at %d shares the tree's entry of a newer value", ev.rev)
		}
	}
	if shared != 2 {
		t.Errorf("%d history events are the fill's values, want 2 (history: %d events)", shared, r.ring.n)
	}
}

// TestBackfillAddShares: backfill.add takes the fill's entry for a change
// whose value the fill read (same key and revision) instead of copying the
// value, and copies one the fill did not read (an older revision).
func TestBackfillAddShares(t *testing.T) {
	srv := etcdtest.Start(t)
	c := newTestCache(t, srv.Client, nil)
	r := c.Resource(cmSpec)
	d := r.deriver()
	ka, va := configMap(t, "ns", "a", nil, 100, 1)
	var tr tree
	te := d.newEntry([]byte(ka), []byte(va), 7)
	tr.put(te)
	b := newBackfill(0, 10, 100)
	b.add(d, &tr, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(ka), Value: []byte(va), ModRevision: 5, CreateRevision: 5, Version: 1}})
	b.add(d, &tr, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(ka), Value: []byte(va), ModRevision: 7, CreateRevision: 5, Version: 2}})
	if len(b.events) != 2 {
		t.Fatalf("%d events, want 2", len(b.events))
	}
	if b.events[0].cur == te {
		t.Error("the change at 5 (not the fill's value) shares the fill's entry")
	}
	if b.events[1].cur != te {
		t.Error("the change at 7 (the fill's value) holds a copy, want the fill's entry")
	}
	if b.events[1].prev != b.events[0].cur {
		t.Error("the change at 7 does not carry the change at 5 as its previous state")
	}
}

// TestBackfillComplete: a backfill is complete against the fill only when
// every object changed after its start has that change among its events.
// A progress notification at the fill's revision that etcd delivered before
// the events (seen with many watches on one stream) finds it incomplete.
func TestBackfillComplete(t *testing.T) {
	srv := etcdtest.Start(t)
	c := newTestCache(t, srv.Client, nil)
	r := c.Resource(cmSpec)
	d := r.deriver()
	ka, va := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	var tr tree
	tr.put(d.newEntry([]byte(ka), []byte(va), 3)) // before the start
	tr.put(d.newEntry([]byte(kb), []byte(vb), 7))
	b := newBackfill(5, 10, 100)
	if b.complete(&tr) {
		t.Fatal("complete with no events, want incomplete: b changed at 7, after the start 5")
	}
	b.add(d, &tr, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(kb), Value: []byte(vb), ModRevision: 6, CreateRevision: 6, Version: 1}})
	if b.complete(&tr) {
		t.Fatal("complete with b's change at 6 only, want incomplete: the tree holds b at 7")
	}
	b.add(d, &tr, &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(kb), Value: []byte(vb), ModRevision: 7, CreateRevision: 6, Version: 2}})
	if !b.complete(&tr) {
		t.Fatal("incomplete with every change after the start, want complete")
	}
}

// TestLateBackfillDropsHistory: events before the fill's revision that
// arrive after the backfill ended mean the history before the fill missed
// them: it is dropped, the watcher reading it ends (lagging: its client
// re-watches), a watch from before the fill gets ErrTooOld (410, then a
// re-list) instead of an incomplete history, one from the fill on works,
// and every byte the history charged is returned.
func TestLateBackfillDropsHistory(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	ka, va1 := configMap(t, "ns", "a", nil, 100, 1)
	kb, vb := configMap(t, "ns", "b", nil, 100, 2)
	_, va2 := configMap(t, "ns", "a", nil, 100, 3)
	r1 := put(t, cli, ka, va1)
	put(t, cli, kb, vb)
	r3 := put(t, cli, ka, va2)
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := r.Watch(ctx, WatchOptions{RV: r1})
	if err != nil {
		t.Fatalf("Watch from %d (before the fill) = %v", r1, err)
	}
	defer w.Close()
	held := c.UsedBytes()
	r.lateBackfill(r3, 1)
	if _, err := w.Next(ctx); !errors.Is(err, ErrLagging) {
		t.Fatalf("the watcher reading the dropped history: Next = %v, want ErrLagging", err)
	}
	if _, err := r.Watch(ctx, WatchOptions{RV: r1}); !errors.Is(err, ErrTooOld) {
		t.Fatalf("Watch from %d after the history was dropped = %v, want ErrTooOld", r1, err)
	}
	w2, err := r.Watch(ctx, WatchOptions{RV: r3})
	if err != nil {
		t.Fatalf("Watch from the fill's revision %d = %v", r3, err)
	}
	w2.Close()
	if c.UsedBytes() >= held {
		t.Fatalf("the budget holds %d bytes after the history was dropped, %d before: want fewer", c.UsedBytes(), held)
	}
	c.Drop(cmSpec.Prefix)
	if used := c.UsedBytes(); used != 0 {
		t.Fatalf("after Drop the budget holds %d bytes, want 0", used)
	}
}
