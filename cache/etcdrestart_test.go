package cache

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestEtcdRestart stops the real etcd process under a filled cache and
// starts it again on the same data directory and address: the cache keeps
// its revision while etcd is down, then follows the writes made after the
// restart (the etcd client reconnects and the watch resumes from the
// cache's revision, no re-list needed since nothing was compacted), and a
// watcher opened before the restart receives them.
func TestEtcdRestart(t *testing.T) {
	dir := t.TempDir()
	var (
		e   *embedetcd.Etcd
		err error
		cfg embedetcd.Config
	)
	for range 5 { // a free port can be taken before etcd binds it
		cfg = embedetcd.Config{Dir: dir, ClientAddr: freeAddr(t), PeerAddr: freeAddr(t), UnsafeNoFsync: true}
		if e, err = embedetcd.Start(cfg); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.Close() }()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, w, before := seedAndWatch(t, cli, cli)

	e.Close()
	// Down: the cache still answers at the revision it holds.
	s, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadNotOlderThan, RV: before})
	if err != nil || s.Rev() != before {
		t.Fatalf("snapshot while etcd is down: %v at %v, want rev %d", err, s, before)
	}
	if e, err = embedetcd.Start(cfg); err != nil {
		t.Fatalf("cannot restart etcd on %s: %v", cfg.ClientAddr, err)
	}
	for i := range 10 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 25, uint64(50+i))
		if i%3 == 0 {
			del(t, cli, k)
		} else {
			put(t, cli, k, v)
		}
	}
	_, _, rev := waitEtcdState(t, "cache follows etcd after its restart", r, cli)
	if evs := collect(t, w, 10); evs[9].Rev != rev {
		t.Fatalf("watcher across the restart ends at %d, want %d", evs[9].Rev, rev)
	}
}
