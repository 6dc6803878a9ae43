package proxy

import (
	"context"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultEtcdWatchLagBytes is Config.EtcdWatchLagBytes's default: the
// watch cache's default bound on a watcher's lag.
const DefaultEtcdWatchLagBytes = 16 << 20

// etcdFeed reads an etcd watch's responses as soon as etcd sends them and
// queues them for the watch's writer, up to limit bytes of keys and values
// (previous values included) not yet written; past it the watch has fallen
// behind: the etcd watch is cancelled, the queue dropped, and the writer
// ends the response (errEtcdWatchLagging), as the watch cache ends a
// watcher more than cache.Config.WatcherLagBytes behind and
// kube-apiserver's cacher a watcher whose buffer is full: the client
// re-watches from the last revision it received.
//
// Without it the writer read the watch channel only between its writes,
// and clientv3 buffers whatever etcd sends a watch in the meantime without
// bound (its substream's buffer): a client that stopped reading (until
// --write-timeout) or read more slowly than the resource changed made
// lazyapi hold every change since, twice for an update (WithPrevKV).
//
// What the feed holds is charged to the watch's admission (charge,
// watchWriter.chargeFed) before it is queued, as a new watch of its client
// would be admitted: a response that does not fit the watch budget (or,
// in its last eighth, the client's share) while others are queued ends the
// watch as lagging too. Uncharged, a client's stalled etcd-served watches
// (an old resourceVersion makes a watch etcd's: TooOldError) held up to
// limit each beyond the budget: 16 MiB times the thousands of idle
// watches a client may hold.
type etcdFeed struct {
	limit  int64
	cancel context.CancelFunc // ends the etcd watch
	lagged *metrics.Counter   // lazyapi_watchers_closed_lagging_total, as a cached watcher's
	ready  chan struct{}      // cap 1: something was queued or the feed ended
	// charge asks for held bytes to be charged to the watch's admission
	// and reports whether they were (less always is); called under mu.
	charge func(held int64) bool

	mu      sync.Mutex
	q       []feedItem
	held    int64 // bytes of q and of the responses taken but not done
	closed  bool  // the watch channel closed
	behind  bool  // the watch fell behind: cancelled, q dropped
	stopped bool  // the watch ended (stop): nothing is queued or charged
}

type feedItem struct {
	resp clientv3.WatchResponse
	n    int64
}

// newEtcdFeed starts reading wch; cancel ends the etcd watch, lagged
// counts the watch if it falls behind, charge charges what it holds (see
// etcdFeed). Stop it when the watch ends.
func newEtcdFeed(wch clientv3.WatchChan, limit int64, cancel context.CancelFunc, lagged *metrics.Counter, charge func(int64) bool) *etcdFeed {
	f := &etcdFeed{limit: limit, cancel: cancel, lagged: lagged, ready: make(chan struct{}, 1), charge: charge}
	go f.read(wch)
	return f
}

// stop drops what the feed holds and gives its charge back; the watch
// ended (its admission is released next).
func (f *etcdFeed) stop() {
	f.mu.Lock()
	f.stopped = true
	f.q, f.held = nil, 0
	f.charge(0)
	f.mu.Unlock()
}

// responseBytes is what a response holds: its events' keys and values.
func responseBytes(resp *clientv3.WatchResponse) int64 {
	var n int64
	for _, ev := range resp.Events {
		n += int64(len(ev.Kv.Key) + len(ev.Kv.Value))
		if ev.PrevKv != nil {
			n += int64(len(ev.PrevKv.Key) + len(ev.PrevKv.Value))
		}
	}
	return n
}

// read queues wch's responses until it closes; once the feed lagged it
// only drains wch (the watch is cancelled: clientv3 closes it).
func (f *etcdFeed) read(wch clientv3.WatchChan) {
	for resp := range wch {
		n := responseBytes(&resp)
		f.mu.Lock()
		switch {
		case f.behind || f.stopped:
		case f.held > 0 && (f.held+n > f.limit || !f.charge(f.held+n)):
			f.behind = true
			f.q, f.held = nil, 0
			f.charge(0)
			f.cancel()
			f.lagged.Inc()
		default:
			// One response is queued whatever it holds (charged
			// when it fits): the watch moves on.
			f.q = append(f.q, feedItem{resp, n})
			f.held += n
			f.charge(f.held)
		}
		f.mu.Unlock()
		f.signal()
	}
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.signal()
}

func (f *etcdFeed) signal() {
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// feedState is what next found.
type feedState int

const (
	feedResponse feedState = iota // a response
	feedEmpty                     // nothing queued: wait for ready
	feedClosed                    // the watch channel closed, every response taken
	feedLagged                    // the watch fell behind and was cancelled
)

// next takes the oldest queued response; done(n) gives its bytes back once
// it is written (or encoded into the writer's buffer).
func (f *etcdFeed) next() (resp clientv3.WatchResponse, n int64, st feedState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.behind:
		return resp, 0, feedLagged
	case len(f.q) > 0:
		it := f.q[0]
		f.q[0] = feedItem{}
		f.q = f.q[1:]
		return it.resp, it.n, feedResponse
	case f.closed:
		return resp, 0, feedClosed
	}
	return resp, 0, feedEmpty
}

// done gives back the bytes of a response next returned.
func (f *etcdFeed) done(n int64) {
	f.mu.Lock()
	if !f.behind && !f.stopped {
		f.held -= n
		f.charge(f.held)
	}
	f.mu.Unlock()
}

// queued says whether a response waits.
func (f *etcdFeed) queued() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.q) > 0
}
