package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// reflectorTimeout is a reflector watch's timeoutSeconds: client-go draws
// it from [minWatchTimeout, 2 × minWatchTimeout), 5 to 10 minutes.
func reflectorTimeout() string {
	return strconv.Itoa(300 + rand.IntN(300))
}

// get issues a GET, retrying 429s as a reflector does until the
// deadline; it returns a 200 response. client-go's request retries a 429
// that has Retry-After after that many seconds, at most clientGoRetries
// times (rest.Request's maxRetries); then, or at once for a 429 without
// Retry-After, the request fails and the reflector lists again after its
// back-off (reflectorBackoff).
func (s *stormState) get(ctx context.Context, path string) (*http.Response, error) {
	retries, relists := 0, 0
	for {
		req, err := s.target.newRequest(ctx, path, "application/json")
		if err != nil {
			return nil, err
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			return nil, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		s.throttled.Add(1)
		wait, ok := time.Duration(0), false
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			if n, err := strconv.Atoi(ra); err == nil && n >= 0 {
				wait, ok = time.Duration(n)*time.Second, true
			}
		} else {
			s.noRetry.Add(1)
		}
		if retries++; !ok || retries > clientGoRetries {
			wait = reflectorBackoff(relists)
			retries = 0
			relists++
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// clientGoRetries is client-go's default of retries of a request answered
// 429 with Retry-After (rest.Request's maxRetries).
const clientGoRetries = 10

// reflectorBackoff is the wait of a reflector before its n-th list again
// (n from 0) after a failed one: client-go's reflector back-off, 800 ms
// doubling up to 30 s, with jitter 1.0 (up to twice that).
func reflectorBackoff(n int) time.Duration {
	d := 800 * time.Millisecond
	for range n {
		if d *= 2; d >= 30*time.Second {
			d = 30 * time.Second
			break
		}
	}
	return d + time.Duration(rand.Int64N(int64(d)))
}

// watchList reads a WatchList stream until its initial-events-end
// bookmark and returns the ADDED events counted.
func (s *stormState) watchList(ctx context.Context) (int64, error) {
	q := url.Values{"watch": {"1"}, "sendInitialEvents": {"true"}, "resourceVersionMatch": {"NotOlderThan"}, "allowWatchBookmarks": {"true"},
		"timeoutSeconds": {reflectorTimeout()}}
	resp, err := s.get(ctx, s.path+"?"+q.Encode())
	if err != nil {
		return 0, err
	}
	synced := false
	defer func() {
		if !synced {
			resp.Body.Close()
		}
	}()
	br := bufio.NewReaderSize(resp.Body, 32<<10)
	var added int64
	var line []byte // the start of a line, or a whole BOOKMARK line
	for {
		frag, err := br.ReadSlice('\n')
		if len(line) < 64 || bytes.HasPrefix(line, []byte(`{"type":"BOOKMARK"`)) {
			line = append(line, frag...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return added, fmt.Errorf("watchlist stream ended before the initial-events-end bookmark (%d ADDED): %w", added, err)
		}
		switch {
		case bytes.HasPrefix(line, []byte(`{"type":"ADDED"`)):
			added++
		case bytes.HasPrefix(line, []byte(`{"type":"BOOKMARK"`)) && bytes.Contains(line, []byte(`"k8s.io/initial-events-end":"true"`)):
			synced = true
			s.hold(ctx, br, resp.Body)
			return added, nil
		case bytes.HasPrefix(line, []byte(`{"type":"ERROR"`)):
			return added, fmt.Errorf("watchlist ERROR event: %.300s", line)
		}
		line = line[:0]
	}
}

// listWatch does a reflector's LIST (resourceVersion=0, limit=500) and
// opens its watch; it returns the items listed.
func (s *stormState) listWatch(ctx context.Context) (int64, error) {
	resp, err := s.get(ctx, s.path+"?limit=500&resourceVersion=0")
	if err != nil {
		return 0, err
	}
	s.countGzip(resp)
	info, _, err := readList(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	items := int64(info.Items)
	for info.Continue != "" { // a server that honours limit
		resp, err := s.get(ctx, s.path+"?limit=500&continue="+url.QueryEscape(info.Continue))
		if err != nil {
			return items, err
		}
		s.countGzip(resp)
		info, _, err = readList(resp.Body)
		resp.Body.Close()
		if err != nil {
			return items, err
		}
		items += int64(info.Items)
	}
	q := url.Values{"watch": {"1"}, "resourceVersion": {info.ResourceVersion}, "allowWatchBookmarks": {"true"}, "timeoutSeconds": {reflectorTimeout()}}
	wresp, err := s.get(ctx, s.path+"?"+q.Encode())
	if err != nil {
		return items, err
	}
	s.hold(ctx, wresp.Body, wresp.Body)
	return items, nil
}

// countGzip counts a LIST response that came compressed: Go's transport
// asked for gzip (the request set no Accept-Encoding) and decodes it.
func (s *stormState) countGzip(resp *http.Response) {
	if resp.Uncompressed {
		s.gzipped.Add(1)
	}
}

// runInformers starts n client-go informers (protobuf, own connections) and
// waits until all synced, counting 429s seen by their transports; with
// holdFor each runs holdFor after its sync and is then stopped, and it
// waits for every hold to end.
func (s *stormState) runInformers(ctx context.Context, k Kind, ns string, n int) {
	base, err := s.target.RESTConfig()
	if err != nil {
		s.fail(err)
		return
	}
	base.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusTooManyRequests {
				s.throttled.Add(1)
				if resp.Header.Get("Retry-After") == "" {
					s.noRetry.Add(1)
				}
			}
			return resp, err
		})
	})
	var conns connSet
	defer conns.closeAll()
	stop := make(chan struct{})
	defer close(stop)
	sc := Scenario{Kind: k, Namespace: ns}
	var wg sync.WaitGroup
	for i := range n {
		cfg := rest.CopyConfig(base)
		if s.ownConns || s.distinct {
			// A Dial makes client-go's transport uncacheable: a transport,
			// so a connection, of the informer's own.
			d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
			if s.distinct {
				d.LocalAddr = &net.TCPAddr{IP: stormLocalAddr(i)}
			}
			cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := d.DialContext(ctx, network, addr)
				if err == nil {
					conns.add(c)
				}
				return c, err
			}
		}
		inf, read, err := newStormInformer(cfg, &sc, s.transform)
		if err != nil {
			s.fail(err)
			return
		}
		istop := stop // without holdFor: every informer runs to the row's end
		if s.holdFor > 0 {
			istop = make(chan struct{})
		}
		go inf.Run(istop)
		wg.Go(func() {
			if s.holdFor > 0 {
				defer close(istop)
			}
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				s.fail(fmt.Errorf("informer not synced: %w", ctx.Err()))
				return
			}
			if s.holdFor > 0 {
				defer s.holdOpen(ctx) // synced, its watch held open holdFor
			}
			items := int64(len(inf.GetStore().ListKeys()))
			if read != nil {
				got := read.Load()
				s.dataRead.Add(got)
				if s.expectedData >= 0 && got != s.expectedData {
					s.mu.Lock()
					if s.firstErr == "" {
						s.firstErr = fmt.Sprintf("an informer counted %d bytes of data, etcd holds %d", got, s.expectedData)
					}
					s.mu.Unlock()
					s.syncedWrong()
					return
				}
			}
			s.synced(items)
		})
	}
	wg.Wait()
}

