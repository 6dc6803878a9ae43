package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// runWatch opens s.Concurrency watches, writes s.Rate new objects per second
// into etcd, and measures the time from the start of each write to each
// watcher's receipt of its event. The written objects are deleted after
// the watchers stop.
func runWatch(ctx context.Context, env Env, cl *client, s *Scenario) (*WatchResult, error) {
	if env.Etcd == nil {
		return nil, errors.New("the watch scenario needs --etcd-servers to write changes")
	}
	writeNS := s.Namespace
	if writeNS == "" {
		writeNS = NamespaceName(env.NamespacePrefix, 0)
	}
	rev, err := env.Etcd.Get(ctx, "lazybench-revision-probe", clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("cannot read etcd revision: %w", err)
	}
	startRV := rev.Header.Revision
	wr := &WatchResult{Watchers: s.Concurrency}
	lat := NewHistogram()

	var (
		mu       sync.Mutex
		written  = map[int64]time.Time{} // revision -> write start
		pending  = map[int64][]time.Time{}
		received atomic.Int64
		recon    atomic.Int64
	)
	deliver := func(rv int64, at time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if t0, ok := written[rv]; ok {
			lat.Record(at.Sub(t0))
			received.Add(1)
			return
		}
		pending[rv] = append(pending[rv], at)
	}

	wctx, stopWatchers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatchers()
	var wg sync.WaitGroup
	ready := make(chan struct{}, s.Concurrency)
	for range s.Concurrency {
		wg.Go(func() {
			lastRV := startRV
			first := true
			for wctx.Err() == nil {
				q := url.Values{"watch": {"true"}, "resourceVersion": {strconv.FormatInt(lastRV, 10)}, "allowWatchBookmarks": {"false"}}
				if s.LabelSelector != "" {
					q.Set("labelSelector", s.LabelSelector)
				}
				if !first {
					recon.Add(1)
				}
				err := cl.watch(wctx, s.Kind.Path(s.Namespace)+"?"+q.Encode(), func() {
					if first {
						first = false
						ready <- struct{}{}
					}
				}, func(ev watchEvent) {
					rv, err := strconv.ParseInt(ev.ResourceVersion, 10, 64)
					if err != nil || ev.Type == "BOOKMARK" || ev.Type == "ERROR" {
						return
					}
					lastRV = rv
					if ev.Type == "ADDED" {
						deliver(rv, time.Now())
					}
				})
				if err != nil && wctx.Err() == nil {
					cl.c.fail(err)
					select {
					case <-wctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		})
	}
	// Wait up to 2 s for every watcher's response headers; a server may
	// hold them until the first event, so writing starts regardless.
	readyBy := time.After(2 * time.Second)
wait:
	for range s.Concurrency {
		select {
		case <-ready:
			wr.Opened++
		case <-ctx.Done():
			break wait
		case <-readyBy:
			break wait
		}
	}

	// Writer: new objects at s.Rate per second.
	var keys []string
	r := rand.New(rand.NewPCG(7, 7))
	cfg := SeedConfig{Namespaces: 1, NamespacePrefix: env.NamespacePrefix, Size: SizeDist{Kind: "fixed", Size: 1024}}
	cfg.setDefaults()
	tick := time.NewTicker(time.Duration(float64(time.Second) / s.Rate))
	seq := int(time.Now().UnixNano() % 1e9)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		seq++
		spec := newSpec(s.Kind, seq, &cfg, r, time.Now())
		spec.namespace = writeNS
		spec.name = "watch-" + suffix(seq)
		spec.labels[GroupLabel] = "g" + strconv.Itoa(seq%10)
		val, err := encode(s.Kind, build(s.Kind, spec, r, 512), false)
		if err != nil {
			return wr, err
		}
		key := storagefmt.Key(env.Prefix, s.Kind.KeyPrefix, writeNS, spec.name)
		t0 := time.Now()
		resp, err := env.Etcd.Put(ctx, key, string(val))
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			return wr, fmt.Errorf("cannot write %q: %w", key, err)
		}
		keys = append(keys, key)
		wr.Writes++
		mu.Lock()
		written[resp.Header.Revision] = t0
		for _, at := range pending[resp.Header.Revision] {
			lat.Record(at.Sub(t0))
			received.Add(1)
		}
		delete(pending, resp.Header.Revision)
		mu.Unlock()
	}
	tick.Stop()
	// Give in-flight events up to a second to arrive.
	deadline := time.Now().Add(time.Second)
	want := wr.Writes * int64(s.Concurrency)
	if s.LabelSelector != "" {
		want = -1
	}
	for time.Now().Before(deadline) && received.Load() < want {
		time.Sleep(10 * time.Millisecond)
	}
	stopWatchers()
	wg.Wait()
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer dcancel()
	for _, k := range keys {
		if _, err := env.Etcd.Delete(dctx, k); err != nil {
			return wr, fmt.Errorf("cannot delete %q: %w", k, err)
		}
	}
	wr.Expected = want
	wr.Received = received.Load()
	wr.Latency = lat.Summary()
	wr.CDF = lat.CDF(200)
	wr.Reconnect = recon.Load()
	return wr, nil
}

// watch streams one watch request, calling opened once the response
// headers arrive and fn per event, until the stream or ctx ends.
func (cl *client) watch(ctx context.Context, path string, opened func(), fn func(watchEvent)) error {
	req, err := cl.t.newRequest(ctx, path, cl.accept)
	if err != nil {
		return err
	}
	if cl.accept == acceptHeaders["protobuf"] {
		req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot watch %s: %w", path, err)
	}
	defer resp.Body.Close()
	cl.c.requests.Add(1)
	cl.c.code(strconv.Itoa(resp.StatusCode))
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		cl.c.errs.Add(1)
		return fmt.Errorf("cannot watch %s: status %d: %s", path, resp.StatusCode, b)
	}
	opened()
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	proto := strings.Contains(resp.Header.Get("Content-Type"), "protobuf")
	var frame []byte
	for {
		var ev watchEvent
		if proto {
			var hdr [4]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return streamEnd(ctx, err)
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if cap(frame) < int(n) {
				frame = make([]byte, n)
			}
			frame = frame[:n]
			if _, err := io.ReadFull(br, frame); err != nil {
				return streamEnd(ctx, err)
			}
			cl.c.bytes.Add(int64(n) + 4)
			ev, err = parseProtoEvent(frame)
			if err != nil {
				return err
			}
		} else {
			line, err := br.ReadSlice('\n')
			if errors.Is(err, bufio.ErrBufferFull) {
				frame = append(frame[:0], line...)
				for errors.Is(err, bufio.ErrBufferFull) {
					line, err = br.ReadSlice('\n')
					frame = append(frame, line...)
				}
				line = frame
			}
			if err != nil {
				return streamEnd(ctx, err)
			}
			cl.c.bytes.Add(int64(len(line)))
			ev, err = parseJSONEvent(line)
			if err != nil {
				return err
			}
		}
		fn(ev)
	}
}

func streamEnd(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
