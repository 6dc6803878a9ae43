package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Cluster is the etcd cluster under the server: the methods of
// internal/testing/etcdtest.Cluster and internal/embedetcd.Cluster.
type Cluster interface {
	// Endpoints returns every member's client URL.
	Endpoints() []string
	// Stop kills member i; Start starts it again on its data.
	Stop(i int)
	Start(i int) error
	// Partition cuts member i off from its peers; Heal ends that.
	Partition(i int)
	Heal(i int)
	// Leader returns the leader's index, -1 when none answers before ctx ends.
	Leader(ctx context.Context) int
}

// Fault kinds.
const (
	FaultCompact    = "compact"      // compaction to a recent revision
	FaultCompactAll = "compact-head" // compaction to etcd's head: past what watchers and continue tokens need
	FaultDefrag     = "defrag"       // defragmentation of a member
	FaultKillServer = "kill-server"  // SIGKILL of the server under test, restarted at once
	FaultKillMember = "kill-member"  // an etcd member killed, restarted after a few seconds
	FaultKillLeader = "kill-leader"  // the leader killed (a leader change), restarted after a few seconds
	FaultPartition  = "partition"    // a member cut off from its peers for a few seconds
	// FaultPartitionServed cuts off the member the server reads from (the
	// first: a run with it starts lazyapi with --etcd-preferred-server on
	// it) for 4-7 s, long enough for lazyapi's failover to leave it: its
	// etcd client moves to the others and back, and the watch cache
	// re-opens every resource's etcd watch twice, each time with the
	// changes written meanwhile to catch up. The harness's writers then
	// use the other members only, so that writes go on.
	FaultPartitionServed = "partition-served"
	FaultBigBurst        = "burst" // large objects written and deleted at once, past the watch cache's budget
	// FaultBurstRestart writes 200 Secrets of 1 MiB (namespace burst),
	// SIGKILLs the server and restarts it while they exist, and deletes
	// them 5 s later: lazyapi's next fill of Secrets then has 200 MiB of
	// history in its window, which its replay must not read at once (the
	// byte bound of f476bc6; --memory-limit is checked).
	FaultBurstRestart = "burst-restart"
	faultMemberKinds  = "member"
)

// AllFaults are every fault kind.
var AllFaults = []string{FaultCompact, FaultCompactAll, FaultDefrag, FaultKillServer, FaultKillMember, FaultKillLeader, FaultPartition, FaultPartitionServed, FaultBigBurst, FaultBurstRestart}

// DefaultFaults are the fault kinds a run injects by default: all but the
// member kills. An embedded etcd member stopped abruptly while it serves
// can crash the harness's process (etcd's embed answering a range on the
// backend its HardStop closed: a nil bbolt transaction, seen twice in
// 15-minute runs), so member kills run only when asked for, and lazybench
// stops members as etcd's own shutdown does (embedetcd.Cluster.Graceful).
var DefaultFaults = []string{FaultCompact, FaultCompactAll, FaultDefrag, FaultKillServer, FaultPartition, FaultBigBurst}

// fault is one injected fault of the schedule.
type fault struct {
	At     time.Duration `json:"at"` // after the traffic started
	Kind   string        `json:"kind"`
	Member int           `json:"member"`
	Arg    int64         `json:"arg"`
	Took   time.Duration `json:"took,omitempty"`
	Result string        `json:"result,omitempty"`
}

func (f fault) String() string {
	s := fmt.Sprintf("%8s %-12s member %d arg %d", f.At.Round(time.Millisecond), f.Kind, f.Member, f.Arg)
	if f.Result != "" {
		s += ": " + f.Result
	}
	return s
}

// schedule draws the faults of a run from its seed: at random times about
// every `every`, kinds drawn from kinds.
func schedule(seed uint64, d, every time.Duration, kinds []string, members int) []fault {
	if len(kinds) == 0 || every <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, 0xfa017))
	var out []fault
	for t := every / 2; ; {
		t += time.Duration(float64(every) * (0.5 + rng.Float64()))
		if t >= d-every/2 {
			return out
		}
		out = append(out, fault{At: t, Kind: kinds[rng.IntN(len(kinds))], Member: rng.IntN(max(members, 1)), Arg: rng.Int64N(100)})
	}
}

// inject runs the schedule from start; every fault is over (members
// restarted, partitions healed) when it returns.
func (h *harness) inject(ctx context.Context, start time.Time) {
	for i := range h.faults {
		f := &h.faults[i]
		select {
		case <-ctx.Done():
			h.faults = h.faults[:i]
			return
		case <-time.After(time.Until(start.Add(f.At))):
		}
		t0 := time.Now()
		f.Result = h.injectOne(ctx, f)
		f.Took = time.Since(t0)
		h.stats.faults.Add(1)
		h.logf("fault %s", f)
	}
}

