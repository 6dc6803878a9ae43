package bench

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestKubeletLatencyFromAck runs the kubelet scenario's writer on a real
// etcd and its watch reader against the reference server (which serves
// the Pods' and Secrets' watches from the same etcd; it ignores field
// selectors, so node 0's Pod watch receives every Pod's events): every
// write of the window is acknowledged under its revision, every timed
// event is matched to its write by resourceVersion, and the latency from
// the acknowledgement is no larger than the one from the stamp.
func TestKubeletLatencyFromAck(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := DefaultKubeletConfig()
	cfg.Nodes, cfg.PodsPerNode, cfg.Replicas, cfg.NodesPerDeployment, cfg.SecretsPerPod, cfg.ConfigMapsPerPod = 2, 2, 2, 2, 1, 0
	cfg.LeaseEvery, cfg.PodUpdateEvery, cfg.RolloutEvery, cfg.Duration = time.Second, time.Second, time.Second, 3*time.Second
	cfg.SameAddress = true
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	tp := newKubeletTopology(cfg)
	w := newKubeletWriter(srv.Client, cfg, tp)
	acks := newKubeletAcks(w.windowWrites(cfg.Duration))
	w.acks = acks
	r0, err := w.seed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(NewRefServer(srv.Client, "/registry"))
	defer hs.Close()
	cl := newKubeletClients(Target{Name: "reference", URL: hs.URL}, cfg, tp, r0)
	cl.acks = acks
	defer cl.close()

	paths := cl.paths(0) // Pods, Node, Lease, the Secrets of Deployments 0 and 1
	if len(paths) != 5 || !strings.Contains(paths[3], "/secrets?") || !strings.Contains(paths[4], "/secrets?") {
		t.Fatalf("node 0's watches %q", paths)
	}
	sem := make(chan struct{}, 4)
	var tried sync.WaitGroup
	for _, p := range []string{paths[0], paths[3], paths[4]} {
		tried.Add(1)
		cl.wg.Go(func() { cl.stream(0, p, sem, tried.Done) })
	}
	tried.Wait()
	if n := cl.opened.Load(); n != 3 {
		t.Fatalf("%d of 3 watches open: %s", n, cl.firstErr())
	}

	var status, rollouts, rotations, leases int64
	for _, op := range w.schedule(cfg.Duration) {
		switch op.kind {
		case 'p':
			status++
		case 'r':
			rollouts++
		case 's':
			rotations++
		case 'l':
			leases++
		}
	}
	// Every Pod write reaches the Pod watch (a rollout's three, one a
	// DELETED without a stamp), every rotation one Secret watch.
	expected := status + 3*rollouts + rotations
	timed := status + 2*rollouts + rotations

	cl.measure(true)
	start := time.Now()
	writes, _ := w.run(ctx, cfg.Duration)
	cl.drain(ctx, expected, 30*time.Second)
	cl.measure(false)
	if e := w.firstErr(); e != "" {
		t.Fatal(e)
	}
	var r KubeletResult
	cl.result(&r)
	t.Logf("%d writes, %d events; from the stamp %+v; from the ack %+v (%d before the ack); etcd %+v; slowest %+v",
		writes, r.Delivered, r.Latency, r.LatencyFromAck, r.AckNegative, r.EtcdWrite, r.SlowestFromAck)

	if want := leases + status + 3*rollouts + rotations; writes != want || int64(w.windowWrites(cfg.Duration)) != want {
		t.Fatalf("%d writes (schedule: %d), want %d", writes, w.windowWrites(cfg.Duration), want)
	}
	if r.Delivered != expected || r.Latency.Count != timed {
		t.Fatalf("%d events delivered (%d timed), want %d (%d): %s", r.Delivered, r.Latency.Count, expected, timed, r.FirstError)
	}
	if r.LatencyFromAck.Count != timed || r.AckUnmatched != 0 || r.AckOverflow != 0 || r.AckNegative > timed {
		t.Errorf("from the ack: %d events, %d unmatched, %d overflow, %d negative; want %d, all matched", r.LatencyFromAck.Count, r.AckUnmatched, r.AckOverflow, r.AckNegative, timed)
	}
	if r.EtcdWrite.Count != writes || r.EtcdWrite.Max <= 0 {
		t.Errorf("etcd write latency of %d writes (max %.3f ms), want %d", r.EtcdWrite.Count, r.EtcdWrite.Max, writes)
	}
	// Each event's ack is after its stamp, so its latency from the ack is
	// at most the one from the stamp, and so is every percentile.
	if r.LatencyFromAck.P50 > r.Latency.P50 || r.LatencyFromAck.P99 > r.Latency.P99 || r.LatencyFromAck.Max > r.Latency.Max || r.LatencyFromAck.Mean > r.Latency.Mean {
		t.Errorf("from the ack %+v exceeds from the stamp %+v", r.LatencyFromAck, r.Latency)
	}
	if int64(len(r.SlowestFromAck)) != min(kubeletSlowest, timed) {
		t.Fatalf("%d slowest events, want %d", len(r.SlowestFromAck), min(kubeletSlowest, timed))
	}
	for i, e := range r.SlowestFromAck {
		if i > 0 && e.FromAckMillis > r.SlowestFromAck[i-1].FromAckMillis {
			t.Errorf("slowest events out of order at %d: %+v", i, r.SlowestFromAck)
		}
		if e.Arrived.Before(start) || e.Arrived.After(time.Now()) || e.Revision <= r0 || e.EtcdMillis <= 0 || (e.FromAckMillis > 0 && e.FromStampMillis < e.EtcdMillis) || e.AtMillis <= 0 || e.AtMillis > float64(cfg.Duration+30*time.Second)/1e6 ||
			(e.Write != "pod status" && e.Write != "secret rotation" && !strings.HasPrefix(e.Write, "rollout: pod ")) {
			t.Errorf("slow event %+v", e)
		}
	}
	if r.SlowestFromAck[0].FromAckMillis > r.LatencyFromAck.Max*1.01 || r.SlowestFromAck[0].FromAckMillis < r.LatencyFromAck.Max*0.99-0.002 {
		t.Errorf("slowest %.3f ms, histogram max %.3f ms", r.SlowestFromAck[0].FromAckMillis, r.LatencyFromAck.Max)
	}
}

