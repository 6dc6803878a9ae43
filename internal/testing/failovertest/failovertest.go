// Package failovertest runs a store.Failover over the members of a real
// multi-member etcd (internal/testing/etcdtest.Cluster) for the tests of store and
// cache. It is not part of internal/testing/etcdtest, which store's own tests
// import, and takes the members' endpoints rather than the cluster, so
// that only etcdtest links the embedded etcd (internal/boundaries).
package failovertest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lazyapi/lazyapi/store"
)

// Setup is a store.Failover probing etcd members until the test ends.
type Setup struct {
	// Client is the client Failover points at the members it chose.
	Client *clientv3.Client
	// Failover runs until the test ends.
	Failover *store.Failover
}

// Start starts a Failover with cfg over the members at cfg.Endpoints (a
// Cluster's Endpoints) through a client of its own (with cfg.Retry
// installed when set). Run stops and the
// client closes when the test ends, before the cleanups registered
// earlier (the cluster's).
func Start(tb testing.TB, cfg store.FailoverConfig) *Setup {
	tb.Helper()
	eps := cfg.Endpoints
	var dial []grpc.DialOption
	if cfg.Retry != nil {
		dial = append(dial, cfg.Retry.DialOption()) // as cmd/lazyapi does
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), DialOptions: dial})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f, err := store.NewFailover(ctx, cli, cfg)
	if err != nil {
		cancel()
		cli.Close()
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	tb.Cleanup(func() {
		cancel()
		<-done
		f.Close()
		cli.Close()
	})
	return &Setup{Client: cli, Failover: f}
}

// Wait returns how long it took until there holds, checked now and at
// each switch of the Failover; it fails tb when bound passes without a
// switch while there does not hold.
func (s *Setup) Wait(tb testing.TB, what string, bound time.Duration, there func() bool) time.Duration {
	tb.Helper()
	t0 := time.Now()
	for {
		_, moved := s.Failover.Moved()
		if there() {
			return time.Since(t0)
		}
		select {
		case <-moved:
		case <-time.After(bound):
			tb.Fatalf("%s: the client did not move within %s: endpoints %v, %+v", what, bound, s.Client.Endpoints(), s.Failover.Status())
		}
	}
}
