package cache

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestWatchEventInitialAndBacklog: initial events are marked Initial;
// history events carry how many newer events the history held when each
// was read (the proxy shares frames only for watchers that keep up).
func TestWatchEventInitialAndBacklog(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	k0, v0 := configMap(t, "ns", "a", nil, 10, 1)
	put(t, cli, k0, v0)
	c := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"configmaps": 100} })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	fillRev := r.Revision()

	wi, err := r.Watch(context.Background(), WatchOptions{Initial: true, Mode: ReadAny})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Close()
	const n = 5
	var last int64
	for i := range n {
		k, v := configMap(t, "ns", "b"+strconv.Itoa(i), nil, 10, uint64(i))
		last = put(t, cli, k, v)
	}
	poll(t, "cache at the last write", func() error {
		if rev := r.Revision(); rev < last {
			return fmt.Errorf("cache at %d, want %d", rev, last)
		}
		return nil
	})
	evs := collect(t, wi, 1+n)
	if !evs[0].Initial || evs[0].Key != k0 {
		t.Errorf("first event = %s %s Initial=%v, want the initial ADDED of %s", evs[0].Type, evs[0].Key, evs[0].Initial, k0)
	}
	for i, ev := range evs[1:] {
		if ev.Initial || ev.Backlog != n-1-i {
			t.Errorf("history event %d: Initial=%v Backlog=%d, want false, %d", i, ev.Initial, ev.Backlog, n-1-i)
		}
	}

	// A watcher from the fill revision replays the same history.
	wh, err := r.Watch(context.Background(), WatchOptions{RV: fillRev})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	for i, ev := range collect(t, wh, n) {
		if ev.Initial || ev.Backlog != n-1-i {
			t.Errorf("replayed event %d: Initial=%v Backlog=%d, want false, %d", i, ev.Initial, ev.Backlog, n-1-i)
		}
	}
}
