package proxy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdWatch is a watch served straight from etcd.
type etcdWatch struct {
	s         *Server
	enc       *watchEncoder
	f         *request.Filter
	prefix    string
	ws        watchStart
	bookmarks bool

	// listDone releases the admission of the initial list (fill.go);
	// called once the list is written, idempotent, nil without one.
	listDone func()
	// shared, when set, is the watch's membership of a shared scan of
	// its initial state (sharedscan.go): run writes the group's segments
	// instead of reading pages itself.
	shared *scanMember

	meta codec.Meta
	pg   *store.Pager
	page []*mvccpb.KeyValue
	rev  int64 // events after rev are sent
}

// prepare reads the first page of the initial state (pinning its
// revision), or the revision to watch from, before the response starts.
func (ew *etcdWatch) prepare(ctx context.Context) error {
	s, ws := ew.s, ew.ws
	switch {
	case ws.initial:
		if ws.rv > 0 && !ws.any {
			if err := s.waitForRV(ctx, ws.rv); err != nil {
				return err
			}
		}
		ew.pg = s.store.NewPager(store.ListOptions{Prefix: ew.prefix, Serializable: ws.any})
		page, err := ew.pg.Next(ctx)
		if err != nil {
			return err
		}
		ew.page, ew.rev = page, ew.pg.Rev()
	case ws.fromNow:
		rev, err := s.store.Revision(ctx)
		if err != nil {
			return err
		}
		ew.rev = rev
	default:
		ew.rev = ws.rv
	}
	return nil
}

// match evaluates the filter on a stored value; a value that cannot be
// decoded does not match. plain is the value's plaintext when match had to
// decrypt it (the event is then encoded from it: decrypted once), else nil.
func (ew *etcdWatch) match(kv *mvccpb.KeyValue) (plain []byte, ok bool) {
	if kv == nil {
		return nil, false
	}
	if ew.f.Empty() {
		return nil, true
	}
	value, err := ew.s.plaintext(ew.enc.ctx, ew.enc.gr, kv.Key, kv.Value, false)
	if err != nil {
		return nil, true // event reports it (an ERROR event) and ends the watch
	}
	obj, err := codec.Unwrap(value)
	if err != nil {
		return nil, false
	}
	ew.meta.Reset()
	if err := ew.s.schema.PeekMeta(obj, &ew.meta); err != nil {
		return nil, false
	}
	ok, err = ew.f.Matches(ew.s.schema, obj, &ew.meta)
	return value, err == nil && ok
}

// run streams the initial state, then the etcd watch's events.
func (ew *etcdWatch) run(ctx context.Context, sw *watchWriter) error {
	e := ew.enc
	// Start the watch before the initial pages so that a compaction
	// during them is reported, not missed.
	w := clientv3.NewWatcher(ew.s.cfg.Client)
	defer w.Close()
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	wch := w.Watch(wctx, ew.prefix, clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithRev(ew.rev+1))
	// Read as etcd sends, held up to the lag bound (etcdFeed).
	feed := newEtcdFeed(wch, ew.s.cfg.EtcdWatchLagBytes, wcancel, ew.s.watchMetrics().lagging, sw.chargeFed)
	defer feed.stop()
	if ew.shared != nil {
		if err := ew.runShared(ctx, sw); err != nil || e.failed {
			return err
		}
		if err := ew.endInitial(sw); err != nil {
			return err
		}
	}
	if ew.pg != nil {
		if stop, err := ew.runPages(ctx, sw); stop {
			return err
		}
	}
	return ew.follow(ctx, wctx, sw, w, feed)
}

// endInitial ends the initial state: its bookmark when the client asked
// for one (sendInitialEvents), and a flush.
func (ew *etcdWatch) endInitial(sw *watchWriter) error {
	if ew.ws.initialEnd {
		sw.take()
		sw.buf = ew.enc.enc.WatchBookmark(sw.buf, ew.rev, true)
		sw.m.events.Inc()
	}
	return sw.flush()
}

// runPages streams the initial state read from etcd in pages (ew.pg) as
// ADDED events, then ends it (endInitial). stop: the watch ends (with
// err, or nil once an event could not be encoded).
func (ew *etcdWatch) runPages(ctx context.Context, sw *watchWriter) (stop bool, err error) {
	e := ew.enc
	page := ew.page
	for {
		for _, kv := range page {
			plain, ok := ew.match(kv)
			if !ok {
				continue
			}
			sw.batch(frameBytes(len(kv.Value)))
			sw.buf = e.event(sw.buf, codec.EventAdded, string(kv.Key), kv.Value, plain, kv.ModRevision)
			sw.m.events.Inc()
			if e.failed {
				return true, nil
			}
			if len(sw.buf) >= flushSize {
				if err := sw.flush(); err != nil {
					return true, err
				}
			}
		}
		if !ew.pg.More() {
			break
		}
		if page, err = ew.pg.Next(ctx); err != nil {
			return true, err
		}
	}
	ew.pg, ew.page = nil, nil
	if ew.listDone != nil {
		ew.listDone()
	}
	if err := ew.endInitial(sw); err != nil {
		return true, err
	}
	return false, nil
}

