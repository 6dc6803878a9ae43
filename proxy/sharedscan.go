package proxy

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/shared"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// Shared scans (issue 15): one etcd scan for concurrent WatchLists.
//
// A watch with initial events whose resource is not in the watch cache
// reads its initial state from etcd. Hundreds of informers re-watching at
// once (a rollout, a restart) used to run one paged list each, one after
// the other on the bulk seat: each read the whole collection from etcd and
// transcoded it, so 256 WatchLists of 400 Secrets of 1 MiB read and
// encoded ~143 GB and did not finish in 15 minutes (bench/RESULTS.md,
// ## storm: 400 Secrets not cached, 256 WatchList streams, with the
// estimate). Their initial events are byte-identical: same collection at
// the same revision, same output, same selector.
//
// So such watches join a scanGroup, keyed by (resource, output, prefix,
// selectors, serializable): the group holds one admission (the bulk seat
// and the bytes of its window, as one LIST), reads the collection at one
// revision R, page by page, encodes each page's ADDED frames once (a
// segment) and every member writes the same bytes to its connection. Each
// member then sends the initial-events-end bookmark at R and follows its
// own etcd watch from R+1, as a watch that read its own list does.
//
// Memory is bounded by the window: the segments produced and not yet
// written by every member that needs them, at most scanWindowBytes (plus
// the segment being encoded), counted in the group's admission. A member
// pins the one segment it is writing; a segment leaves the window when
// every member that needs it took it, or, when the window is full, after
// shared.LagWait for members that do not take it: they are marked lagging
// (not waited for again until they catch up) and get the segment on the
// next cycle (the trim rule of proxy/shared). A stalled client therefore holds at most one segment until
// --write-timeout ends it, and a slow one does not pace the others.
//
// Joining: a group scans circularly. A member that joins while a scan runs
// takes the segments from the window on, to the end of the collection,
// then the group reads the segments it missed again, at the same revision
// R (segment boundaries are the keys of the first cycle's pages, so each
// segment is the same bytes every cycle). Informers do not depend on the
// order of initial events (kube-apiserver's watch cache sends them in key
// order only by accident of its store). A member joins a group only if R
// is new enough for it: resourceVersion="" (a consistent read) needs R at
// least etcd's revision when the request arrived, so a request that finds
// the group pinned already reads etcd's revision (one cheap range) and
// joins only if it is still R, else it starts a new group (the old one
// goes on for its members); resourceVersion=N needs R >= N;
// resourceVersion=0 (serializable) joins any serializable group. A
// member that joins a group before R is pinned needs no check: R is read
// after its arrival.

// scanWindowBytes bounds the encoded segments a group holds (a variable
// for tests).
var scanWindowBytes int64 = 16 << 20

// sharedWindowBytes is the window of a shared read (a scan's or a LIST
// group's): scanWindowBytes, at most an eighth of the limiter's budget, so
// that it fits the budget beside the read's own estimate (a group larger
// than --max-single-request-bytes would be refused, without Retry-After,
// where each member alone would be admitted).
func (s *Server) sharedWindowBytes() int64 {
	w := scanWindowBytes
	if lim := s.cfg.Limiter; lim != nil {
		w = min(w, lim.Stats().BudgetBytes/8)
	}
	return w
}

// scanKey identifies the groups whose members write byte-identical
// initial events.
type scanKey struct {
	r            *resource.Resource
	out          encoding.Output
	prefix       string
	selectors    string
	serializable bool
}

// scanGroups is the server's registry of open groups.
type scanGroups = shared.Reads[scanKey, *scanGroup]

func newScanGroups(ms *metrics.Set) *scanGroups {
	return shared.NewReads[scanKey, *scanGroup](ms, "lazyapi_watch_shared_scans_total",
		"lazyapi_watch_shared_scan_members_total", "lazyapi_watch_shared_scan_segments_total",
		"lazyapi_watch_shared_scan_segments_dropped_total", "lazyapi_watch_shared_scan_bytes")
}

