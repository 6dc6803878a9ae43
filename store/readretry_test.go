package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/failovertest"
	"github.com/lazyapi/lazyapi/store"
)

// TestReadRetryInFlight: on a real 3-member etcd, a lazyapi-like client
// reads from its preferred member (a follower) with several readers at
// once; the member is partitioned from the others, healed, stopped and
// restarted. The reads in flight to it when the client moves away are
// re-sent on the members read from next (ReadRetry): none fails unless
// its whole call bound passed before the move, and the retry happened.
//
// With LAZYAPI_FAILOVERBENCH=1 the same run is made without ReadRetry
// first, and both are reported (bench/RESULTS.md, "## etcd faults:
// in-flight failover").
func TestReadRetryInFlight(t *testing.T) {
	if os.Getenv("LAZYAPI_FAILOVERBENCH") == "1" {
		var runs [][]phaseStats
		for _, retry := range []bool{false, true} {
			t.Run(fmt.Sprintf("retry=%v", retry), func(t *testing.T) { runs = append(runs, inFlightRun(t, retry)) })
		}
		for _, r := range runs {
			for _, p := range r {
				t.Log(p)
			}
		}
		return
	}
	for _, p := range inFlightRun(t, true) {
		t.Log(p)
		if p.retries == 0 && p.name == "partitioned" {
			t.Errorf("%s: no read was re-sent although the reads in flight to the member could not answer", p.name)
		}
		for _, e := range p.unexpected {
			t.Errorf("%s: %s", p.name, e)
		}
	}
}

// read is one read a reader made.
type read struct {
	start, end time.Time
	err        error
}

// phaseStats are the reads in flight across one fault: begun before the
// client moved away from the member, ended after the fault.
type phaseStats struct {
	name       string
	retry      bool
	moved      time.Duration // from the fault to the client's move
	inFlight   int
	errs       int
	p50, p99   time.Duration
	max        time.Duration
	retries    uint64
	unexpected []string // failures the retry should have prevented
}

func (p phaseStats) String() string {
	return fmt.Sprintf("retry=%v %-12s moved after %5.2fs; reads in flight across it: %3d, errors %2d, p50 %6.2fs p99 %6.2fs max %6.2fs; reads re-sent %d",
		p.retry, p.name, p.moved.Seconds(), p.inFlight, p.errs, p.p50.Seconds(), p.p99.Seconds(), p.max.Seconds(), p.retries)
}

func inFlightRun(t *testing.T, retry bool) []phaseStats {
	cl := etcdtest.StartCluster(t, 3)
	eps := cl.Endpoints()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	leader := cl.Leader(ctx)
	if leader < 0 {
		t.Fatal("no leader")
	}
	p := (leader + 1) % 3 // a follower: its loss needs no election
	for i := range 200 {
		if _, err := cl.Client.Put(ctx, fmt.Sprintf("/rr/k%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}

	ms := metrics.NewSet()
	var rr *store.ReadRetry
	if retry {
		rr = store.NewReadRetry(ms)
	}
	s := failovertest.Start(t, store.FailoverConfig{Endpoints: eps, Preferred: eps[p], Retry: rr, SlowMargin: -1})
	cli, f := s.Client, s.Failover
	// The production bound on one etcd call (store.Config.CallTimeout).
	st := store.New(cli, store.Config{PageSize: 50})
	callTimeout := st.Config().CallTimeout

	var (
		mu    sync.Mutex
		reads []read
		more  = make(chan struct{}, 1)
	)
	readCtx, stopReads := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; readCtx.Err() == nil; i++ {
				start := time.Now()
				var err error
				if (i+r)%2 == 0 {
					_, _, _, err = st.Get(readCtx, fmt.Sprintf("/rr/k%03d", (i*7+r)%200), 0)
				} else {
					_, err = st.List(readCtx, store.ListOptions{Prefix: "/rr/"}, func(store.KV) (bool, error) { return false, nil })
				}
				if readCtx.Err() != nil {
					return
				}
				mu.Lock()
				reads = append(reads, read{start: start, end: time.Now(), err: err})
				mu.Unlock()
				select {
				case more <- struct{}{}:
				default:
				}
			}
		}()
	}
	defer func() { stopReads(); wg.Wait() }()
	// readsAfter waits until n reads begun after t ended.
	readsAfter := func(what string, t0 time.Time, n int) {
		t.Helper()
		deadline := time.After(60 * time.Second)
		for {
			mu.Lock()
			k := 0
			for _, r := range reads {
				if r.start.After(t0) && r.err == nil {
					k++
				}
			}
			mu.Unlock()
			if k >= n {
				return
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("%s: %d of %d reads within 60s", what, k, n)
			}
		}
	}
	// waitMove waits until the client reads from the preferred member
	// (or not) and returns when it moved.
	waitMove := func(what string, onPreferred bool) time.Time {
		t.Helper()
		s.Wait(t, what, 30*time.Second, func() bool { return f.Status().OnPreferred == onPreferred })
		return f.Status().Since
	}
	retries := func() uint64 {
		if rr == nil {
			return 0
		}
		return ms.GetOrCreateCounter("lazyapi_etcd_read_retries_total").Get()
	}
	var out []phaseStats
	phase := func(name string, fault time.Time, moved time.Time, retries0 uint64) {
		mu.Lock()
		defer mu.Unlock()
		ps := phaseStats{name: name, retry: retry, moved: moved.Sub(fault), retries: retries() - retries0}
		var lat []time.Duration
		for _, r := range reads {
			if r.start.After(moved) || r.end.Before(fault) {
				continue
			}
			ps.inFlight++
			lat = append(lat, r.end.Sub(r.start))
			if r.err == nil {
				continue
			}
			ps.errs++
			// With the retry, a read fails only if its call bound passed
			// before the move (a second's slack for a busy machine).
			if !errors.Is(r.err, store.ErrUnavailable) || r.start.Add(callTimeout-time.Second).After(moved) {
				ps.unexpected = append(ps.unexpected, fmt.Sprintf("read begun %.2fs before the move failed after %.2fs: %v",
					moved.Sub(r.start).Seconds(), r.end.Sub(r.start).Seconds(), r.err))
			}
		}
		slices.Sort(lat)
		if n := len(lat); n > 0 {
			ps.p50, ps.p99, ps.max = lat[n/2], lat[(n*99)/100], lat[n-1]
		}
		out = append(out, ps)
	}

	readsAfter("start", time.Time{}, 50)
	r0, t0 := retries(), time.Now()
	cl.Partition(p)
	m := waitMove("partitioned", false)
	readsAfter("partitioned", m, 50)
	phase("partitioned", t0, m, r0)
	cl.Heal(p)
	readsAfter("healed", waitMove("healed", true), 50)

	r0, t0 = retries(), time.Now()
	stopped := make(chan struct{})
	go func() { defer close(stopped); cl.Stop(p) }()
	m = waitMove("stopped", false)
	readsAfter("stopped", m, 50)
	<-stopped
	phase("stopped", t0, m, r0)
	if err := cl.Start(p); err != nil {
		t.Fatal(err)
	}
	readsAfter("restarted", waitMove("restarted", true), 50)
	return out
}
