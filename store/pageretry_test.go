package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/store"
)

// TestPagerRetriesUnavailablePage: on a real etcd reached through a proxy
// that holds the bytes of one read past CallTimeout, a Pager reads the
// page after the first again (at the pinned revision, so a write after it
// stays unseen) instead of ending the list; a first page is not read
// again (a request against an etcd that does not answer gets its 503 at
// once) unless the caller continues at a pinned revision.
func TestPagerRetriesUnavailablePage(t *testing.T) {
	srv := etcdtest.Start(t)
	px := etcdtest.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{px.URL()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range 30 {
		put(t, srv.Client, fmt.Sprintf("/r/p/k-%03d", i), "v")
	}
	ms := metrics.NewSet()
	s := store.New(cli, store.Config{PageSize: 10, CallTimeout: time.Second, Metrics: ms})
	errs := ms.GetOrCreateCounter(`lazyapi_etcd_request_errors_total{op="range"}`)
	retries := ms.GetOrCreateCounter("lazyapi_etcd_page_retries_total")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// stall holds the proxy's bytes 2 s (over CallTimeout) until one read
	// failed, then lets the next through.
	stall := func() {
		e0 := errs.Get()
		px.SetDelay(2 * time.Second)
		go func() {
			defer px.SetDelay(0)
			for errs.Get() == e0 && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}

	pg := s.NewPager(store.ListOptions{Prefix: "/r/p/"})
	page, err := pg.Next(ctx)
	if err != nil || len(page) != 10 {
		t.Fatalf("first page: %d keys, %v", len(page), err)
	}
	rev := pg.Rev()
	put(t, srv.Client, "/r/p/k-015", "changed") // after rev: not seen
	stall()
	var keys []string
	for pg.More() {
		page, err := pg.Next(ctx)
		if err != nil {
			t.Fatalf("after %d more keys: %v (range errors %d, retries %d)", len(keys), err, errs.Get(), retries.Get())
		}
		for _, kv := range page {
			keys = append(keys, string(kv.Key))
			if string(kv.Value) != "v" {
				t.Errorf("%s = %q: read after revision %d", kv.Key, kv.Value, rev)
			}
		}
	}
	if len(keys) != 20 || keys[0] != "/r/p/k-010" || keys[19] != "/r/p/k-029" || pg.Rev() != rev {
		t.Fatalf("pages after the stall: %d keys (%v .. %v) at %d, want k-010..k-029 at %d", len(keys), keys[:min(1, len(keys))], keys[max(len(keys)-1, 0):], pg.Rev(), rev)
	}
	if errs.Get() == 0 || retries.Get() == 0 {
		t.Fatalf("range errors %d, page retries %d: the stall did not fail a read, or it was not read again", errs.Get(), retries.Get())
	}

	// A first page is not read again.
	r0 := retries.Get()
	stall()
	_, err = s.NewPager(store.ListOptions{Prefix: "/r/p/"}).Next(ctx)
	if !errors.Is(err, store.ErrUnavailable) || retries.Get() != r0 {
		t.Fatalf("a first page with no answer: %v, %d retries; want ErrUnavailable and none", err, retries.Get()-r0)
	}
	// Unless the caller continues at a pinned revision.
	stall()
	page, err = s.NewPager(store.ListOptions{Prefix: "/r/p/", Start: "/r/p/k-015", Rev: rev, Continues: true}).Next(ctx)
	if err != nil || len(page) == 0 || string(page[0].Key) != "/r/p/k-015" || string(page[0].Value) != "v" || retries.Get() == r0 {
		t.Fatalf("a continued first page: %d keys, %v, %d retries", len(page), err, retries.Get()-r0)
	}
}