// scanSegment is one encoded segment in (or pinned past) the window; its
// part is its index in the scan's segments.
type scanSegment struct {
	shared.Chunk
	events int
	failed bool // data ends with an ERROR event: the members end after it
}

// Failed reports that the segment ends with an ERROR event: the members
// end after it.
func (sg *scanSegment) Failed() bool { return sg.failed }

// scanSegmentOverhead is what a segment holds beside its data.
const scanSegmentOverhead = 256

// scanMember is one watch in a group.
type scanMember = shared.Member[*scanSegment, *scanGroup]

// scanGroup is one shared scan: a circular shared read (shared.Scan)
// whose parts are the segments.
type scanGroup struct {
	shared.Scan[*scanSegment]
	reg    *scanGroups
	s      *Server
	key    scanKey
	gw     *etcdWatch // the group's own encoder and filter
	client string
	ns     string
	pinned chan struct{} // closed once rev (or se) is set

	rev  int64
	se   *StatusError // the admission or first read failed: the members answer it
	bulk bool         // admitted at the Bulk level: the scanner and the members yield to short requests

	isPin bool // rev is set (under the read's lock)
}

// scanKeyOf returns the group key of a watch with initial events, ok
// false when it cannot share (Table output: its frames read the clock).
func (w *watchReq) scanKeyOf() (scanKey, bool) {
	out := w.enc.enc.Output()
	if out.Target == encoding.TargetTable || w.s.scans == nil {
		return scanKey{}, false
	}
	sel := w.q.LabelSelector + "\x00" + w.q.FieldSelector
	if !w.f.Empty() {
		// The legacy /watch/.../{name} adds a metadata.name requirement
		// to f that the query does not show.
		for _, fr := range w.f.Fields {
			sel += "\x00" + fr.Field + "=" + fr.Value
			if fr.Not {
				sel += "!"
			}
		}
	}
	return scanKey{r: w.r, out: out, prefix: w.prefix, selectors: sel, serializable: w.ws.any}, true
}

// joinScan makes the watch a member of a shared scan of its initial
// state. ok is false when the watch cannot share (it reads on its own).
// On success ew.shared and ew.rev are set and the member leaves the group
// when the watch ends.
func (w *watchReq) joinScan(ew *etcdWatch) (ok bool, se *StatusError) {
	key, ok := w.scanKeyOf()
	if !ok {
		return false, nil
	}
	s, ctx := w.s, w.ctx
	consistent := w.q.ResourceVersion == "" && !w.ws.any
	minRev := int64(0)
	if !w.ws.any && w.ws.rv > 0 {
		// NotOlderThan N: as prepare, wait for etcd to reach N.
		if err := s.waitForRV(ctx, w.ws.rv); err != nil {
			return true, storeStatus(err, false, w.ws.rv)
		}
		minRev = w.ws.rv
	}
	knowRev := !consistent
	for {
		g, m := joinScanGroup(s.scans, w, key, minRev, knowRev)
		if g == nil {
			// The group is pinned: R must be at least etcd's revision now.
			rev, err := s.store.Revision(ctx)
			if err != nil {
				return true, storeStatus(err, false, 0)
			}
			minRev, knowRev = max(minRev, rev), true
			continue
		}
		select {
		case <-g.pinned:
		case <-ctx.Done():
			m.Leave()
			return true, storeStatus(ctx.Err(), false, 0)
		}
		if g.se != nil {
			m.Leave()
			return true, g.se
		}
		ew.shared, ew.rev = m, g.rev
		w.releases = append(w.releases, m.Leave)
		return true, nil
	}
}

