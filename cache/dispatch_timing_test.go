package cache

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// BenchmarkDispatch measures what one write to a cached resource costs the
// watch cache's dispatch with one watcher that selects the written object
// (fieldSelector=metadata.name=target) and N that select names never
// written: the kubelet's shape (one watch per mounted Secret or
// ConfigMap). Every watcher is a real Watcher with a goroutine in Next,
// as the proxy runs it; each write goes through Resource.apply, the code
// the resource's etcd watch calls (the etcd round trip is left out: it
// costs the same at every N). An op is one write, its delivery to the
// matching watcher, and every other watcher done with it (settled), so
// ns/op is the whole dispatch; cpu-ns/op is the process's CPU time
// (user+system, getrusage) per write, which on 2 cores counts the work
// of every goroutine woken.
//
// N = 100,000 holds 100,000 goroutines (about 1 GB before indexed
// dispatch): it runs only with LAZYAPI_BENCH_DISPATCH_MAX=100000.
//
//	nice go test -run '^$' -bench BenchmarkDispatch -benchtime 200x -count 6 ./cache/
func BenchmarkDispatch(b *testing.B) {
	limit := 10000
	if s := os.Getenv("LAZYAPI_BENCH_DISPATCH_MAX"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatalf("LAZYAPI_BENCH_DISPATCH_MAX=%q: %v", s, err)
		}
		limit = n
	}
	srv := etcdtest.Start(b)
	for _, n := range []int{10, 100, 1000, 10000, 100000} {
		if n > limit {
			b.Logf("N=%d skipped: set LAZYAPI_BENCH_DISPATCH_MAX=%d to run it", n, n)
			continue
		}
		b.Run(fmt.Sprintf("idle=%d", n), func(b *testing.B) { benchDispatch(b, srv.Client, n) })
	}
}

// nameWatch returns the options of a watch of the ConfigMap named name in
// any namespace, from now, as the proxy builds them for
// fieldSelector=metadata.name=name.
func nameWatch(name string) WatchOptions {
	return WatchOptions{Filter: func(a Attrs) bool { return a.Name() == name },
		Index: []FieldTerm{{Path: "metadata.name", Value: name}}}
}

func benchDispatch(b *testing.B, cli *clientv3.Client, idle int) {
	c := newTestCache(b, cli, nil)
	r := c.Resource(Spec{Name: "configmaps-" + strconv.Itoa(idle), Prefix: cmPrefix, Namespaced: true})
	waitState(b, r, StateReady)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	serve := func(w *Watcher, got chan<- int64) {
		defer wg.Done()
		defer w.Close()
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				return
			}
			if got != nil {
				got <- ev.Rev
			}
		}
	}
	got := make(chan int64, 1)
	w, err := r.Watch(ctx, nameWatch("target"))
	if err != nil {
		b.Fatal(err)
	}
	wg.Add(1)
	go serve(w, got)
	for i := range idle {
		w, err := r.Watch(ctx, nameWatch(fmt.Sprintf("idle-%06d", i)))
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go serve(w, nil)
	}
	var vals [2][]byte
	var key string
	for i := range vals {
		key, vals[i] = configMap(b, "ns", "target", map[string]string{"app": "web"}, 256, uint64(i))
	}
	d := r.deriver()
	// Revisions far past etcd's: the resource's own watch (idle, as
	// nothing is written to etcd) and its progress notifications leave
	// them alone.
	r.mu.RLock()
	rev := r.rev + 1<<30
	r.mu.RUnlock()
	write := func() int64 {
		rev++
		ev := &clientv3.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(key), Value: vals[rev%2], ModRevision: rev}}
		if err := r.apply(d, []*clientv3.Event{ev}); err != nil {
			b.Fatal(err)
		}
		return rev
	}
	wait := func(want int64) {
		timeout := time.NewTimer(time.Minute)
		defer timeout.Stop()
		select {
		case rv := <-got:
			if rv != want {
				b.Fatalf("the matching watcher got revision %d, want %d", rv, want)
			}
		case <-timeout.C:
			b.Fatalf("the matching watcher got nothing in a minute (revision %d)", want)
		}
		for i := 0; !settled(r); i++ {
			// Polling the watchers, not synchronising: yield first,
			// then sleep (a sleep costs ~50 µs of latency per write).
			if i < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	// Warm up: every goroutine parked in Next once.
	for range 3 {
		wait(write())
	}
	runtime.GC() // the setup's garbage is not the writes' cost
	start := cpuTime()
	b.ResetTimer()
	for range b.N {
		wait(write())
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
	if n := r.nwatch.Load(); n != int64(idle+1) {
		b.Fatalf("%d watchers left, want %d (lagging: cut)", n, idle+1)
	}
}

// settled reports whether every watcher of r has taken every event of
// the history that can concern it: the watchers on the scan path read
// every event; an indexed one, those queued for it.
func settled(r *Resource) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	head := r.ring.head()
	for w := range r.scan {
		if w.cursor.Load() < head {
			return false
		}
	}
	for w := range r.busy {
		if _, ok := w.pendingLocked(head); ok {
			return false
		}
	}
	return true
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
