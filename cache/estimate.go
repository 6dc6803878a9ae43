package cache

import (
	"context"
	"fmt"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A resource's first fill (or its first after a fill that was not refused)
// estimates what the resource needs before it reads values: its objects
// (counted by the keys-only list of newestChanges) times the budget a
// sampled object is charged, and is refused at once when that is over
// estimateMargin times the budget left. Why: a fill of a resource that
// does not fit reads values, 1 MiB a range, charging each entry to the
// budget, and is refused only at the first entry that does not fit; it
// held up to the whole free budget (256 MiB at --memory-limit=1Gi), plus
// the etcd client's buffers, just before it let go, and a storm of
// WatchList streams reading the resource from etcd meanwhile peaked at
// 518 MiB where it peaks at 211 MiB once the resource is known not to fit
// (bench/RESULTS.md, ## fill: refusing an uncached resource before
// reading it).
//
// The estimate must not refuse a resource that fits, so it is
// conservative in three ways: the samples are spread over all the
// resource's objects (evenly in key order when the newest changes
// sampled for the replay are not all of them: a collection whose newest
// objects are larger than the rest is not judged by those); the size per
// object is the lower median of the samples' costs, not their mean, so
// that one large sampled value among small ones does not multiply into
// a refusal (a collection whose size is in a few large values is
// underestimated instead, and read: the fill's charge per entry remains
// the exact check); and the margin lets an estimate up to 5/4 of the
// budget left try the real fill. The estimate is recorded as the
// resource's last refusal, so that its retries are refused without
// reading values by stillTooLarge while it is still over the margin.

// estimateMargin: a resource is refused by its estimate only when the
// estimate is over estimateMarginNum/estimateMarginDen of the budget left
// (the margin stillTooLarge applies to a measured refusal).
const estimateMarginNum, estimateMarginDen = 5, 4

// spreadSample keeps keys evenly spread in key order over a list of
// unknown length: every stride-th key, the stride doubling (every other
// key kept dropped) whenever 2*replaySamples are kept, so that between
// replaySamples and 2*replaySamples-1 keys remain (all of them for a
// shorter list).
type spreadSample struct {
	keys         []string
	stride, seen int64
}

func (s *spreadSample) add(key []byte) {
	if s.stride == 0 {
		s.stride = 1
	}
	if s.seen%s.stride == 0 {
		s.keys = append(s.keys, string(key))
		if len(s.keys) == 2*replaySamples {
			for i := range replaySamples {
				s.keys[i] = s.keys[2*i]
			}
			clear(s.keys[replaySamples:])
			s.keys = s.keys[:replaySamples]
			s.stride *= 2
		}
	}
	s.seen++
}

// pick returns up to replaySamples of the kept keys, one in the middle of
// each of as many equal strata.
func (s *spreadSample) pick() []string {
	m := len(s.keys)
	n := min(replaySamples, m)
	out := make([]string, 0, n)
	lo := 0
	for i := range n {
		hi := (i + 1) * m / n
		out = append(out, s.keys[(lo+hi)/2])
		lo = hi
	}
	return out
}

// sample is one sampled object: its key and value bytes (key only when
// the key was deleted since) and, when it exists, the budget its entry
// is charged.
type sample struct {
	size, cost int64
	exists     bool
}

// readSample reads key's value at etcd's current revision and the cost
// of the entry the fill would make of it (d.newEntry: the same
// attributes, the same decryption); the value is not kept.
func (r *Resource) readSample(ctx context.Context, d *deriver, key string) (sample, error) {
	resp, err := r.c.cfg.Client.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return sample{}, fmt.Errorf("cannot read a sample of %s: %w", r.spec.Prefix, err)
	}
	s := sample{size: int64(len(key))}
	if len(resp.Kvs) > 0 {
		kv := resp.Kvs[0]
		s = sample{size: int64(len(kv.Key) + len(kv.Value)), cost: d.newEntry(kv.Key, kv.Value, kv.ModRevision).cost(), exists: true}
	}
	r.fillRead.Add(int(s.size))
	return s, nil
}

// tooLargeByEstimate refuses the fill of objects objects without reading
// more values when no measured refusal is known (stillTooLarge decides
// then) and objects times the lower median of the sampled entries' costs
// is over estimateMargin times the budget left (see the comment above
// estimateMargin). changed are the samples of the newest changes
// (sampleChanges), which stand for all the objects when the changes are
// all of them (covered); otherwise the keys of spread, evenly spread in
// key order, are read. The estimate is recorded as the last refusal.
func (r *Resource) tooLargeByEstimate(ctx context.Context, d *deriver, objects int64, covered bool, changed []sample, spread *spreadSample) error {
	if r.lastRefusal.objects > 0 || objects <= 0 {
		return nil
	}
	samples := changed
	if !covered {
		samples = nil
		for _, key := range spread.pick() {
			s, err := r.readSample(ctx, d, key)
			if err != nil {
				return err
			}
			samples = append(samples, s)
		}
	}
	var costs []int64
	for _, s := range samples {
		if s.exists {
			costs = append(costs, s.cost)
		}
	}
	if len(costs) == 0 {
		return nil
	}
	slices.Sort(costs)
	per := costs[(len(costs)-1)/2]
	need := objects * per
	free := r.c.cfg.MemoryBytes - r.c.used.Load()
	if need*estimateMarginDen <= free*estimateMarginNum {
		return nil
	}
	r.lastRefusal = refusal{objects: objects, bytes: need, sampleMean: r.sampleMean, estimated: true}
	r.refusedUnread.Inc()
	r.refusedEstimated.Inc()
	return fmt.Errorf("%w: %s's %d objects need about %d bytes by estimate (%d bytes each: the lower median of %d sampled objects' entries), more than 5/4 of the %d bytes left of the budget (MemoryBytes=%d); no value read beyond the samples",
		errRefused, r.name, objects, need, per, len(costs), free, r.c.cfg.MemoryBytes)
}
