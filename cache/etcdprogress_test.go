package cache

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestEtcdProgressOrder measures how often etcd delivers a progress
// notification to a re-opened watch before that watch's catch-up events,
// with the watch on a stream shared with 30 idle watches
// (LAZYAPI_ETCDPROGRESS=shared), on one stream of its own reused across
// re-opens (reused), or on a new stream per watch with progress requested
// there only after Watch returned (fresh, what Resource.openWatch does).
// The watch is re-opened 300 revisions behind etcd while another client
// writes and progress is requested every millisecond, for 20 s. The
// figures are in the comment of Resource.openWatch; the consistency the
// cache builds on them is tested by TestConsistentReadsAcrossReopens.
func TestEtcdProgressOrder(t *testing.T) {
	mode := os.Getenv("LAZYAPI_ETCDPROGRESS")
	if mode == "" {
		t.Skip("set LAZYAPI_ETCDPROGRESS=shared, reused or fresh (20 s)")
	}
	srv := etcdtest.Start(t)
	cli := srv.Client
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sharedCtx := metadata.AppendToOutgoingContext(ctx, "stream", "shared")
	ownCtx := sharedCtx
	if mode != "shared" {
		ownCtx = metadata.AppendToOutgoingContext(ctx, "stream", "own")
	}
	w := clientv3.NewWatcher(cli)
	defer w.Close()
	resp, err := cli.Put(ctx, "/hot/k0", "x")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		w.Watch(sharedCtx, fmt.Sprintf("/idle/%d/", i), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithProgressNotify())
	}
	val := string(make([]byte, 4096))
	var stop atomic.Bool
	defer stop.Store(true)
	go func() {
		for i := 0; !stop.Load(); i++ {
			cli.Put(ctx, "/hot/k"+strconv.Itoa(i%50), val)
		}
	}()
	var cur atomic.Pointer[context.Context] // the fresh watch's context
	go func() {
		for !stop.Load() {
			w.RequestProgress(sharedCtx)
			switch mode {
			case "reused":
				w.RequestProgress(ownCtx)
			case "fresh":
				if c := cur.Load(); c != nil {
					w.RequestProgress(*c)
				}
			}
			time.Sleep(time.Millisecond) // the rate of requests, not synchronisation
		}
	}()
	reopens, early, progress := 0, 0, 0
	end := time.Now().Add(20 * time.Second)
	last := resp.Header.Revision
	for time.Now().Before(end) {
		from := max(last-300, 2)
		base := ownCtx
		if mode == "fresh" {
			base = metadata.AppendToOutgoingContext(ctx, "stream", "fresh-"+strconv.Itoa(reopens))
		}
		octx, ocancel := context.WithCancel(base)
		wch := w.Watch(octx, "/hot/", clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
		if mode == "fresh" {
			cur.Store(&octx)
		}
		reopens++
		seen := from - 1 // every revision is a write of /hot/
		for n := 0; n < 3; {
			wr, ok := <-wch
			if !ok {
				break
			}
			if wr.IsProgressNotify() {
				progress++
				n++
				if wr.Header.Revision > seen {
					early++
					t.Logf("progress at %d before the events after %d (watch from %d)", wr.Header.Revision, seen, from)
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision != seen+1 {
					t.Errorf("event at %d after %d", ev.Kv.ModRevision, seen)
				}
				seen = ev.Kv.ModRevision
			}
		}
		last = seen
		ocancel()
	}
	t.Logf("%s: %d re-opens, %d progress notifications, %d before their watch's events", mode, reopens, progress, early)
	if mode == "fresh" && early > 0 {
		t.Errorf("a watch alone on a new stream got %d progress notifications before its events", early)
	}
}
