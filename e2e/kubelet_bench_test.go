package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestLazybenchKubelet runs lazybench's kubelet scenario small (4 nodes,
// 13 watches each) against the lazyapi binary on an embedded etcd: every
// watch opens, every event the writes must deliver is delivered and
// counted, none cut, the latencies recorded, the server's CPU and memory
// read, and one HTTP/1.1 connection per watch counted.
func TestLazybenchKubelet(t *testing.T) {
	etcd := etcdtest.Start(t)
	cfg := bench.KubeletConfig{Repo: "..", Out: t.TempDir(), EtcdServers: []string{etcd.Endpoint}, Prefix: "/registry", LazyAPIBin: plainBin,
		Nodes: 4, PodsPerNode: 4, Replicas: 4, NodesPerDeployment: 2, SecretsPerPod: 3, ConfigMapsPerPod: 2,
		LeaseEvery: time.Second, PodUpdateEvery: 2 * time.Second, RolloutEvery: 3 * time.Second, Duration: 6 * time.Second, Settle: time.Second,
		SkipKube: true}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := bench.RunKubelet(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 {
		t.Fatalf("%d results, want lazyapi's; notes %q", len(rep.Results), rep.Notes)
	}
	r := rep.Results[0]
	t.Logf("%+v", r)
	if r.Watches != 4*13 || r.Opened != r.Watches {
		t.Errorf("%d of %d watches opened, want 52", r.Opened, r.Watches)
	}
	// 24 lease renewals, 48 Pod status updates, 2 rollouts of 4 Pods (3
	// events each) and 2 Secret rotations watched by 2 nodes each.
	if want := int64(24 + 48 + 2*4*3 + 2*2); r.Expected != want || r.Delivered != r.Expected {
		t.Errorf("%d events delivered, %d expected, want %d", r.Delivered, r.Expected, want)
	}
	if r.Latency.Count != r.Delivered-2*4 || r.Latency.P99 <= 0 { // DELETED events carry no write time
		t.Errorf("latency of %d events (p99 %.1f ms), want %d", r.Latency.Count, r.Latency.P99, r.Delivered-8)
	}
	// The same events timed from etcd's acknowledgement of their write,
	// matched by resourceVersion; etcd's write latency for every write.
	if r.LatencyFromAck.Count != r.Latency.Count || r.AckUnmatched != 0 || r.LatencyFromAck.P99 > r.Latency.P99 || r.EtcdWrite.Count != r.Writes {
		t.Errorf("from etcd's ack: %d events (%d unmatched), p99 %.1f ms (from the stamp %.1f ms); etcd write latency of %d writes, want %d",
			r.LatencyFromAck.Count, r.AckUnmatched, r.LatencyFromAck.P99, r.Latency.P99, r.EtcdWrite.Count, r.Writes)
	}
	if r.Cut != 0 || r.Refused != 0 || r.ErrorEvents != 0 || r.FirstError != "" {
		t.Errorf("cut %d, refused %d, ERROR %d: %s", r.Cut, r.Refused, r.ErrorEvents, r.FirstError)
	}
	if r.Connections < r.Watches || r.CPU <= 0 || r.IdleRSS <= 0 || r.PeakRSS <= 0 {
		t.Errorf("connections %d (want ≥ %d), CPU %s, RSS idle %d peak %d", r.Connections, r.Watches, r.CPU, r.IdleRSS, r.PeakRSS)
	}
}