func (h *harness) injectOne(ctx context.Context, f *fault) string {
	hold := time.Duration(1000+f.Arg*30) * time.Millisecond // 1-4 s
	cli := h.cli
	switch f.Kind {
	case FaultCompact, FaultCompactAll:
		rev := h.model.seen()
		if f.Kind == FaultCompact {
			rev -= f.Arg * 3
		}
		if rev <= h.compacted.Load() {
			return "nothing to compact"
		}
		h.setCompacted(rev)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		// As kube-apiserver's compactor: the revision under
		// compact_rev_key first (its watch caches follow it), then etcd's
		// compaction (k8s.io/apiserver pkg/storage/etcd3/compact.go).
		if _, err := cli.Put(cctx, "compact_rev_key", strconv.FormatInt(rev, 10)); err != nil {
			return fmt.Sprintf("compact_rev_key %d: %v", rev, err)
		}
		if _, err := cli.Compact(cctx, rev); err != nil {
			return fmt.Sprintf("compact %d: %v", rev, err)
		}
		return fmt.Sprintf("compacted at %d", rev)
	case FaultDefrag:
		eps := h.cluster.Endpoints()
		ep := eps[f.Member%len(eps)]
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := cli.Defragment(cctx, ep); err != nil {
			return fmt.Sprintf("defragment %s: %v", ep, err)
		}
		return "defragmented " + ep
	case FaultKillServer:
		// Before and after: a request sent in between may meet either
		// process, and one sent after meets the new one.
		h.gen.Add(1)
		ok, err := h.server.Kill(ctx)
		h.gen.Add(1)
		if !ok {
			return "server cannot be killed"
		}
		if err != nil {
			h.fatal(fmt.Errorf("cannot restart the server: %w", err))
			return err.Error()
		}
		return "killed and restarted"
	case FaultKillMember, FaultKillLeader:
		i := f.Member % len(h.cluster.Endpoints())
		if f.Kind == FaultKillLeader {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			i = h.cluster.Leader(lctx)
			cancel()
			if i < 0 {
				return "no leader"
			}
		}
		h.cluster.Stop(i)
		sleep(ctx, hold)
		if err := h.cluster.Start(i); err != nil {
			h.fatal(fmt.Errorf("cannot restart etcd member %d: %w", i, err))
			return err.Error()
		}
		return fmt.Sprintf("member %d down for %s", i, hold)
	case FaultPartition, FaultPartitionServed:
		i := f.Member % len(h.cluster.Endpoints())
		if f.Kind == FaultPartitionServed {
			i, hold = 0, hold+3*time.Second
		}
		h.cluster.Partition(i)
		sleep(ctx, hold)
		h.cluster.Heal(i)
		return fmt.Sprintf("member %d cut off for %s", i, hold)
	case FaultBigBurst:
		keys, err := h.burst(ctx, int(f.Arg%8)+4, 512<<10, "")
		return h.unburst(ctx, keys, err)
	case FaultBurstRestart:
		keys, err := h.burst(ctx, 200, 1<<20-4<<10, "burst")
		if err == nil {
			h.gen.Add(1)
			_, err = h.server.Kill(ctx)
			h.gen.Add(1)
			if err != nil {
				h.fatal(fmt.Errorf("cannot restart the server: %w", err))
			}
			sleep(ctx, 5*time.Second) // the readers' Secrets fill it
		}
		return h.unburst(ctx, keys, err) + ", the server killed and restarted between"
	}
	return "unknown fault"
}

// burst writes n Secrets of size bytes (in namespace ns, or the
// traffic's); unburst deletes them.
func (h *harness) burst(ctx context.Context, n, size int, ns string) ([]string, error) {
	w := &writer{id: 999, cli: h.cli, prefix: h.prefix, acked: &h.acked, stats: &h.stats}
	k := kinds[1] // secrets
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var keys []string
	for i := range n {
		name, ns := fmt.Sprintf("burst-%03d", i), cmpStr(ns, namespaces[i%2])
		key := kindKeyPrefix(h.prefix, k) + ns + "/" + name
		resp, err := h.cli.Txn(cctx).Then(w.put(k, key, ns, name, tiers[i%3], size)).Commit()
		if err != nil {
			return keys, err
		}
		h.acked.add(resp.Header.Revision)
		keys = append(keys, key)
	}
	return keys, nil
}

func (h *harness) unburst(ctx context.Context, keys []string, err error) string {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	for _, key := range keys {
		resp, derr := h.cli.Delete(cctx, key)
		if derr != nil {
			return fmt.Sprintf("burst: %v", derr)
		}
		h.acked.add(resp.Header.Revision)
	}
	if err != nil {
		return fmt.Sprintf("burst: %v", err)
	}
	return fmt.Sprintf("%d Secrets written and deleted", len(keys))
}

func cmpStr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d): // a fault's duration
	}
}

func (h *harness) setCompacted(rev int64) {
	for {
		cur := h.compacted.Load()
		if rev <= cur || h.compacted.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// usable returns the fault kinds of want this setup supports.
func usable(want []string, members int) []string {
	var out []string
	for _, k := range want {
		if members < 3 && slices.Contains([]string{FaultKillMember, FaultKillLeader, FaultPartition, FaultPartitionServed}, k) {
			continue
		}
		out = append(out, k)
	}
	return out
}
