package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// tcpProxy forwards connections to an etcd endpoint; cut closes them all
// and refuses new ones until restore, like a network break or an etcd
// restart seen from the client.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func startProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
		go func() { defer p.wg.Done(); io.Copy(c, u); c.Close() }()
	}
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// seedAndWatch writes 20 ConfigMaps with writer, fills a cache reading
// through cacheCli and opens a watcher at the filled revision, which it
// returns; the watcher closes when the test ends.
func seedAndWatch(t *testing.T, writer, cacheCli *clientv3.Client) (*Resource, *Watcher, int64) {
	t.Helper()
	for i := range 20 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 20, uint64(i))
		put(t, writer, k, v)
	}
	c := newTestCache(t, cacheCli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	rev := r.Revision()
	w, err := r.Watch(context.Background(), WatchOptions{RV: rev})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return r, w, rev
}

func TestCompactionWhileDisconnectedRelists(t *testing.T) {
	srv := etcdtest.Start(t)
	direct := srv.Client
	p := startProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.ln.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r, w, _ := seedAndWatch(t, direct, cli)

	// A break without compaction: the etcd client resumes the watch, the
	// cache catches up without re-listing.
	p.cut()
	for i := range 10 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i), nil, 25, uint64(50+i))
		put(t, direct, k, v)
	}
	p.restore()
	_, _, rev := waitEtcdState(t, "cache catches up after a reconnect", r, direct)
	if n := r.relists.Get(); n != 0 {
		t.Fatalf("re-listed %d times after a reconnect without compaction", n)
	}
	if evs := collect(t, w, 10); evs[9].Rev != rev {
		t.Fatalf("watcher across the reconnect ends at %d, want %d", evs[9].Rev, rev)
	}

	// A break with compaction past the cache's revision: re-list.
	p.cut()
	var last int64
	for i := range 30 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%02d", i%25), nil, 30, uint64(100+i))
		if i%4 == 0 {
			last = del(t, direct, k)
		} else {
			last = put(t, direct, k, v)
		}
	}
	if _, err := direct.Compact(context.Background(), last, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	p.restore()

	waitEtcdState(t, "cache re-lists to etcd's state", r, direct)
	if r.relists.Get() == 0 {
		t.Fatal("cache did not re-list")
	}
	// The watcher from before the break ended: the client re-watches, and
	// its old revision is older than the new history.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := w.Next(ctx)
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("old watcher: %v, want ErrClosed", err)
		}
		break
	}
	if _, err := r.Watch(context.Background(), WatchOptions{RV: 5}); !errors.Is(err, ErrTooOld) {
		t.Fatalf("re-watch from before the re-list: %v, want ErrTooOld", err)
	}
	// And the cache follows etcd again.
	k, v := configMap(t, "ns", "after", nil, 5, 1)
	rev = put(t, direct, k, v)
	poll(t, "cache follows after the re-list", func() error {
		_, _, ok, err := r.Get(context.Background(), k, ReadOptions{Mode: ReadNotOlderThan, RV: rev})
		if err != nil || !ok {
			return fmt.Errorf("get %s: %v %v", k, ok, err)
		}
		return nil
	})
}
