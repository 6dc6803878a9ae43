package cache

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// fillAndWatch lists the resource into a new tree, replays the etcd watch
// up to etcd's current revision (fillForHistory), publishes the tree, and
// applies the watch until it breaks. filled reports that the resource
// became ready.
//
// The watch is alone on a gRPC stream opened for it (openWatch), and etcd
// is asked for progress on that stream only: a progress notification then
// proves that etcd sent the watch every event up to its revision, which
// consistent reads (waitRev) and bookmarks rely on ("the cache holds
// everything up to rev"). On a stream shared by several watches etcd can
// deliver a progress notification to a watch before that watch's catch-up
// events (see openWatch).
func (r *Resource) fillAndWatch(ctx context.Context) (filled bool, err error) {
	d := r.deriver()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t, rev, target, err := r.fillForHistory(ctx, d)
	if err != nil {
		return false, err
	}
	r.install(t, rev, target)
	replaying := rev < target
	if !replaying {
		r.ready()
	}

	w := &followedWatch{r: r, ctx: wctx}
	w.open(rev + 1)
	defer func() { w.ws.close() }()
	// Progress: while the replay runs, every replayProgress (etcd
	// notifies only once the watch is synced, i.e. has been sent
	// everything up to its current revision: the replay's end); once
	// ready, every ProgressInterval when the watch was idle meanwhile, and
	// at once when a reader waits for a revision (requestProgress).
	interval := func() time.Duration {
		if replaying {
			return replayProgress
		}
		return r.c.cfg.ProgressInterval
	}
	tick := time.NewTimer(interval())
	defer tick.Stop()
	idle := true
	var incomplete time.Time // when checkReplay first found the replay incomplete
	for {
		var wr clientv3.WatchResponse
		select {
		case resp, ok := <-w.ws.ch:
			if !ok {
				if ctx.Err() != nil {
					return !replaying, ctx.Err()
				}
				return !replaying, errors.New("etcd watch channel closed")
			}
			wr = resp
			if len(resp.Events) > 0 {
				idle = false
			}
		case <-tick.C:
			if replaying || idle {
				w.ws.requestProgress(r)
			}
			idle = true
			tick.Reset(interval())
			continue
		case <-r.progressReq:
			w.ws.requestProgress(r)
			continue
		case <-w.moved:
			w.reopen()
			continue
		}
		if err := r.applyResponse(d, wr, replaying, rev, target); err != nil {
			return !replaying, err
		}
		if !replaying {
			continue
		}
		done, err := r.replayDone(ctx, rev, target, &incomplete)
		if err != nil {
			return false, err
		}
		if done {
			replaying = false
			r.ready()
			tick.Reset(interval())
		}
	}
}

// followedWatch is the resource's etcd watch and the endpoints it was
// opened on: when the etcd client moves to other endpoints, the watch is
// re-opened there on a new stream.
type followedWatch struct {
	r     *Resource
	ctx   context.Context
	ws    *watchStream
	moved <-chan struct{} // closed when the etcd client switches endpoints
}

// open (re-)opens the watch from revision from.
func (w *followedWatch) open(from int64) {
	w.ws.close()
	_, w.moved = w.r.c.etcdMoved()
	w.ws = w.r.openWatch(w.ctx, from)
}

// reopen follows the endpoints the client reads from now: the watch from
// the revision held, on a new stream.
func (w *followedWatch) reopen() {
	r := w.r
	r.mu.RLock()
	from := r.rev + 1
	r.mu.RUnlock()
	r.c.cfg.Logger.Info("etcd endpoints moved: re-opening the watch", zap.String("resource", r.name), zap.Int64("from", from))
	w.open(from)
}

// install makes t, filled at rev, the resource's tree, with an empty
// history from rev; target is the revision the replay aims at.
func (r *Resource) install(t *tree, rev, target int64) {
	r.mu.Lock()
	r.t = t
	r.rev = rev
	r.ring = newRing(r.history, rev)
	r.mu.Unlock()
	r.curRev.Store(rev)
	r.etcdRev.Store(max(r.etcdRev.Load(), target))
}

