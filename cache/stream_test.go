package cache

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// fakeMoves is a Config.EtcdMoved whose switches the test makes: each
// re-opens every resource's etcd watch from the revision it holds, the
// path of an endpoint move (store.Failover) on one etcd member.
type fakeMoves struct {
	mu  sync.Mutex
	gen uint64
	ch  chan struct{}
}

func newFakeMoves() *fakeMoves { return &fakeMoves{ch: make(chan struct{})} }

func (f *fakeMoves) Moved() (uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.ch
}

func (f *fakeMoves) move() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.ch)
	f.ch = make(chan struct{})
	f.gen++
}

// TestConsistentReadsAcrossReopens: consistent reads of a resource that is
// written all the time, while its etcd watch and those of idle resources
// are re-opened again and again (lagging behind etcd each time) and
// progress is requested, always return etcd's state at their revision.
//
// etcd can deliver a progress notification to a watch before that
// watch's catch-up events: its sendLoop (server/etcdserver/api/v3rpc/
// watch.go) selects between the watch responses (progress included) and
// the control responses (Created) at random, so a progress generated for
// the watches of a stream before a new watch was created there can follow
// the new watch's Created response, and clientv3 then hands it to the new
// watch. The cache advanced a resource to that revision without its
// events: a consistent LIST missed writes. Each watch is now alone on a
// gRPC stream opened for it, and progress is requested there only after
// the watch was created.
func TestConsistentReadsAcrossReopens(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	if _, err := cli.Get(context.Background(), "x"); err != nil { // the client's goroutines settle
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	moves := newFakeMoves()
	c := newTestCache(t, cli, func(c *Config) {
		c.EtcdMoved = moves.Moved
		c.ProgressInterval = 50 * time.Millisecond
		c.BackfillRevisions = -1
	})
	for i := range 20 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 100, uint64(i))
		put(t, cli, k, v)
	}
	r := c.Resource(cmSpec)
	// A busy resource keeps etcd's side of a shared stream sending.
	busy := c.Resource(Spec{Name: "busy", Prefix: "/registry/busy/", Namespaced: true})
	idle := make([]*Resource, 8)
	for i := range idle {
		idle[i] = c.Resource(Spec{Name: "idle" + strconv.Itoa(i), Prefix: fmt.Sprintf("/registry/idle%d/", i), Namespaced: true})
	}
	waitState(t, r, StateReady)
	waitState(t, busy, StateReady)
	for _, ir := range idle {
		waitState(t, ir, StateReady)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var writes atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i%20), nil, 100, uint64(1000+i))
			if i%2 == 1 {
				k, v = "/registry/busy/ns/b"+strconv.Itoa(i%50), make([]byte, 16<<10)
			}
			if _, err := cli.Put(ctx, k, string(v)); err != nil && ctx.Err() == nil {
				t.Errorf("put: %v", err)
				return
			}
			writes.Add(1)
		}
	}()
	// Progress asked for all the time, as by many consistent reads.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			requestProgressAll(c)
			time.Sleep(time.Millisecond) // the rate of requests, not synchronisation
		}
	}()
	// Every snapshot the cache hands out claims to hold everything up to
	// its revision: keep the distinct ones seen while the watches are
	// re-opened, then compare each with etcd at its revision.
	var snaps []*Snapshot
	seen := make(map[int64]bool)
	check := func(s *Snapshot) {
		if !seen[s.Rev()] {
			seen[s.Rev()] = true
			snaps = append(snaps, s)
		}
	}
	// follow samples r's snapshots until it holds a write made now.
	follow := func(what string, r *Resource) {
		k, v := configMap(t, "ns", "mark", nil, 100, uint64(len(snaps)))
		mark := put(t, cli, k, v)
		deadline := time.Now().Add(15 * time.Second)
		for {
			s, err := r.Snapshot(ctx, ReadOptions{})
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			check(s)
			if s.Rev() >= mark {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the cache is at revision %d, etcd at %d", what, s.Rev(), mark)
			}
			runtime.Gosched()
		}
	}
	const rounds = 40
	for round := range rounds {
		// A fill: the resource's watch starts after its replay.
		c.Drop(cmSpec.Prefix)
		r = c.Resource(cmSpec)
		waitState(t, r, StateReady)
		follow(fmt.Sprintf("fill %d", round), r)
		// An endpoint move: every watch re-opens.
		moves.move()
		follow(fmt.Sprintf("move %d", round), r)
	}
	cancel()
	wg.Wait()
	for _, s := range snaps {
		want, keys, _ := etcdState(t, cli, cmPrefix, s.Rev())
		if err := diffSnapshot(s, want, keys); err != nil {
			t.Errorf("snapshot at revision %d differs from etcd: %v", s.Rev(), err)
		}
	}
	checked := len(snaps)
	// A consistent read still answers from the cache (it may fall back
	// to etcd while the cache waits for progress: asked again).
	var s *Snapshot
	poll(t, "consistent read from the cache", func() (err error) {
		s, err = r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent})
		return err
	})
	want, keys, _ := etcdState(t, cli, cmPrefix, s.Rev())
	if err := diffSnapshot(s, want, keys); err != nil {
		t.Fatalf("consistent read at revision %d differs from etcd: %v", s.Rev(), err)
	}
	t.Logf("%d snapshots checked across %d fills and moves, %d writes meanwhile", checked, rounds, writes.Load())
	// Each re-open closed the watch it replaced, with its stream.
	c.Close()
	poll(t, "goroutines return to the count before New", func() error {
		if n := runtime.NumGoroutine(); n > goroutines {
			return fmt.Errorf("%d goroutines, %d before", n, goroutines)
		}
		return nil
	})
}

