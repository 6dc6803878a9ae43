package cache

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// fillForHistory fills the tree at the revision the resource's history
// will start from: Config.BackfillRevisions before etcd's current
// revision target, or etcd's compaction, or just before the oldest change
// the ring can keep, or late enough that the replay carries at most
// about Config.ReplayBytes (historyStart), whichever is latest. It returns the
// tree, its revision and target (equal when there is no history to
// replay).
//
// Why: a fill at etcd's current revision R alone would start the history
// at R, and a watch from an older resourceVersion would get 410 Expired.
// After a restart of lazyapi every informer re-watches from the
// resourceVersion it saw last, a little before R: with a history that
// starts at R they would all re-list (the storm the cache exists to
// prevent). So the tree is read at the history's start S, and the watch
// from S+1 is applied to it as live events (the same entries, budget
// charges and ring) until it reaches R; only then is the resource ready.
// Every value is read from etcd once: the state at S by the ranges, each
// change after S by the watch, which needs no previous values (WithPrevKV)
// since the tree holds them. (Before, the fill read the state at R and a
// second watch from S re-read every value written in (S, R]: a collection
// written within the last BackfillRevisions was fetched twice, and the
// cold storm of 256 WatchList streams on 10,000 ConfigMaps of 10 KiB
// peaked at 497 MiB against the cache + 256 MiB; bench/RESULTS.md,
// ## storm: cold fill backfill.)
//
// A resource whose last fill was refused for the budget is refused again
// at once, without reading its values, while the estimate of what it
// needs is still well over the budget left (stillTooLarge). One without a
// refusal is refused before its values are read when its objects times a
// sampled object's cost is well over the budget left (tooLargeByEstimate).
func (r *Resource) fillForHistory(ctx context.Context, d *deriver) (*tree, int64, int64, error) {
	r.sampleMean = 0
	n := r.c.cfg.BackfillRevisions
	if n <= 0 {
		t, rev, err := r.fill(ctx, d, 0)
		return t, rev, rev, err
	}
	var spread spreadSample
	target, changes, objects, err := r.newestChanges(ctx, &spread)
	if err != nil {
		return nil, 0, 0, err
	}
	largest, samples, err := r.sampleChanges(ctx, d, changes)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := r.stillTooLarge(objects); err != nil {
		return nil, 0, 0, err
	}
	if err := r.tooLargeByEstimate(ctx, d, objects, int64(len(changes)) >= objects, samples, &spread); err != nil {
		return nil, 0, 0, err
	}
	at := r.historyStart(target, changes, largest)
	for try := 0; at < target && try < 3; try++ {
		t, rev, err := r.fill(ctx, d, at)
		if err == nil || !errors.Is(err, rpctypes.ErrCompacted) {
			return t, rev, target, err
		}
		c, err := r.compactedAt(ctx, at)
		if err != nil {
			r.c.cfg.Logger.Info("cannot find etcd's compaction: the history starts at the fill",
				zap.String("resource", r.name), zap.Error(err))
			break
		}
		at = max(at, c)
	}
	t, rev, err := r.fill(ctx, d, 0)
	return t, rev, rev, err
}

// historyStart returns the revision the history of a fill aiming at
// target starts from: the latest of BackfillRevisions before target, 1,
// just before the oldest change the ring can keep (changes before the
// oldest of the newest r.history+1 objects' last changes would only pass
// through it), and Config.ReplayBytes divided by the largest sampled
// value before target (target when not even one value fits: no replay).
//
// Why bytes: etcd sends a watch's catch-up in responses of up to 1,000
// revisions with no byte bound, and the etcd client holds one twice (its
// gRPC receive buffers and the decoded values). 400 Secrets of 1 MiB,
// all written within the window, came as one 400 MiB response, held as
// 0.8 GB beside the streams of a storm, on every try of a fill the budget
// refused (bench/RESULTS.md, ## storm: why the 400-Secret storm went over
// --memory-limit). The changes left out are read by the fill's ranges,
// Config.PageBytes at a time, charged to the budget entry by entry (and
// refused as soon as one does not fit).
//
// Why revisions: a Kubernetes write is one etcd revision, so a window of
// N revisions replays at most N changes of the resource, whatever they
// are; the newest objects' last changes alone would not bound it, as the
// window also replays the changes of keys deleted since (a value each)
// and the earlier changes of the objects changed again.
func (r *Resource) historyStart(target int64, changes []keyRev, largest int64) int64 {
	at := max(target-r.c.cfg.BackfillRevisions, 1)
	if len(changes) > r.history {
		at = max(at, changes[r.history].rev-1)
	}
	if span := r.c.cfg.ReplayBytes / max(largest, 1); replayBounded && target-span > at {
		at = target - span
		r.c.cfg.Logger.Debug("the history before the fill is cut to what fits the replay's byte bound",
			zap.String("resource", r.name), zap.Int64("revisions", span), zap.Int64("largest_sampled_value", largest),
			zap.Int64("replay_bytes", r.c.cfg.ReplayBytes), zap.Int64("from", at))
	}
	return at
}

