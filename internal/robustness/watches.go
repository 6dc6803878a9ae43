package robustness

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/lazyapi/lazyapi/bench"
)

// watcher runs chains of watches: a start (a WatchList with
// sendInitialEvents, a LIST then a watch from its revision, or a watch
// from a revision some way back), then resumes from the last revision it
// saw, as a reflector does after a disconnect.
type watcher struct{ client }

func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		k, f, ns := w.target(3)
		sel := ""
		switch w.rng.IntN(3) {
		case 0:
			sel = "tier=" + tiers[w.rng.IntN(len(tiers))]
		case 1:
			sel = "tier in (a,b)"
		}
		bookmarks := w.rng.IntN(2) == 0
		mode := []string{"initial", "list", "back"}[w.rng.IntN(3)]
		resumes := w.rng.IntN(4)
		back := w.rng.Int64N(200)
		var from, fromGen, fromComp int64
		switch mode {
		case "list":
			o := &op{ID: w.h.nextID(), Client: "watcher" + strconv.Itoa(w.id), Resource: k.Resource, Namespace: ns, Selector: sel, Format: format(k, f)}
			(&reader{w.client}).listOnce(ctx, k, o, "consistent", 0, 0)
			w.h.record(o)
			if len(o.Pages) == 0 {
				continue
			}
			from, fromGen, fromComp = o.Pages[0].RV, o.Gen, o.Compacted
		case "back":
			from = max(w.h.model.seen()-back, 1)
		}
		for i := 0; i <= resumes && ctx.Err() == nil; i++ {
			o := &op{ID: w.h.nextID(), Client: "watcher" + strconv.Itoa(w.id), Verb: "watch", Mode: mode, Resource: k.Resource,
				Namespace: ns, Selector: sel, Format: format(k, f), FromRV: from, FromGen: fromGen, FromComp: fromComp}
			if i > 0 {
				o.Mode = "resume"
			}
			d := time.Duration(500+w.rng.IntN(6000)) * time.Millisecond
			w.watchOnce(ctx, k, o, bookmarks || o.Mode == "initial", d)
			w.h.record(o)
			last := lastRV(o)
			if last == 0 || o.Code != 0 || (o.Mode == "initial" && !initialEnded(o)) {
				break // nothing to resume from
			}
			if last != from {
				// A revision seen in this segment: the server generation
				// and compaction it was seen at are this segment's. (A
				// segment that saw nothing, e.g. refused while the server
				// restarted, keeps the ones of the revision it resumed.)
				fromGen, fromComp = o.Gen, o.Compacted
			}
			from, mode = last, "resume"
		}
	}
}

func initialEnded(o *op) bool {
	for _, e := range o.Events {
		if e.InitialEnd {
			return true
		}
	}
	return false
}

// lastRV is the highest revision a watch saw (an event or a bookmark).
func lastRV(o *op) int64 {
	last := o.FromRV
	for _, e := range o.Events {
		last = max(last, e.RV)
	}
	return last
}

func (w *watcher) watchOnce(ctx context.Context, k bench.Kind, o *op, bookmarks bool, d time.Duration) {
	opts := metav1.ListOptions{LabelSelector: o.Selector, AllowWatchBookmarks: bookmarks}
	if o.Mode == "initial" {
		t := true
		opts.SendInitialEvents = &t
		opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	} else {
		opts.ResourceVersion = strconv.FormatInt(o.FromRV, 10)
	}
	o.Query = fmt.Sprintf("%+v for %s", opts, d)
	o.Acked, o.Gen = w.h.acked.rev.Load(), w.h.gen.Load()
	o.Start = time.Now()
	defer func() {
		o.End, o.EndGen, o.Stopped = time.Now(), w.h.gen.Load(), ctx.Err() != nil
		o.Compacted = w.h.compacted.Load()
	}()
	cctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	wi, err := w.h.clients.watch(cctx, k, o.Format, o.Namespace, opts)
	if err != nil {
		if cctx.Err() == nil {
			o.setErr(err)
		}
		return
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		if ev.Type == watch.Error {
			o.setErr(apierrors.FromObject(ev.Object))
			return
		}
		e := event{Type: string(ev.Type)}
		acc, err := meta.Accessor(ev.Object)
		if err != nil {
			o.Err = fmt.Sprintf("undecodable %s event: %v", ev.Type, err)
			return
		}
		if e.RV, err = strconv.ParseInt(acc.GetResourceVersion(), 10, 64); err != nil {
			o.Err = fmt.Sprintf("%s event: resourceVersion %q", ev.Type, acc.GetResourceVersion())
			return
		}
		if ev.Type == watch.Bookmark {
			e.InitialEnd = acc.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		} else {
			e.Key = kindKeyPrefix(w.h.prefix, k) + acc.GetNamespace() + "/" + acc.GetName()
			e.Write = acc.GetAnnotations()[writeAnnotation]
		}
		o.Events = append(o.Events, e)
	}
}
