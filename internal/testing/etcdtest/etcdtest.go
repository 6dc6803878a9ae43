// Package etcdtest starts a real, embedded etcd server on loopback for tests.
package etcdtest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

// Server is a running embedded etcd with a connected client.
type Server struct {
	Embedded *embedetcd.Etcd
	Client   *clientv3.Client
	Endpoint string
}

// Start starts an embedded etcd in t.TempDir on random loopback ports and
// stops it when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	var (
		e   *embedetcd.Etcd
		err error
	)
	// A free port picked by the OS can be taken again before etcd binds it;
	// try a few times.
	for range 5 {
		e, err = embedetcd.Start(embedetcd.Config{Dir: tb.TempDir(), UnsafeNoFsync: true})
		if err == nil {
			break
		}
	}
	if err != nil {
		tb.Fatalf("cannot start embedded etcd: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		e.Close()
		tb.Fatalf("cannot connect to embedded etcd: %v", err)
	}
	tb.Cleanup(func() {
		cli.Close()
		e.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "health"); err != nil {
		tb.Fatalf("embedded etcd does not answer: %v", err)
	}
	return &Server{Embedded: e, Client: cli, Endpoint: e.Endpoint()}
}