// joinScanGroup adds a member for w to the open group of key, or to a new one. It
// returns nil when the open group is pinned and knowRev is false (the
// caller reads etcd's revision first); a pinned group older than minRev
// is replaced by a new one.
func joinScanGroup(r *scanGroups, w *watchReq, key scanKey, minRev int64, knowRev bool) (*scanGroup, *scanMember) {
	r.Lock()
	defer r.Unlock()
	g := r.GetLocked(key)
	if g != nil {
		g.Lock()
		switch {
		case !g.OpenLocked() || (g.isPin && g.rev < minRev):
			g.CloseLocked()
			g.Unlock()
			g = nil
		case g.isPin && !knowRev:
			g.Unlock()
			return nil, nil
		default:
			m := shared.AddMember(&g.Read, g, true)
			g.Unlock()
			r.JoinedLocked()
			return g, m
		}
	}
	g = w.newScanGroup(key)
	m := shared.AddMember(&g.Read, g, false)
	go g.run()
	return g, m
}

// newScanGroup starts the scan group of key and registers it in
// s.scans, which is locked.
func (w *watchReq) newScanGroup(key scanKey) *scanGroup {
	s := w.s
	g := &scanGroup{reg: s.scans, s: s, key: key, client: clientKey(w.rc), ns: w.ns, pinned: make(chan struct{})}
	shared.Start(s.scans, &g.Read, key, g, false, s.sharedWindowBytes(), scanSegmentOverhead, s.baseCtx)
	enc := encoding.NewEncoder(s.schema, w.r, key.out, nil, includeObject(w.q.IncludeObject), time.Time{})
	f := w.f
	g.gw = &etcdWatch{s: s, enc: &watchEncoder{s: s, r: w.r, enc: enc, ctx: g.Context(), gr: w.r.GroupResource()},
		f: &f, prefix: w.prefix, ws: w.ws}
	return g
}

// run admits the group, pins its revision and scans until no member is
// left.
func (g *scanGroup) run() {
	s := g.s
	defer func() {
		// The members take a failed segment (its ERROR event); the last
		// one out clears it.
		g.ClearWindow(func(newest *scanSegment) bool { return newest.failed })
		g.End(shared.ErrEnded)
		g.Cancel()
	}()
	ctx := g.Context()
	done, learn, bulk, err := s.admitEtcdList(ctx, g.client, g.key.r, g.ns, g.Limit()+int64(frameBytes(s.store.Config().PageBytes)), 0)
	if err != nil {
		g.pin(0, readAdmissionStatus(ctx, err))
		return
	}
	defer done()
	hint := s.stats.Hint(s.listPrefix(g.key.r, ""))
	pg := s.store.NewPager(store.ListOptions{Prefix: g.key.prefix, Serializable: g.key.serializable, SizeHint: hint})
	page, err := pg.Next(ctx)
	if err != nil {
		g.pin(0, storeStatus(err, false, 0))
		return
	}
	g.bulk = bulk // before pin: the members read it after g.pinned
	g.pin(pg.Rev(), nil)
	// After each segment: a bulk scan yields to short requests; a scan
	// admitted as short whose first cycle's segments (the collection,
	// once) pass --bulk-list-threshold (its range starts with small
	// values) becomes bulk and records the collection as that large, as
	// an unshared LIST does (bulkYield). Later cycles read segments again:
	// they yield (n 0) and add nothing to the collection's size.
	var encoded int
	yield := func(n int) {
		encoded += n
		if learn != nil {
			learn(encoded)
		}
	}
	if err := shared.Cycles(&g.Scan, scanPages{g: g, pg: pg, hint: hint}, g.key.prefix, page, yield); err != nil {
		g.fail(err)
	}
}

// scanPages are the pages of a scan group's collection at its revision
// (shared.Pages): its first cycle's pager, the segments read again, and
// their encoded segments.
type scanPages struct {
	g    *scanGroup
	pg   *store.Pager
	hint int
}

var _ shared.Pages[[]*mvccpb.KeyValue, *scanSegment] = scanPages{}

func (p scanPages) Next(ctx context.Context) ([]*mvccpb.KeyValue, error) { return p.pg.Next(ctx) }

