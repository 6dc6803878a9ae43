package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/failovertest"
	"github.com/lazyapi/lazyapi/store"
)

// TestFailover: on a real 3-member etcd, a client whose preferred member
// is m0 reads from m0 alone, moves to m1 and m2 when m0 stops and when m0
// is partitioned from the others (up, but without a leader), reads
// linearizably meanwhile, and moves back once m0 answers again. The
// latency choice (TestFailoverSlowMember) is off: the test checks the
// client's exact endpoints.
func TestFailover(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	eps := cl.Endpoints()
	s := failovertest.Start(t, store.FailoverConfig{Preferred: eps[0], Endpoints: eps, SlowMargin: -1})
	cli := s.Client
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	if got := cli.Endpoints(); !slices.Equal(got, eps[:1]) {
		t.Fatalf("endpoints at start = %v, want the preferred member %v", got, eps[:1])
	}
	// waitMove waits for the next switch and checks where the client reads.
	waitMove := func(what string, onPreferred bool, bound time.Duration) {
		t.Helper()
		d := s.Wait(t, what, bound, func() bool { return s.Failover.Status().OnPreferred == onPreferred })
		gen, _ := s.Failover.Moved()
		t.Logf("%s: moved in %s (switch %d)", what, d.Round(10*time.Millisecond), gen)
		want := eps[:1]
		if !onPreferred {
			want = eps[1:]
		}
		if got := cli.Endpoints(); !slices.Equal(got, want) {
			t.Fatalf("%s: endpoints %v, want %v", what, got, want)
		}
		// A linearizable read answers and sees the latest write.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var pr *clientv3.PutResponse
		var err error
		for {
			// Writes go through the cluster's own client (every endpoint).
			pr, err = cl.Client.Put(wctx, "/failover", what)
			if err == nil || wctx.Err() != nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("%s: write: %v", what, err)
		}
		gr, err := cli.Get(wctx, "/failover")
		if err != nil {
			t.Fatalf("%s: linearizable read through the failover client: %v", what, err)
		}
		if gr.Header.Revision < pr.Header.Revision || string(gr.Kvs[0].Value) != what {
			t.Fatalf("%s: stale read: revision %d value %q after a write at %d", what, gr.Header.Revision, gr.Kvs[0].Value, pr.Header.Revision)
		}
	}
	bound := 10 * time.Second

	cl.Stop(0)
	waitMove("preferred member stopped", false, bound)
	if err := cl.Start(0); err != nil {
		t.Fatal(err)
	}
	waitMove("preferred member restarted", true, bound)

	cl.Partition(0)
	waitMove("preferred member partitioned", false, bound)
	// The partition is real: the member still answers serializable reads,
	// from before the write waitMove made.
	local, err := clientv3.New(clientv3.Config{Endpoints: eps[:1], DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if gr, err := local.Get(ctx, "/failover", clientv3.WithSerializable()); err != nil {
		t.Fatalf("serializable read on the partitioned member: %v", err)
	} else if len(gr.Kvs) == 1 && string(gr.Kvs[0].Value) == "preferred member partitioned" {
		t.Fatal("the partitioned member has the write made after the partition")
	}
	cl.Heal(0)
	waitMove("partition healed", true, bound)
}

// TestFailoverRoundRobin: without a preferred member the client reads from
// every member that answers linearizable reads: a partitioned member is
// left out until it heals (the latency choice off, as in TestFailover).
func TestFailoverRoundRobin(t *testing.T) {
	cl := etcdtest.StartCluster(t, 3)
	eps := cl.Endpoints()
	s := failovertest.Start(t, store.FailoverConfig{Endpoints: eps, SlowMargin: -1})
	cli := s.Client
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wait := func(what string, want []string) {
		t.Helper()
		d := s.Wait(t, what, 10*time.Second, func() bool { return slices.Equal(cli.Endpoints(), want) })
		t.Logf("%s: endpoints %v after %s", what, want, d.Round(10*time.Millisecond))
	}
	wait("start", eps)
	cl.Partition(1)
	wait("m1 partitioned", []string{eps[0], eps[2]})
	if st := s.Failover.Status(); !st.Degraded() || !slices.Equal(st.Down, eps[1:2]) || st.OnPreferred {
		t.Errorf("status with m1 partitioned: %+v", st)
	}
	if _, err := cli.Get(ctx, "/x"); err != nil {
		t.Errorf("linearizable read with m1 partitioned: %v", err)
	}
	cl.Heal(1)
	wait("healed", eps)
}
