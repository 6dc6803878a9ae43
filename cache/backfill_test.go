package cache

import (
	"context"
	"errors"
	"testing"
	"time"

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