// TestKubeletAcksOrder checks the cases the run above meets only by
// chance: an event that arrives before the writer records the
// acknowledgement is matched at the end; one that arrives before the
// acknowledgement's time counts as 0 and as negative; one with no write is
// unmatched; writes past the window's size are refused.
func TestKubeletAcksOrder(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	a := newKubeletAcks(2)
	a.begin(t0)
	a.arrived(7, ms(10)) // before its ack is recorded
	a.acked(7, ms(0), ms(5), 'p')
	a.acked(8, ms(0), ms(3), 'l')
	a.arrived(8, ms(1)) // before the ack's time
	a.acked(9, ms(0), ms(1), 'l')
	a.arrived(10, ms(2)) // no such write
	r := a.finish()
	if r.fromAck.Count != 2 || r.negative != 1 || r.unmatched != 1 || r.overflow != 1 || r.etcd.Count != 3 {
		t.Fatalf("%+v", r)
	}
	if r.fromAck.Max < 4.99 || r.fromAck.Max > 5.01 || r.fromAck.P50 > 0.002 {
		t.Errorf("from the ack %+v, want 0 and 5 ms", r.fromAck)
	}
	if len(r.slowest) != 2 || r.slowest[0].Revision != 7 || r.slowest[0].FromStampMillis != 10 || r.slowest[0].EtcdMillis != 5 || r.slowest[0].Write != "pod status" || r.slowest[1].Revision != 8 {
		t.Errorf("slowest %+v", r.slowest)
	}
}