// applyResponse applies one response of the watch: its error, a progress
// notification or its events. While replaying (the history from rev to
// target), the events' bytes are counted, and a replay that does not fit
// is refused.
func (r *Resource) applyResponse(d *deriver, wr clientv3.WatchResponse, replaying bool, rev, target int64) error {
	if err := wr.Err(); err != nil {
		if errors.Is(err, rpctypes.ErrCompacted) || wr.CompactRevision != 0 {
			return fmt.Errorf("etcd compacted revision %d: %w", wr.CompactRevision, err)
		}
		return fmt.Errorf("etcd watch failed: %w", err)
	}
	if wr.Canceled {
		return fmt.Errorf("etcd canceled the watch: %s", wr.CancelReason)
	}
	if wr.Header.Revision > 0 {
		r.etcdRev.Store(max(r.etcdRev.Load(), wr.Header.Revision))
	}
	if wr.IsProgressNotify() {
		r.progress(wr.Header.Revision)
		return nil
	}
	if len(wr.Events) == 0 {
		return nil
	}
	if replaying {
		var n int
		for _, ev := range wr.Events {
			n += len(ev.Kv.Key) + len(ev.Kv.Value)
		}
		r.replayed.Add(n)
	}
	err := r.apply(d, wr.Events)
	if err != nil && replaying && errors.Is(err, errEvicted) {
		// Not ready yet: it did not fit.
		r.lastRefusal = refusal{objects: int64(r.t.n), bytes: r.bytes.Load(), sampleMean: r.sampleMean}
		err = fmt.Errorf("%w: %s (replaying the history from revision %d to %d)", errRefused, strings.TrimPrefix(err.Error(), errEvicted.Error()+": "), rev, target)
	}
	return err
}

// replayDone reports whether the replay from rev has applied everything
// up to target, the revision the fill aimed at, and (replayChecked) was
// found complete by checkReplay: then the resource is ready and the same
// watch goes on.
func (r *Resource) replayDone(ctx context.Context, rev, target int64, incomplete *time.Time) (bool, error) {
	r.mu.RLock()
	caughtUp := r.rev >= target
	r.mu.RUnlock()
	if !caughtUp {
		return false, nil
	}
	if replayChecked {
		return r.checkReplay(ctx, rev, incomplete)
	}
	return true, nil
}

// replayProgress is how often a replay asks etcd for progress.
const replayProgress = 100 * time.Millisecond

// watchStream is an etcd watch of the resource's prefix, alone on a gRPC
// stream of its own: a clientv3.Watcher opened for it and closed with it.
type watchStream struct {
	w      clientv3.Watcher
	ctx    context.Context
	cancel context.CancelFunc
	ch     clientv3.WatchChan
}