// follow streams the etcd watch's events (feed, of w under wctx) until
// ctx ends or the watch fails; an expired revision ends it with a 410
// status event, a watch that fell too far behind (etcdFeed) with the end
// of the response. With bookmarks, a quiet watch asks etcd for progress
// every etcdBookmarkInterval and sends its revision as a BOOKMARK.
func (ew *etcdWatch) follow(ctx, wctx context.Context, sw *watchWriter, w clientv3.Watcher, feed *etcdFeed) error {
	var tick <-chan time.Time
	bookmarks := ew.bookmarks && ew.enc.enc.Bookmarks()
	if bookmarks {
		t := time.NewTicker(etcdBookmarkInterval)
		defer t.Stop()
		tick = t.C
	}
	last := ew.rev
	idle := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if idle {
				_ = w.RequestProgress(wctx)
			}
			idle = true
			continue
		case <-feed.ready:
		}
		for {
			resp, n, st := feed.next()
			switch st {
			case feedEmpty:
			case feedClosed:
				return ctx.Err()
			case feedLagged:
				return fmt.Errorf("%w: more than %d bytes of etcd's events for %s, or more than the watch budget had room for, not written", errEtcdWatchLagging, feed.limit, ew.prefix)
			default:
				if len(resp.Events) > 0 {
					idle = false
				}
				stop, err := ew.respond(sw, &resp, &last, bookmarks)
				feed.done(n)
				if stop || err != nil {
					return err
				}
			}
			if st == feedEmpty || !feed.queued() || len(sw.buf) >= flushSize {
				if err := sw.flush(); err != nil {
					return err
				}
			}
			if st == feedEmpty {
				break
			}
		}
	}
}

// errEtcdWatchLagging ends an etcd watch whose client fell behind
// (etcdFeed).
var errEtcdWatchLagging = errors.New("etcd watch fell behind")

// respond appends the frames of one etcd watch response: its events, or a
// BOOKMARK for a progress notification past last (with bookmarks), or the
// 410 status of a compacted revision (stop). last is the revision of the
// last frame sent.
func (ew *etcdWatch) respond(sw *watchWriter, resp *clientv3.WatchResponse, last *int64, bookmarks bool) (stop bool, err error) {
	e := ew.enc
	if resp.CompactRevision != 0 || errors.Is(resp.Err(), rpctypes.ErrCompacted) {
		sw.buf = e.enc.WatchStatus(sw.buf, &expired(fmt.Sprintf("too old resource version: %d (%d)", ew.rev, resp.CompactRevision)).Status)
		return true, nil
	}
	if err := resp.Err(); err != nil {
		return true, fmt.Errorf("cannot watch etcd: %w", err)
	}
	if resp.IsProgressNotify() {
		if rev := resp.Header.Revision; rev > *last && bookmarks {
			*last = rev
			sw.take()
			sw.buf = e.enc.WatchBookmark(sw.buf, rev, false)
			sw.m.events.Inc()
		}
	}
	for i, ev := range resp.Events {
		ew.appendEvent(sw, ev, len(resp.Events)-1-i)
		*last = ev.Kv.ModRevision
		if e.failed {
			return true, nil
		}
	}
	return false, nil
}

// appendEvent appends the frame of one etcd event: with a filter, an object
// that moves into it is ADDED and one that moves out is DELETED (with its
// previous state); DELETED carries the last state and the deletion's
// revision.
//
// backlog is how many events of the same etcd response follow ev: large
// when the watch replays etcd's history from an old resourceVersion.
func (ew *etcdWatch) appendEvent(sw *watchWriter, ev *clientv3.Event, backlog int) {
	var cur, prev *mvccpb.KeyValue
	if ev.Type == clientv3.EventTypePut {
		cur = ev.Kv
	}
	prev = ev.PrevKv
	curPlain, curPass := ew.match(cur)
	oldPlain, oldPass := ew.match(prev)
	var (
		t          codec.EventType
		val, plain []byte
	)
	switch {
	case curPass && !oldPass:
		t, val, plain = codec.EventAdded, cur.Value, curPlain
	case curPass && oldPass:
		t, val, plain = codec.EventModified, cur.Value, curPlain
	case oldPass:
		t, val, plain = codec.EventDeleted, prev.Value, oldPlain
	default:
		return
	}
	// Frames are shared with other watchers of the resource, from etcd or
	// the cache: the bytes depend only on (key, revision, type, output).
	sw.batch(frameBytes(len(val)))
	sw.buf = ew.enc.s.frames.appendEvent(sw.buf, ew.enc, t, bytesutil.ToUnsafeString(ev.Kv.Key), val, plain, ev.Kv.ModRevision, backlog)
	sw.m.events.Inc()
}
