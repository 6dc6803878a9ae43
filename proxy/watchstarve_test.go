package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// idleWatchReserve is proxy's watchIdleBytes: what an idle watch over
// plain HTTP reserves of the watch budget.
const idleWatchReserve = 25 << 10

// watchFrom opens a watch of path on addr from the loopback address from
// (its own client: the fairness key of an anonymous request is the remote
// IP) and sends the status code of its answer, 0 on an error, to code;
// the connection is the caller's to close (nil on a dial error).
func watchFrom(addr, from, path string, code chan<- int) net.Conn {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		code <- 0
		return nil
	}
	go func() {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			code <- 0
			return
		}
		line, err := bufio.NewReaderSize(c, 512).ReadString('\n')
		var n int
		if f := strings.Fields(line); err == nil && len(f) >= 2 {
			fmt.Sscan(f[1], &n)
		}
		code <- n
	}()
	return c
}

// TestWatchShareNotStarved: one client may hold up to 7/8 of the watch
// budget while others hold watches too (4e1e7d1: the share binds only in
// the budget's last eighth); it must not starve another client. Client A
// opens watches on one real server until the limiter queues one (224, the
// 7/8 of a budget of 256 idle watches); client B's watches are then
// answered 200 at once, from the last eighth, while A's waits in its
// queue, and A's is still queued when B holds several (A is over its
// share of two clients, B below it).
func TestWatchShareNotStarved(t *testing.T) {
	const budgetWatches = 256
	lcfg := ratelimit.DefaultConfig()
	lcfg.MaxInflightBytes = 1 << 30
	lcfg.MaxWatchBytes = budgetWatches * idleWatchReserve
	lcfg.MaxQueueWait = time.Minute // a queued watch waits, it is not refused in the test's time
	lim, err := ratelimit.New(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 64 << 20, Metrics: cfg.Metrics})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache, cfg.Limiter = c, lim
	})
	rev := seedConfigMaps(t, e, "ns", 3, 10)
	e.raw(t, "GET", "/api/v1/configmaps?limit=1", "") // creates the ConfigMaps' cache
	r := c.Resource(cache.Spec{Name: "configmaps", Prefix: "/registry/configmaps/", Namespaced: true})
	waitFor(t, "configmaps cached", func() error {
		if !r.Ready() {
			return fmt.Errorf("not ready")
		}
		return nil
	})
	addr := strings.TrimPrefix(e.url, "http://")
	path := fmt.Sprintf("/api/v1/namespaces/ns/configmaps?watch=1&resourceVersion=%d&timeoutSeconds=120", rev)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(from string) chan int {
		code := make(chan int, 1)
		if c := watchFrom(addr, from, path, code); c != nil {
			conns = append(conns, c)
		}
		return code
	}

	// A opens watches, one after the other, until one is queued.
	var queuedA chan int
	held := 0
	for queuedA == nil && held < 2*budgetWatches {
		code := open("127.0.0.2")
		for {
			select {
			case n := <-code:
				if n != 200 {
					t.Fatalf("client A's watch %d: %d, want 200 or queued", held+1, n)
				}
				held++
			case <-time.After(10 * time.Millisecond):
				if lim.Stats().Queued == 0 {
					continue
				}
				queuedA = code
			}
			break
		}
	}
	if want := budgetWatches * 7 / 8; held != want {
		t.Fatalf("client A holds %d watches, then queued = %v; want %d (7/8 of the budget) and the next queued", held, queuedA != nil, want)
	}

	// B, below its share (112 idle watches of two clients), gets watches
	// from the last eighth at once; A's stays queued.
	for i := range 8 {
		start := time.Now()
		select {
		case n := <-open("127.0.0.3"):
			if n != 200 || time.Since(start) > 5*time.Second {
				t.Fatalf("client B's watch %d beside A's %d: %d after %v, want 200 at once", i+1, held, n, time.Since(start))
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("client B's watch %d beside A's %d (the limiter queues %d): no answer in 20 s, want 200 at once",
				i+1, held, lim.Stats().Queued)
		}
	}
	select {
	case n := <-queuedA:
		t.Errorf("client A's queued watch answered %d once B held 8; want it queued (A is over its share)", n)
	default:
	}
	if st := lim.Stats(); st.InflightWatches != held+8 || st.WatchClients != 2 || st.Queued != 1 {
		t.Errorf("limiter: %d watches of %d clients, %d queued; want %d of 2, A's one queued", st.InflightWatches, st.WatchClients, st.Queued, held+8)
	}
}
