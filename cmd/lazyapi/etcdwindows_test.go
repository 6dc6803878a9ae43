package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestEtcdClientSendsNoPingPerEvent: lazyapi's etcd client (its fixed
// flow-control windows, etcdWindows) sends etcd no HTTP/2 PING while a
// watch receives events one response at a time; grpc-go's default client
// (its bandwidth-delay estimator) sends about one per response, each a
// wake-up of the client's writer and, for its acknowledgement, its reader.
// The PINGs are counted on the wire, between the client and a real etcd.
func TestEtcdClientSendsNoPingPerEvent(t *testing.T) {
	srv := etcdtest.Start(t)
	const events = 40
	for _, tc := range []struct {
		name    string
		cfg     func(endpoint string) clientv3.Config
		atLeast int // PINGs
		atMost  int
	}{
		{"grpc default", func(ep string) clientv3.Config {
			return clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
		}, events / 4, 1 << 30},
		{"lazyapi", func(ep string) clientv3.Config {
			return (&Options{}).etcdClientConfig([]string{ep}, zap.NewNop(), nil)
		}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pings atomic.Int64
			cli, err := clientv3.New(tc.cfg(pingCounter(t, srv, &pings).URL()))
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			key := "/windows/" + strings.ReplaceAll(tc.name, " ", "-")
			put, err := srv.Client.Put(ctx, key, "0")
			if err != nil {
				t.Fatal(err)
			}
			// From the first write's revision: its event says the watch
			// is open.
			wch := cli.Watch(ctx, key, clientv3.WithRev(put.Header.Revision))
			if wr := <-wch; wr.Err() != nil || len(wr.Events) != 1 {
				t.Fatalf("first watch response: %v, %d events", wr.Err(), len(wr.Events))
			}
			before := pings.Load()
			for i := range events {
				// Written by another client: the watched client's
				// connection carries only the watch's responses.
				if _, err := srv.Client.Put(ctx, key, strings.Repeat("v", 100+i)); err != nil {
					t.Fatal(err)
				}
				wr, ok := <-wch
				if !ok || wr.Err() != nil || len(wr.Events) != 1 {
					t.Fatalf("event %d: open %v, %v, %d events", i, ok, wr.Err(), len(wr.Events))
				}
				time.Sleep(5 * time.Millisecond) // each response alone, as sparse writes come
			}
			time.Sleep(50 * time.Millisecond) // a PING written after the last event
			n := int(pings.Load() - before)
			t.Logf("%d PINGs for %d watch responses", n, events)
			if n < tc.atLeast || n > tc.atMost {
				t.Fatalf("%d PINGs for %d watch responses, want %d to %d", n, events, tc.atLeast, tc.atMost)
			}
		})
	}
}

// pingCounter returns a proxy to srv that counts in pings the HTTP/2 PING
// frames (not their acknowledgements) its clients send.
func pingCounter(t *testing.T, srv *etcdtest.Server, pings *atomic.Int64) *etcdtest.Proxy {
	t.Helper()
	p := etcdtest.NewProxy(t, strings.TrimPrefix(srv.Endpoint, "http://"))
	p.TapSent(func() io.Writer {
		r, w := io.Pipe()
		go func() {
			countPings(r, pings)
			r.Close() // the proxy stops writing to it
		}()
		return w
	})
	return p
}

// countPings reads a client's HTTP/2 stream (the preface, then frames:
// a 9-byte header of length, type, flags and stream) until it ends.
func countPings(r io.Reader, pings *atomic.Int64) {
	br := bufio.NewReader(r)
	if _, err := io.ReadFull(br, make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))); err != nil {
		return
	}
	var h [9]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(append([]byte{0}, h[:3]...)))
		if h[3] == 0x6 && h[4]&0x1 == 0 { // PING, not ACK
			pings.Add(1)
		}
		if _, err := br.Discard(n); err != nil {
			return
		}
	}
}
