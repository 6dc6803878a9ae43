package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestPrefetchStopsAtWant: once the pager returned the Want keys the caller
// consumes (a LIST's limit), read-ahead starts no etcd range for the keys
// after them; before that it does.
func TestPrefetchStopsAtWant(t *testing.T) {
	// internal/etcdtest imports this package: start etcd by hand.
	e, err := StartEmbedded(EmbeddedConfig{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for i := range 20 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/r/cm/ns/c-%02d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	s := New(cli, Config{PageSize: 3})
	p := s.NewPager(ListOptions{Prefix: "/r/cm/", Want: 5})
	defer p.Close()
	p.SetPrefetch(ctx, true)
	for got, want := range []int{3, 2} {
		page, err := p.Next(ctx)
		if err != nil || len(page) != want {
			t.Fatalf("page %d: %d keys, %v; want %d", got, len(page), err, want)
		}
		if prefetching, wantPrefetch := p.pending != nil, got == 0; prefetching != wantPrefetch {
			t.Fatalf("after page %d: prefetching %v, want %v", got, prefetching, wantPrefetch)
		}
	}
	if !p.More() {
		t.Fatal("More() = false with 15 keys after the wanted ones")
	}
}