// keyRev is an object's key and its modification revision.
type keyRev struct {
	key string
	rev int64
}

// replaySamples is how many values of its newest changes a fill reads to
// estimate the bytes of its replay: a few single-key reads.
const replaySamples = 8

// maxValueBytes is what historyStart takes the largest value to be when
// the resource has no object to sample: etcd's default request size
// limit (--max-request-bytes), the largest value it accepts by default.
const maxValueBytes = 3 << 19

// sampleChanges reads the values of up to replaySamples of changes
// (newest first), one in the middle of each of as many equal strata, at
// etcd's current revision (a key deleted since counts its key only), and
// returns the largest key and value size (maxValueBytes when changes is
// empty) and the samples (readSample). It records their mean size in
// r.sampleMean.
func (r *Resource) sampleChanges(ctx context.Context, d *deriver, changes []keyRev) (int64, []sample, error) {
	m := len(changes)
	s := min(replaySamples, m)
	if s == 0 {
		return maxValueBytes, nil, nil
	}
	var total, largest int64
	samples := make([]sample, 0, s)
	lo := 0
	for i := range s {
		hi := (i + 1) * m / s
		sm, err := r.readSample(ctx, d, changes[(lo+hi)/2].key)
		if err != nil {
			return 0, nil, err
		}
		samples = append(samples, sm)
		total += sm.size
		largest = max(largest, sm.size)
		lo = hi
	}
	r.sampleMean = total / int64(s)
	return largest, samples, nil
}

// stillTooLarge refuses the fill of objects objects at once when the last
// fill was refused for the budget and, at what it measured per object
// (scaled by how the mean sampled value size changed since), they need
// more than 5/4 of the budget left: a retry would read values up to the
// budget's end only to refuse again. The margin absorbs the estimate's
// error; a resource that comes within it is read again.
func (r *Resource) stillTooLarge(objects int64) error {
	last := r.lastRefusal
	if last.objects <= 0 || objects <= 0 {
		return nil
	}
	need := float64(objects) * float64(last.bytes) / float64(last.objects)
	if last.sampleMean > 0 && r.sampleMean > 0 {
		need *= float64(r.sampleMean) / float64(last.sampleMean)
	}
	free := r.c.cfg.MemoryBytes - r.c.used.Load()
	if need <= float64(free)*5/4 {
		return nil
	}
	r.refusedUnread.Inc()
	measured := "measured"
	if last.estimated {
		measured = "estimated"
	}
	return fmt.Errorf("%w: %s's %d objects need about %.0f bytes (%d bytes for %d objects %s at the last refusal), more than the %d bytes left of the budget (MemoryBytes=%d)",
		errRefused, r.name, objects, need, last.bytes, last.objects, measured, free, r.c.cfg.MemoryBytes)
}

