package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestPrefetchStopsAtWant: once the pager returned the Want keys the caller
// consumes (a LIST's limit), read-ahead starts no etcd range for the keys
// after them; before that it does.
func TestPrefetchStopsAtWant(t *testing.T) {
	cli := etcdtest.Start(t).Client
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