// requestProgressAll asks etcd for a progress notification for every
// resource of c.
func requestProgressAll(c *Cache) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.resources {
		r.requestProgress()
	}
}

// TestProgressReachesEachResource: every ready resource, each with its own
// etcd watch stream, learns etcd's revision from progress notifications
// (periodic, and asked for by a consistent read) when only other keys are
// written, and serves consistent reads from the cache.
func TestProgressReachesEachResource(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	c := newTestCache(t, cli, func(c *Config) {
		c.ProgressInterval = 50 * time.Millisecond
	})
	rs := make([]*Resource, 5)
	for i := range rs {
		rs[i] = c.Resource(Spec{Name: "r" + strconv.Itoa(i), Prefix: fmt.Sprintf("/registry/r%d/", i), Namespaced: true})
		put(t, cli, fmt.Sprintf("/registry/r%d/ns/a", i), []byte("a"))
	}
	for _, r := range rs {
		waitState(t, r, StateReady)
	}
	if n := c.watchOpens.Get(); n != uint64(len(rs)) {
		t.Fatalf("%d etcd watches opened for %d resources, want one each", n, len(rs))
	}
	// Periodic progress: each resource reaches a revision written
	// elsewhere.
	rev := put(t, cli, "/registry/other/ns/x", []byte("x"))
	for _, r := range rs {
		poll(t, r.name+" reaches etcd's revision", func() error {
			if got := r.Revision(); got < rev {
				return fmt.Errorf("at revision %d, etcd at %d", got, rev)
			}
			return nil
		})
	}
	// On demand: consistent reads, each after a write elsewhere (one that
	// falls back to etcd while the cache waits is asked again).
	for _, r := range rs {
		rev := put(t, cli, "/registry/other/ns/x", []byte(r.name))
		hits := r.hits.Get()
		var s *Snapshot
		poll(t, r.name+": consistent read from the cache", func() (err error) {
			s, err = r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent})
			return err
		})
		if s.Rev() < rev || s.Len() != 1 || r.hits.Get() != hits+1 {
			t.Fatalf("%s: consistent read at revision %d with %d objects (hits %d -> %d), want >= %d with 1 from the cache",
				r.name, s.Rev(), s.Len(), hits, r.hits.Get(), rev)
		}
	}
	if c.progressRequests.Get() == 0 {
		t.Fatal("no progress request counted")
	}
}
