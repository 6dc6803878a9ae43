package embedetcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Cluster is a real multi-member etcd cluster of embedded servers on
// loopback, for fault tests and the robustness suite (internal/robustness):
// members can be stopped (killed, as far as their peers and clients can
// tell: listeners closed, no goodbye) and started again on the same ports
// and data. It is safe for concurrent use.
type Cluster struct {
	// Client has every member's endpoint.
	Client *clientv3.Client
	// Graceful makes Stop close a member as etcd's own shutdown does: its
	// gRPC servers stop first (in-flight requests end), then the server,
	// a leader handing its leadership over. Without it Stop kills at once
	// (HardStop), which can crash the process: a range in flight on the
	// backend HardStop closed meets a nil bbolt transaction in etcd's
	// embed (the robustness suite's member kills, twice in 15 minutes).
	Graceful bool
	initial  string // --initial-cluster
	mu       sync.Mutex
	members  []*Member
}

// Member is one etcd of a Cluster.
type Member struct {
	Name      string
	Dir       string
	ClientURL url.URL
	PeerURL   url.URL
	etcd      *embed.Etcd // nil while stopped
}

// Endpoint returns the member's client URL, e.g. "http://127.0.0.1:23790".
func (m *Member) Endpoint() string { return m.ClientURL.String() }

// StartCluster starts an n-member cluster with its members' data in
// directories under dir, on free loopback ports; Close stops it.
func StartCluster(dir string, n int) (*Cluster, error) {
	c := &Cluster{}
	var peers []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i), Dir: filepath.Join(dir, fmt.Sprintf("m%d", i))}
		for _, u := range []*url.URL{&m.ClientURL, &m.PeerURL} {
			addr, err := freeAddr()
			if err != nil {
				return nil, err
			}
			*u = url.URL{Scheme: "http", Host: addr}
		}
		c.members = append(c.members, m)
		peers = append(peers, m.Name+"="+m.PeerURL.String())
	}
	c.initial = strings.Join(peers, ",")
	if err := c.StartAll(); err != nil {
		c.Close()
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("cannot connect to the etcd cluster: %w", err)
	}
	c.Client = cli
	return c, nil
}

// Close closes the client and stops every member.
func (c *Cluster) Close() {
	if c.Client != nil {
		c.Client.Close()
	}
	for i := range c.Members() {
		c.Stop(i)
	}
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("cannot pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// Members returns the members in order.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Endpoints returns every member's client URL, in member order.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members() {
		eps = append(eps, m.Endpoint())
	}
	return eps
}

// launch starts member i's server without waiting for it to be ready.
func (c *Cluster) launch(i int) (*embed.Etcd, error) {
	c.mu.Lock()
	m := c.members[i]
	c.mu.Unlock()
	ec := embed.NewConfig()
	ec.Name = m.Name
	ec.Dir = m.Dir
	ec.UnsafeNoFsync = true
	ec.ListenClientUrls = []url.URL{m.ClientURL}
	ec.AdvertiseClientUrls = []url.URL{m.ClientURL}
	ec.ListenPeerUrls = []url.URL{m.PeerURL}
	ec.AdvertisePeerUrls = []url.URL{m.PeerURL}
	ec.InitialCluster = c.initial
	ec.InitialClusterToken = "lazyapi-embedetcd"
	// Elections in a few hundred milliseconds, so that a fault test sees
	// a leader change quickly.
	ec.TickMs = 50
	ec.ElectionMs = 500
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("cannot start etcd member %s: %w", m.Name, err)
	}
	c.mu.Lock()
	m.etcd = e
	c.mu.Unlock()
	return e, nil
}

// StartAll starts every stopped member and waits until all serve (a member
// becomes ready once a quorum is up, so they start together).
func (c *Cluster) StartAll() error {
	var started []*embed.Etcd
	for i, m := range c.Members() {
		if c.running(m) {
			continue
		}
		e, err := c.launch(i)
		if err != nil {
			return err
		}
		started = append(started, e)
	}
	for _, e := range started {
		if err := waitReady(e); err != nil {
			return err
		}
	}
	return nil
}

// Start starts the stopped member i on its ports and data and waits until
// it serves.
func (c *Cluster) Start(i int) error {
	e, err := c.launch(i)
	if err != nil {
		return err
	}
	return waitReady(e)
}

func waitReady(e *embed.Etcd) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s failed: %w", e.Config().Name, err)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("etcd member %s not ready within 30s", e.Config().Name)
	}
}

func (c *Cluster) running(m *Member) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return m.etcd != nil
}

// Stop stops member i (a no-op when stopped): its listeners close and its
// peers and clients lose it at once.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	m := c.members[i]
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		// HardStop first: a killed leader does not hand its leadership
		// over (Close alone does, gracefully).
		if !c.Graceful {
			e.Server.HardStop()
		}
		e.Close()
	}
}

// StopAll stops every member at once (each stop waits for etcd's
// graceful close of its client connections, about 6 s with open watches).
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for i := range c.Members() {
		wg.Add(1)
		go func() { defer wg.Done(); c.Stop(i) }()
	}
	wg.Wait()
}

// Leader returns the index of the current leader, asking each running
// member; -1 when none answers before ctx ends.
func (c *Cluster) Leader(ctx context.Context) int {
	for ctx.Err() == nil {
		for _, m := range c.Members() {
			if !c.running(m) {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := c.Client.Status(sctx, m.Endpoint())
			cancel()
			if err != nil || st.Leader == 0 {
				continue
			}
			for j, m2 := range c.Members() {
				c.mu.Lock()
				e := m2.etcd
				c.mu.Unlock()
				if e != nil && uint64(e.Server.MemberID()) == st.Leader {
					return j
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // polling for an election
		}
	}
	return -1
}

// Partition cuts member i off from the other members while it keeps
// serving its clients: every raft message between it and the others is
// dropped, both ways (etcd's own partition of its integration tests,
// EtcdServer.CutPeer). The member loses its leader (a leader steps down
// after an election timeout without a quorum); linearizable reads on it
// fail, serializable ones answer its last state. Heal ends it. Stopping or
// starting a member in between is not supported.
//
// Why not a TCP proxy blackholing the member's peer port (etcd's
// pkg/proxy, as its functional tests do): raft streams are dialled by the
// receiving member, so such a blackhole cuts only part of the traffic.
// Tried on this cluster (a loopback proxy in front of each peer port, one
// follower's blackholed for 5 s): the follower kept receiving and
// applying the leader's entries through the stream it had dialled itself,
// while its own messages were lost (linearizable reads on it failed) — an
// asymmetric partition. CutPeer drops every message both ways.
func (c *Cluster) Partition(i int) { c.cut(i, true) }

// Heal ends Partition(i).
func (c *Cluster) Heal(i int) { c.cut(i, false) }

func (c *Cluster) cut(i int, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.members[i].etcd
	if x == nil {
		panic(fmt.Sprintf("BUG: embedetcd: partition of stopped member %d", i))
	}
	for j, m := range c.members {
		if j == i || m.etcd == nil {
			continue
		}
		if cut {
			x.Server.CutPeer(m.etcd.Server.MemberID())
			m.etcd.Server.CutPeer(x.Server.MemberID())
		} else {
			x.Server.MendPeer(m.etcd.Server.MemberID())
			m.etcd.Server.MendPeer(x.Server.MemberID())
		}
	}
}
