// Package embedetcd runs an etcd server in the process: lazyapi without
// --etcd-servers, the benchmark harness and tests (through internal/testing/etcdtest).
// Nothing else may import it (internal/boundaries checks).
package embedetcd

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config configures an in-process etcd server.
type Config struct {
	// Dir is the data directory. Required.
	Dir string
	// ClientAddr is the host:port clients connect to. Empty picks a free
	// loopback port.
	ClientAddr string
	// PeerAddr is the host:port for the (single-member) peer listener. Empty
	// picks a free loopback port.
	PeerAddr string
	// UnsafeNoFsync disables fsync; for tests only.
	UnsafeNoFsync bool
	// Logger receives etcd's logs. Nil discards them.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the server to become ready; 0 means 30s.
	StartTimeout time.Duration
}

// Etcd is a running in-process etcd server.
type Etcd struct {
	etcd      *embed.Etcd
	endpoint  string
	closeOnce sync.Once
	lock      *os.File // the data directory's lock (lockDir), nil: none
}

// Start starts a single-member etcd on loopback and waits until it
// serves requests.
func Start(cfg Config) (*Etcd, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("cannot start embedded etcd: data dir is empty")
	}
	// The lock file lives in the directory: make it first (etcd would
	// make it too, but only after the lock).
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the data directory: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started && lock != nil {
			lock.Close()
		}
	}()
	clientAddr, err := addrOrFree(cfg.ClientAddr)
	if err != nil {
		return nil, err
	}
	peerAddr, err := addrOrFree(cfg.PeerAddr)
	if err != nil {
		return nil, err
	}
	ec := embed.NewConfig()
	ec.Name = "lazyapi-embedded"
	ec.Dir = cfg.Dir
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	cu := url.URL{Scheme: "http", Host: clientAddr}
	pu := url.URL{Scheme: "http", Host: peerAddr}
	ec.ListenClientUrls = []url.URL{cu}
	ec.AdvertiseClientUrls = []url.URL{cu}
	ec.ListenPeerUrls = []url.URL{pu}
	ec.AdvertisePeerUrls = []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.LogLevel = "error"
	if cfg.Logger != nil {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)
	} else {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("cannot start embedded etcd in %q: %w", cfg.Dir, err)
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready within %s", timeout)
	}
	started = true
	return &Etcd{etcd: e, endpoint: cu.String(), lock: lock}, nil
}

// Endpoint returns the client URL, e.g. "http://127.0.0.1:23790".
func (e *Etcd) Endpoint() string { return e.endpoint }

// Close stops the server and waits for it to exit. It may be called more
// than once.
func (e *Etcd) Close() {
	e.closeOnce.Do(func() {
		e.etcd.Close()
		if e.lock != nil {
			e.lock.Close()
		}
	})
}

func addrOrFree(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("cannot pick a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