// newestChanges reads the resource's keys (no values) at etcd's current
// revision and returns that revision, the keys and modification
// revisions of the (r.history+1) most recently changed objects, newest
// first, and how many objects there are; spread receives every key. A
// collection written at once (10,000 ConfigMaps of 10 KiB, all within
// BackfillRevisions) is then read by the fill's ranges, page by page,
// and the replay carries its last r.history changes only, not 100 MB of
// watch responses at once (bench/RESULTS.md, ## storm: cold fill
// backfill).
func (r *Resource) newestChanges(ctx context.Context, spread *spreadSample) (rev int64, changes []keyRev, objects int64, err error) {
	h := &revHeap{}
	end := clientv3.GetPrefixRangeEnd(r.spec.Prefix)
	key := r.spec.Prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(r.c.cfg.PageSize)), clientv3.WithSerializable()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := r.c.cfg.Client.Get(ctx, key, opts...)
		if err != nil {
			return 0, nil, 0, fmt.Errorf("cannot list the keys of %s: %w", r.spec.Prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		objects += int64(len(resp.Kvs))
		for _, kv := range resp.Kvs {
			spread.add(kv.Key)
			switch {
			case h.Len() <= r.history:
				heap.Push(h, keyRev{string(kv.Key), kv.ModRevision})
			case kv.ModRevision > (*h)[0].rev:
				(*h)[0] = keyRev{string(kv.Key), kv.ModRevision}
				heap.Fix(h, 0)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	changes = make([]keyRev, h.Len())
	for i := len(changes) - 1; i >= 0; i-- {
		changes[i] = heap.Pop(h).(keyRev)
	}
	return rev, changes, objects, nil
}

// revHeap is a min-heap of changes by revision.
type revHeap []keyRev

func (h revHeap) Len() int           { return len(h) }
func (h revHeap) Less(i, j int) bool { return h[i].rev < h[j].rev }
func (h revHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *revHeap) Push(x any)        { *h = append(*h, x.(keyRev)) }
func (h *revHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// compactedAt returns etcd's compaction revision, known to be after rev:
// a watch from rev+1 (of one key, on a stream of its own) is answered
// with it.
func (r *Resource) compactedAt(ctx context.Context, rev int64) (int64, error) {
	w := clientv3.NewWatcher(r.c.cfg.Client)
	defer w.Close()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for wr := range w.Watch(wctx, r.spec.Prefix, clientv3.WithRev(rev+1)) {
		if wr.CompactRevision > rev {
			return wr.CompactRevision, nil
		}
		if err := wr.Err(); err != nil {
			return 0, err
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("etcd did not answer a watch from revision %d with its compaction", rev+1)
}

// fill reads the resource page by page at revision at (0: etcd's current
// one) into a new tree, charging the budget per entry.
func (r *Resource) fill(ctx context.Context, d *deriver, at int64) (*tree, int64, error) {
	cli := r.c.cfg.Client
	t := newTree()
	end := clientv3.GetPrefixRangeEnd(r.spec.Prefix)
	key := r.spec.Prefix
	rev := at
	var charged, seenBytes, seen int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(fillPageLimit(r.c.cfg, seen, seenBytes)), clientv3.WithSerializable()}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			r.uncharge(charged)
			return nil, 0, fmt.Errorf("cannot list %s: %w", r.spec.Prefix, err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		var read int
		for _, kv := range resp.Kvs {
			read += len(kv.Key) + len(kv.Value)
		}
		r.fillRead.Add(read)
		for _, kv := range resp.Kvs {
			e := d.newEntry(kv.Key, kv.Value, kv.ModRevision)
			if !r.charge(e.cost()) {
				r.lastRefusal = refusal{objects: int64(t.n) + 1, bytes: charged + e.cost(), sampleMean: r.sampleMean}
				r.uncharge(charged)
				return nil, 0, fmt.Errorf("%w: %s needs more than the %d bytes left of the budget (MemoryBytes=%d) after %d objects (%d bytes)",
					errRefused, r.name, r.c.cfg.MemoryBytes-r.c.used.Load(), r.c.cfg.MemoryBytes, t.n, charged)
			}
			charged += e.cost()
			seenBytes += int64(len(kv.Value))
			seen++
			t.put(e)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return t, rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// fillPageLimit returns the number of keys of the next fill range: a small
// first page, then cfg.PageBytes worth of values at the mean size seen so
// far, between 1 and cfg.PageSize.
func fillPageLimit(cfg Config, seen, seenBytes int64) int64 {
	const firstPage = 16
	if seen == 0 {
		return min(firstPage, int64(cfg.PageSize))
	}
	mean := max(seenBytes/seen, 1)
	return max(1, min(int64(cfg.PageBytes)/mean, int64(cfg.PageSize)))
}