// openWatch opens the resource's etcd watch from revision from, with
// progress notifications, on a new gRPC stream (on the etcd client's
// current endpoints).
//
// Why a stream per watch, opened afresh: etcd answers a progress request
// for the whole stream (RequestProgressAll), only when every watch of the
// stream is synced, and sends the notification (watch ID -1) through the
// same channel as the watches' events, after them (etcd-io/etcd#15220,
// fixed by #15237). But its sendLoop (server/etcdserver/api/v3rpc/
// watch.go) selects at random between that channel and the control
// responses: a notification generated for the watches of a stream just
// before a new watch was created there can be sent after the new watch's
// Created response, and clientv3 hands a notification with watch ID -1 to
// every watch it knows, the new one included, whose catch-up events follow.
// Measured on etcd 3.7.3 (a watch re-opened 300 revisions behind while
// progress is requested every millisecond): 19 of 582 notifications came
// before the watch's events on a stream shared with 30 idle watches, 12
// of 546 on the resource's own stream reused across re-opens, 0 of 531
// on a new stream per watch. The cache took such a notification as "the
// cache holds everything up to rev": a consistent LIST could miss writes
// (TestConsistentReadsAcrossReopens; the checkReplay comment saw it end a
// replay early). On a new stream, requested only after Watch returned
// (clientv3 returns once etcd's Created response arrived, and sends a
// resumed watch's create request before any progress request), every
// notification was generated after the watch was created: it comes after
// the watch's events. kube-apiserver has one watch per stream too (an etcd
// client per resource, k8s.io/apiserver storagebackend/factory), and etcd
// notes that progress notifications on a stream of several watches are
// starved by any one unsynced watch (etcd-io/etcd#20242).
func (r *Resource) openWatch(ctx context.Context, from int64) *watchStream {
	ctx, cancel := context.WithCancel(ctx)
	w := newWatcher(r.c.cfg.Client)
	// No WithPrevKV: the tree holds every key's previous state.
	ch := w.Watch(ctx, r.spec.Prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	r.c.watchOpens.Inc()
	return &watchStream{w: w, ctx: ctx, cancel: cancel, ch: ch}
}

// requestProgress asks etcd for a progress notification on the stream.
// Only the resource's goroutine calls it, while the watch is open (for a
// context it has no stream for, clientv3 would open a new, empty one).
// clientv3 takes the request only between reconnections of the stream:
// the wait is bounded, so that the goroutine goes on following the watch
// and endpoint moves while etcd is away.
func (s *watchStream) requestProgress(r *Resource) {
	if s.ctx.Err() != nil {
		return
	}
	r.c.progressRequests.Inc()
	ctx, cancel := context.WithTimeout(s.ctx, time.Second)
	defer cancel()
	if err := s.w.RequestProgress(ctx); err != nil && s.ctx.Err() == nil {
		r.c.cfg.Logger.Debug("cannot request etcd watch progress", zap.String("resource", r.name), zap.Error(err))
	}
}

// close ends the watch and its stream (nil: nothing to close).
func (s *watchStream) close() {
	if s == nil {
		return
	}
	s.cancel()
	s.w.Close()
}

// requestProgress asks the resource's goroutine for an etcd progress
// notification soon (coalesced).
func (r *Resource) requestProgress() {
	select {
	case r.progressReq <- struct{}{}:
	default:
	}
}

// replayPatience bounds how long a replay that checkReplay found
// incomplete waits for its missing events before the resource re-lists.
const replayPatience = 30 * time.Second

// checkReplay reports whether the replay from start is complete: the tree
// holds etcd's state at its revision, the same keys each at the same
// modification revision (a keys-only range at that revision: no values).
// A progress notification was not proof while watches shared a stream:
// etcd sent one before a watch's catch-up events (TestHostileReconnectStorm,
// about one run in 40; the race is described at openWatch). The watch is
// now alone on a stream opened for it; this check, once per fill, holds
// without that.
// An incomplete replay waits for more events (*since records when it was
// first found incomplete), up to replayPatience, then fails (the resource
// re-lists). Only the resource's goroutine writes the tree, so it reads it
// without the lock.
func (r *Resource) checkReplay(ctx context.Context, start int64, since *time.Time) (bool, error) {
	r.mu.RLock()
	rev, root := r.rev, r.t.root
	r.mu.RUnlock()
	next, stop := iter.Pull(ascend(root, "", ""))
	defer stop()
	end := clientv3.GetPrefixRangeEnd(r.spec.Prefix)
	key := r.spec.Prefix
	complete := true
	for complete {
		resp, err := r.c.cfg.Client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithRev(rev),
			clientv3.WithLimit(int64(r.c.cfg.PageSize)), clientv3.WithSerializable())
		if err != nil {
			return false, fmt.Errorf("cannot check the replay of %s at revision %d: %w", r.spec.Prefix, rev, err)
		}
		for _, kv := range resp.Kvs {
			e, ok := next()
			if !ok || e.key() != string(kv.Key) || e.rev != kv.ModRevision {
				complete = false
				break
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if complete {
		if _, more := next(); !more {
			return true, nil
		}
	}
	r.replaysIncomplete.Inc()
	if since.IsZero() {
		*since = time.Now()
		r.c.cfg.Logger.Warn("the replay of the history before the fill lacks events at a progress notification: waiting for them",
			zap.String("resource", r.name), zap.Int64("from", start), zap.Int64("revision", rev))
	} else if time.Since(*since) > replayPatience {
		return false, fmt.Errorf("the replay of %s from revision %d lacked events at revision %d for %s", r.name, start, rev, replayPatience)
	}
	return false, nil
}

// ready makes the resource ready, after Config.Filled: the fill's
// transient memory is garbage before the first reader starts.
func (r *Resource) ready() {
	r.lastRefusal = refusal{}
	r.filled()
	r.mu.Lock()
	r.t.snapshot() // the tree's nodes may be shared from now on
	n, rev, start := r.t.n, r.rev, r.ring.startRev
	r.setState(StateReady, fmt.Sprintf("filled at revision %d", rev))
	r.broadcastLocked()
	r.mu.Unlock()
	r.objects.Store(int64(n))
	r.c.cfg.Logger.Debug("resource cached", zap.String("resource", r.name), zap.Int64("revision", rev),
		zap.Int64("history_from", start), zap.Int("objects", n), zap.Int64("bytes", r.bytes.Load()))
}

// filled calls Config.Filled after a complete fill.
func (r *Resource) filled() {
	if f := r.c.cfg.Filled; f != nil {
		f(r.name, r.bytes.Load())
	}
}