func (p scanPages) More() bool { return p.pg.More() }

func (p scanPages) Last(page []*mvccpb.KeyValue) (string, bool) {
	if len(page) == 0 {
		return "", false
	}
	return string(page[len(page)-1].Key), true
}

func (p scanPages) Chunk(page []*mvccpb.KeyValue) *scanSegment { return p.g.encode(page) }

// Again reads a segment's values again, at the group's revision.
func (p scanPages) Again(ctx context.Context, start, end string) ([]*mvccpb.KeyValue, error) {
	g := p.g
	spg := g.s.store.NewPager(store.ListOptions{Prefix: g.key.prefix, Start: start, End: end, Rev: g.rev,
		Serializable: g.key.serializable, SizeHint: p.hint, Continues: true})
	var kvs []*mvccpb.KeyValue
	for {
		page, err := spg.Next(ctx)
		if err != nil {
			return nil, err
		}
		kvs = append(kvs, page...)
		if !spg.More() || len(page) == 0 {
			return kvs, nil
		}
	}
}

// pin sets the group's revision (or its failure) and wakes the joiners.
func (g *scanGroup) pin(rev int64, se *StatusError) {
	g.Lock()
	g.rev, g.se, g.isPin = rev, se, true
	if se != nil {
		g.FailLocked(shared.ErrEnded)
	}
	g.Unlock()
	close(g.pinned)
}

// fail stops the group after a failed read: members without every
// segment end (shared.ErrEnded), as a watch whose own list read failed.
func (g *scanGroup) fail(err error) {
	members := g.Members()
	g.End(shared.ErrEnded)
	if g.Context().Err() == nil {
		g.s.log.Error("shared scan failed: its members' watches end", zap.String("resource", g.key.r.GroupResource()),
			zap.Int("members", members), zap.Error(err))
	}
}

// encode encodes the ADDED frames of a page's matching values.
func (g *scanGroup) encode(page []*mvccpb.KeyValue) *scanSegment {
	ew := g.gw
	n := 0
	for _, kv := range page {
		n += frameBytes(len(kv.Value))
	}
	sg := &scanSegment{Chunk: shared.Chunk{Data: make([]byte, 0, n)}}
	for _, kv := range page {
		plain, ok := ew.match(kv)
		if !ok {
			continue
		}
		sg.Data = ew.enc.event(sg.Data, codec.EventAdded, string(kv.Key), kv.Value, plain, kv.ModRevision)
		sg.events++
		if ew.enc.failed {
			sg.failed = true
			break
		}
	}
	g.reg.Published()
	return sg
}

// runShared streams a member's initial events from its group: the
// segments, then the initial-events-end bookmark at the group's revision.
func (ew *etcdWatch) runShared(ctx context.Context, sw *watchWriter) error {
	m := ew.shared
	defer m.Leave()
	for {
		sg, done, err := m.Take(ctx)
		if err != nil {
			return err
		}
		if done {
			break
		}
		err = ew.writeSegment(sw, sg)
		m.Release(sg)
		if err != nil {
			return err
		}
		if sg.failed {
			ew.enc.failed = true
			return nil
		}
		if sw.yield != nil && m.Group().bulk {
			// A short scan's members do not yield: they would wait
			// for the scan's own short seat.
			sw.yield()
		}
	}
	m.Leave()
	return nil
}

// writeSegment writes a segment's bytes as they are (one chunk).
func (ew *etcdWatch) writeSegment(sw *watchWriter, sg *scanSegment) error {
	if len(sg.Data) == 0 {
		return nil
	}
	if err := sw.flush(); err != nil {
		return err
	}
	sw.guard.Arm()
	_, err := sw.w.Write(sg.Data)
	if err == nil {
		err = sw.w.Flush()
	}
	if err != nil {
		return err
	}
	sw.m.events.Add(sg.events)
	return nil
}