// stormLocalAddr is the i-th informer's own loopback address with
// DistinctAddresses: 127.0.1.1, 127.0.1.2, ... 127.0.1.254, 127.0.2.1, ...
// (Linux routes all of 127.0.0.0/8 to the loopback interface).
func stormLocalAddr(i int) net.IP {
	return net.IPv4(127, 0, byte(1+i/254), byte(1+i%254))
}

// newStormInformer is newInformer with the storm's transform set before
// Run; read (nil without a transform) is the data its transform counted.
func newStormInformer(cfg *rest.Config, s *Scenario, transform string) (cache.SharedIndexInformer, *atomic.Int64, error) {
	if err := CheckInformerTransform(transform); err != nil {
		return nil, nil, err
	}
	inf, err := newInformer(cfg, s)
	if err != nil || transform == InformerTransformNone {
		return inf, nil, err
	}
	read := new(atomic.Int64)
	if err := inf.SetTransform(stripData(read)); err != nil {
		return nil, nil, err
	}
	return inf, read, nil
}

// connSet closes the connections of the informers' own transports when
// their run ends (their transports are not shared, nothing else would).
type connSet struct {
	mu sync.Mutex
	cs []net.Conn
}

func (c *connSet) add(conn net.Conn) {
	c.mu.Lock()
	c.cs = append(c.cs, conn)
	c.mu.Unlock()
}

func (c *connSet) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.cs {
		conn.Close()
	}
	c.cs = nil
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
