package cache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/failovertest"
	"github.com/lazyapi/lazyapi/store"
)

// TestFollowsFailover: a cache reading through a client that prefers
// member m0 (store.Failover) keeps following etcd when m0 is cut off from
// the other members and when it rejoins. m0 stays up, so gRPC keeps its
// connection (drained, not closed) and a watch left on it would receive
// nothing until the partition heals; the cache re-opens its watch on the
// new endpoints at each switch, resuming from its revision (no re-list),
// and its watchers see every change.
func TestFollowsFailover(t *testing.T) {
	t0 := time.Now()
	cl := etcdtest.StartCluster(t, 3)
	eps := cl.Endpoints()
	s := failovertest.Start(t, store.FailoverConfig{Preferred: eps[0], Endpoints: eps})
	cli, f := s.Client, s.Failover
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	for i := range 20 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 20, uint64(i))
		put(t, cl.Client, k, v)
	}
	c := newTestCache(t, cli, func(c *Config) { c.EtcdMoved = f.Moved })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	w, err := r.Watch(ctx, WatchOptions{RV: r.Revision()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	waitMove := func(onPreferred bool) {
		t.Helper()
		s.Wait(t, "cache failover", 15*time.Second, func() bool { return f.Status().OnPreferred == onPreferred })
	}
	writes := func(round int) int64 {
		var rev int64
		for i := range 10 {
			k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 20, uint64(100*round+i))
			rev = put(t, cli, k, v) // cl.Client would send some to m0, where they wait out etcd's request timeout
		}
		return rev
	}

	t.Logf("cluster up, cache filled: %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	cl.Partition(0)
	waitMove(false)
	t.Logf("moved to the others: %s", time.Since(t0).Round(time.Millisecond))
	rev := writes(1)
	waitEtcdState(t, "cache follows etcd with its preferred member partitioned", r, cli)
	if evs := collect(t, w, 10); evs[9].Rev != rev {
		t.Fatalf("watcher during the partition ends at %d, want %d", evs[9].Rev, rev)
	}
	t.Logf("cache followed: %s", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	cl.Heal(0)
	waitMove(true)
	t.Logf("moved back: %s", time.Since(t0).Round(time.Millisecond))
	rev = writes(2)
	waitEtcdState(t, "cache follows etcd after the partition healed", r, cli)
	if evs := collect(t, w, 10); evs[9].Rev != rev {
		t.Fatalf("watcher after the partition ends at %d, want %d", evs[9].Rev, rev)
	}
	t.Logf("cache followed: %s", time.Since(t0).Round(time.Millisecond))
	if n := r.relists.Get(); n != 0 {
		t.Fatalf("the cache re-listed %d times; a move should resume its watch", n)
	}
	// One watch for the fill, a new one (on a stream of its own) at each
	// of the two moves.
	if n := c.watchOpens.Get(); n < 3 {
		t.Fatalf("%d etcd watches opened, want at least 3: one re-opened at each move", n)
	}
}
