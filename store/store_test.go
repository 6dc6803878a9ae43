package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/store"
)

func put(t *testing.T, cli *clientv3.Client, key, val string) int64 {
	t.Helper()
	resp, err := cli.Put(context.Background(), key, val)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return resp.Header.Revision
}

func TestListPagesAtOneRevision(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	for i := range 50 {
		put(t, srv.Client, fmt.Sprintf("/registry/configmaps/ns/cm-%03d", i), strings.Repeat("x", 100*(i%7+1)))
	}
	put(t, srv.Client, "/registry/configmaps/ns2/other", "y")
	put(t, srv.Client, "/registry/configmapsx", "z")
	rev, err := store.New(srv.Client, store.Config{}).Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Writes after rev must not show up.
	put(t, srv.Client, "/registry/configmaps/ns/cm-025", "changed")
	put(t, srv.Client, "/registry/configmaps/ns/cm-999", "new")

	for _, cfg := range []store.Config{{PageSize: 7}, {PageSize: 500, PageBytes: 300}, {}} {
		s := store.New(srv.Client, cfg)
		var keys []string
		res, err := s.List(ctx, store.ListOptions{Prefix: "/registry/configmaps/ns/", Rev: rev}, func(kv store.KV) (bool, error) {
			keys = append(keys, string(kv.Key))
			if string(kv.Value) == "changed" || string(kv.Value) == "new" {
				t.Errorf("%+v: read a value written after revision %d: %q", cfg, rev, kv.Key)
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("%+v: List: %v", cfg, err)
		}
		if len(keys) != 50 || res.Rev != rev || res.More {
			t.Fatalf("%+v: List = %d keys, %+v; want 50 keys at %d, no more", cfg, len(keys), res, rev)
		}
		for i, k := range keys {
			if want := fmt.Sprintf("/registry/configmaps/ns/cm-%03d", i); k != want {
				t.Fatalf("%+v: key %d = %q, want %q", cfg, i, k, want)
			}
		}
	}
}

func TestPagerPrefetch(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	for i := range 100 {
		put(t, srv.Client, fmt.Sprintf("/r/cm/ns/c-%03d", i), strings.Repeat("v", 50))
	}
	s := store.New(srv.Client, store.Config{PageSize: 7})
	p := s.NewPager(store.ListOptions{Prefix: "/r/cm/"})
	p.SetPrefetch(ctx, true)
	var keys []string
	for {
		page, err := p.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range page {
			keys = append(keys, string(kv.Key))
		}
		if !p.More() {
			break
		}
	}
	if len(keys) != 100 || keys[99] != "/r/cm/ns/c-099" {
		t.Fatalf("prefetching pager read %d keys, last %q", len(keys), keys[len(keys)-1])
	}
	for i := range keys {
		if want := fmt.Sprintf("/r/cm/ns/c-%03d", i); keys[i] != want {
			t.Fatalf("key %d = %q, want %q", i, keys[i], want)
		}
	}
	// Turned on after the first page, closed early: no error, no leak.
	p = s.NewPager(store.ListOptions{Prefix: "/r/cm/"})
	if _, err := p.Next(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetPrefetch(ctx, true)
	p.Close()
	if page, err := p.Next(ctx); err != nil || len(page) != 0 {
		t.Fatalf("Next after Close = %d keys, %v", len(page), err)
	}
}

func TestListStopRemaining(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	for i := range 20 {
		put(t, srv.Client, fmt.Sprintf("/r/pods/ns/p-%02d", i), "v")
	}
	s := store.New(srv.Client, store.Config{PageSize: 3})
	n := 0
	res, err := s.List(ctx, store.ListOptions{Prefix: "/r/pods/", Start: "/r/pods/ns/p-05"}, func(kv store.KV) (bool, error) {
		n++
		return n == 10, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.LastKey) != "/r/pods/ns/p-14" || !res.More || res.Remaining != 5 {
		t.Fatalf("List stopped at %q more=%v remaining=%d, want p-14 true 5", res.LastKey, res.More, res.Remaining)
	}
	// End bound, inclusive.
	n = 0
	res, err = s.List(ctx, store.ListOptions{Prefix: "/r/pods/", End: "/r/pods/ns/p-03"}, func(kv store.KV) (bool, error) {
		n++
		return false, nil
	})
	if err != nil || n != 4 || res.More {
		t.Fatalf("List to p-03 = %d keys, more=%v, err=%v; want 4 false nil", n, res.More, err)
	}
	// An error from fn ends the range.
	boom := errors.New("boom")
	if _, err := s.List(ctx, store.ListOptions{Prefix: "/r/pods/"}, func(kv store.KV) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("List with failing fn = %v, want boom", err)
	}
}

func TestErrors(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	put(t, srv.Client, "/r/a/1", "v")
	rev := put(t, srv.Client, "/r/a/2", "v")
	put(t, srv.Client, "/r/a/3", "v")
	s := store.New(srv.Client, store.Config{})

	kv, readRev, ok, err := s.Get(ctx, "/r/a/2", 0)
	if err != nil || !ok || string(kv.Value) != "v" || kv.ModRevision != rev || readRev < rev {
		t.Fatalf("Get = %+v %d %v %v", kv, readRev, ok, err)
	}
	if _, _, ok, err := s.Get(ctx, "/r/a/missing", 0); ok || err != nil {
		t.Fatalf("Get(missing) = %v %v, want false nil", ok, err)
	}
	if _, err := s.List(ctx, store.ListOptions{Prefix: "/r/a/", Rev: rev + 1000}, func(store.KV) (bool, error) { return false, nil }); !errors.Is(err, store.ErrFutureRevision) {
		t.Fatalf("List at future revision = %v, want ErrFutureRevision", err)
	}
	cur, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.Compact(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(ctx, store.ListOptions{Prefix: "/r/a/", Rev: rev}, func(store.KV) (bool, error) { return false, nil }); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("List at compacted revision = %v, want ErrCompacted", err)
	}
	if _, _, _, err := s.Get(ctx, "/r/a/1", rev); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Get at compacted revision = %v, want ErrCompacted", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Revision(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Revision(canceled) = %v, want context.Canceled", err)
	}
}

func TestUnavailable(t *testing.T) {
	srv := etcdtest.Start(t)
	s := store.New(srv.Client, store.Config{CallTimeout: 500 * time.Millisecond})
	srv.Embedded.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.Revision(ctx)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Revision with etcd stopped = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("ErrUnavailable after %v, want about CallTimeout", d)
	}
	// The request's own deadline stays a deadline.
	cctx, ccancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer ccancel()
	if _, err := s.Revision(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Revision with a short request deadline = %v, want DeadlineExceeded", err)
	}
}
