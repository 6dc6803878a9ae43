package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The kubelet scenario (issue 26): N simulated nodes, each holding the
// watches a kubelet holds — its Pods (fieldSelector=spec.nodeName=NODE,
// all namespaces), its Node and its Lease (metadata.name), and one watch per
// Secret and ConfigMap its Pods mount (metadata.name) — over TLS, each node
// its own client (its own transport and loopback address, as kubelets are
// different machines): one HTTP/2 connection per node to a server that
// negotiates it (kube-apiserver), one HTTP/1.1 connection per watch to one
// that does not (lazyapi). Watches read protobuf, as kubelets do.
//
// Topology: Deployments of Replicas Pods, each spread evenly over
// NodesPerDeployment consecutive nodes; a node runs PodsPerNode Pods; each
// Deployment has SecretsPerPod Secrets and ConfigMapsPerPod ConfigMaps,
// mounted by all its Pods (so watched once per node running one of them).
//
// Write load, the same for every target (the objects are seeded again
// before each target and the schedule is deterministic): every node's Lease
// renewed every LeaseEvery, every Pod's status updated every
// PodUpdateEvery (spread evenly), and every RolloutEvery a rollout: one
// Deployment's Pods replaced (each marked for deletion, deleted, and a new
// Pod created on the same node) and one of its Secrets rotated. Every write
// is stamped with its wall-clock time (annotation kubeletStampKey); a
// watch that receives an ADDED or MODIFIED event records the delay.

// Namespaces and names of the kubelet scenario's objects.
const (
	kubeletNSPrefix   = "lazybench-kubelet-"
	kubeletLeaseNS    = "lazybench-kubelet-node-lease"
	kubeletNodePrefix = "lazybench-node-"
	kubeletStampKey   = "lazybench.io/written"
	kubeletNamespaces = 10
)

// KubeletConfig configures RunKubelet.
type KubeletConfig struct {
	Repo, Out   string
	EtcdServers []string
	Prefix      string
	// LazyAPIBin is a lazyapi binary to run; empty builds one from Repo.
	LazyAPIBin string
	// The topology (see above).
	Nodes, PodsPerNode, Replicas, NodesPerDeployment, SecretsPerPod, ConfigMapsPerPod int
	// The write load.
	LeaseEvery, PodUpdateEvery, RolloutEvery time.Duration
	// Duration is the measured window (the writes); Settle the wait after
	// the watches are open before the idle memory is read.
	Duration, Settle time.Duration
	// SameAddress dials every node from 127.0.0.1 instead of a loopback
	// address of its own.
	SameAddress  bool
	LazyAPIFlags []string
	SkipKube     bool
	SkipLazyAPI  bool
	// KubeScript is bench/kube-apiserver.sh (default: under Repo).
	KubeScript    string
	UpdateResults bool
	Command       string
	Log           io.Writer
}

// DefaultKubeletConfig returns the documented defaults.
func DefaultKubeletConfig() KubeletConfig {
	return KubeletConfig{Repo: ".", Out: filepath.Join(os.TempDir(), "lazybench-kubelet"), Prefix: "/registry",
		Nodes: 1000, PodsPerNode: 30, Replicas: 10, NodesPerDeployment: 2, SecretsPerPod: 3, ConfigMapsPerPod: 2,
		LeaseEvery: 10 * time.Second, PodUpdateEvery: 5 * time.Minute, RolloutEvery: 30 * time.Second,
		Duration: 60 * time.Second, Settle: 5 * time.Second}
}

// Check says what is wrong with the topology, nil when it is consistent.
func (c *KubeletConfig) Check() error {
	switch {
	case c.Nodes <= 0 || c.PodsPerNode <= 0 || c.Replicas <= 0 || c.NodesPerDeployment <= 0:
		return errors.New("--nodes, --pods-per-node, --replicas and --nodes-per-deployment must be positive")
	case c.SecretsPerPod < 0 || c.ConfigMapsPerPod < 0:
		return errors.New("--secrets-per-pod and --configmaps-per-pod must not be negative")
	case c.Replicas%c.NodesPerDeployment != 0:
		return fmt.Errorf("--replicas %d must be a multiple of --nodes-per-deployment %d (a Deployment's Pods spread evenly)", c.Replicas, c.NodesPerDeployment)
	case c.Nodes%c.NodesPerDeployment != 0:
		return fmt.Errorf("--nodes %d must be a multiple of --nodes-per-deployment %d", c.Nodes, c.NodesPerDeployment)
	case (c.PodsPerNode*c.NodesPerDeployment)%c.Replicas != 0:
		return fmt.Errorf("--pods-per-node × --nodes-per-deployment (%d) must be a multiple of --replicas %d", c.PodsPerNode*c.NodesPerDeployment, c.Replicas)
	case c.LeaseEvery <= 0 || c.PodUpdateEvery <= 0 || c.RolloutEvery <= 0 || c.Duration <= 0:
		return errors.New("--lease-every, --pod-update-every, --rollout-every and --duration must be positive")
	}
	return nil
}

// kubeletTopology is the cluster the scenario simulates.
type kubeletTopology struct {
	cfg         KubeletConfig
	deployments int
	depsPerNode int // Deployments with Pods on a node
	perNodeDep  int // Pods of one Deployment on one of its nodes
}

func newKubeletTopology(cfg KubeletConfig) kubeletTopology {
	return kubeletTopology{cfg: cfg, deployments: cfg.Nodes * cfg.PodsPerNode / cfg.Replicas,
		depsPerNode: cfg.PodsPerNode * cfg.NodesPerDeployment / cfg.Replicas, perNodeDep: cfg.Replicas / cfg.NodesPerDeployment}
}

func kubeletNode(n int) string { return fmt.Sprintf("%s%05d", kubeletNodePrefix, n) }

// depNS is Deployment d's namespace.
func depNS(d int) string { return fmt.Sprintf("%s%02d", kubeletNSPrefix, d%kubeletNamespaces) }

func depSecret(d, i int) string    { return fmt.Sprintf("dep-%05d-secret-%d", d, i) }
func depConfigMap(d, i int) string { return fmt.Sprintf("dep-%05d-config-%d", d, i) }

// podNode is the node of replica j of Deployment d.
func (tp kubeletTopology) podNode(d, j int) int {
	group := d / tp.depsPerNode
	return group*tp.cfg.NodesPerDeployment + j%tp.cfg.NodesPerDeployment
}

// nodeDeployments are the Deployments with Pods on node n.
func (tp kubeletTopology) nodeDeployments(n int) []int {
	group := n / tp.cfg.NodesPerDeployment
	ds := make([]int, tp.depsPerNode)
	for i := range ds {
		ds[i] = group*tp.depsPerNode + i
	}
	return ds
}

// watchesPerNode is how many watches each node holds.
func (tp kubeletTopology) watchesPerNode() int {
	return 3 + tp.depsPerNode*(tp.cfg.SecretsPerPod+tp.cfg.ConfigMapsPerPod)
}

// mountedBy is how many nodes watch each of a Deployment's Secrets and
// ConfigMaps.
func (tp kubeletTopology) mountedBy() int { return tp.cfg.NodesPerDeployment }

// cleanKubelet deletes every object of the scenario.
func cleanKubelet(ctx context.Context, cli *clientv3.Client, prefix string) error {
	prefix = strings.TrimSuffix(prefix, "/")
	for _, p := range []string{"/pods/" + kubeletNSPrefix, "/secrets/" + kubeletNSPrefix, "/configmaps/" + kubeletNSPrefix,
		"/leases/" + kubeletLeaseNS + "/", "/minions/" + kubeletNodePrefix, "/namespaces/" + kubeletNSPrefix} {
		if _, err := cli.Delete(ctx, prefix+p, clientv3.WithPrefix()); err != nil {
			return fmt.Errorf("cannot delete %s%s: %w", prefix, p, err)
		}
	}
	return nil
}

// raiseFileLimit raises this process's open-file limit (soft, and hard
// where it may: root with CAP_SYS_RESOURCE) to at least n, for the
// watches' connections; the servers it starts inherit it. It fails, saying
// the limits, when the soft limit stays below n.
func raiseFileLimit(n uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, lim.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return nil
	}
	if lim.Max >= n {
		lim.Cur = n
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
			return nil
		}
	}
	return fmt.Errorf("the watches need %d open files in this process (one connection per watch to an HTTP/1.1 server, and as many in it), "+
		"but the open-file limit is %d (hard %d) and cannot be raised here (ulimit -n; raising the hard limit needs CAP_SYS_RESOURCE): "+
		"fewer --nodes or watches per node", n, lim.Cur, lim.Max)
}

// KubeletResult is the scenario's run against one target.
type KubeletResult struct {
	Target      string `json:"target"`
	Watches     int    `json:"watches"`
	Opened      int    `json:"opened"`
	OpenTime    time.Duration
	Connections int `json:"connections"` // established TCP connections to the server's port, watches open
	// Writes in the measured window and the watch events they must
	// deliver; Delivered counts ADDED, MODIFIED and DELETED events
	// received from the window's start until drained (or DrainWait).
	Writes    int64 `json:"writes"`
	Expected  int64 `json:"expected_events"`
	Delivered int64 `json:"delivered_events"`
	Bookmarks int64 `json:"bookmarks"`
	// Cut counts watch streams that ended before the run did (each is
	// opened again from its last resourceVersion); Refused counts watch
	// requests answered other than 200 (429s included); ErrorEvents ERROR
	// events.
	Cut, Refused, ErrorEvents int64
	FirstError                string `json:"first_error,omitempty"`
	// CPU is the server's CPU time (user+system, /proc) over the window and
	// the drain.
	CPU    time.Duration
	Window time.Duration // window and drain
	// Latency is each timed event's delivery latency (ADDED and MODIFIED:
	// DELETED events carry no stamp) from its write's stamp, taken before
	// the object is encoded and written: it includes etcd's write latency.
	Latency Percentiles `json:"latency"`
	// LatencyFromAck is the same events' latency from etcd's
	// acknowledgement of their write (the writer's Put or Delete
	// returning), matched by the event's resourceVersion: the server's
	// part and the client's, without etcd's. AckNegative counts events
	// that arrived before the writer saw the acknowledgement (recorded as
	// 0), AckUnmatched events whose revision had no recorded write,
	// AckOverflow writes not recorded (more than the schedule's).
	LatencyFromAck Percentiles `json:"latency_from_ack"`
	AckNegative    int64       `json:"ack_negative"`
	AckUnmatched   int64       `json:"ack_unmatched"`
	AckOverflow    int64       `json:"ack_overflow,omitempty"`
	// EtcdWrite is etcd's write latency per write of the window: from the
	// stamp (a Delete: from its request) to the acknowledgement.
	EtcdWrite Percentiles `json:"etcd_write_latency"`
	// SlowestFromAck are the events slowest from the acknowledgement,
	// slowest first.
	SlowestFromAck []KubeletSlowEvent `json:"slowest_from_ack,omitempty"`

	IdleRSS  int64 `json:"idle_rss_bytes"`    // before the watches
	WatchRSS int64 `json:"watches_rss_bytes"` // watches open, idle
	PeakRSS  int64 `json:"peak_rss_bytes"`    // during the window
	// SteadyRSS is the median of the samples of the window's second half.
	SteadyRSS int64 `json:"steady_rss_bytes"`
}

// CPUPerEvent is the server's CPU time per delivered event.
func (r KubeletResult) CPUPerEvent() time.Duration {
	if r.Delivered == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Delivered)
}

// PerWatch is the RSS added by the idle watches, per watch.
func (r KubeletResult) PerWatch() int64 {
	if r.Opened == 0 {
		return 0
	}
	return (r.WatchRSS - r.IdleRSS) / int64(r.Opened)
}

// KubeletReport is a kubelet scenario's results.
type KubeletReport struct {
	Date    time.Time       `json:"date"`
	Command string          `json:"command"`
	Machine Machine         `json:"machine"`
	Load    string          `json:"load"`
	Data    string          `json:"data"`
	Notes   []string        `json:"notes,omitempty"`
	Results []KubeletResult `json:"results"`
}

// RunKubelet runs the scenario against lazyapi and kube-apiserver (when
// built), one after the other, on the same etcd.
func RunKubelet(ctx context.Context, cfg KubeletConfig) (*KubeletReport, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	tp := newKubeletTopology(cfg)
	watches := cfg.Nodes * tp.watchesPerNode()
	// The harness holds a connection per watch to an HTTP/1.1 server (and
	// the server as many, under the same limit).
	if err := raiseFileLimit(uint64(watches) + 1024); err != nil {
		return nil, err
	}
	h, err := newHarness(cfg.Out, cfg.EtcdServers, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer h.close()
	rep := &KubeletReport{Date: time.Now().UTC().Truncate(time.Second), Command: cfg.Command, Machine: ThisMachine(), Load: loadAvg()}
	rep.Data = fmt.Sprintf("%d nodes × %d Pods (%d Pods, Deployments of %d over %d nodes: %d Deployments), %d Secrets and %d ConfigMaps per Deployment; "+
		"%d watches per node (Pods by spec.nodeName, Node, Lease, %d mounted Secrets and ConfigMaps by metadata.name), %d in all, protobuf over TLS; "+
		"writes: each Lease renewed every %s, each Pod's status every %s, a rollout (a Deployment's %d Pods replaced, one of its Secrets rotated) every %s; window %s",
		cfg.Nodes, cfg.PodsPerNode, cfg.Nodes*cfg.PodsPerNode, cfg.Replicas, cfg.NodesPerDeployment, tp.deployments, cfg.SecretsPerPod, cfg.ConfigMapsPerPod,
		tp.watchesPerNode(), tp.watchesPerNode()-3, watches, cfg.LeaseEvery, cfg.PodUpdateEvery, cfg.Replicas, cfg.RolloutEvery, cfg.Duration)
	if n := commitNote(ctx, cfg.Repo); n != "" {
		rep.Notes = append(rep.Notes, n)
	}
	if cfg.SameAddress {
		rep.Notes = append(rep.Notes, "every node dials from 127.0.0.1 (--same-address)")
	} else {
		rep.Notes = append(rep.Notes, "each node its own client: own transport, own loopback address (127.0.x.y)")
	}
	starters, notes, err := kubeletStarters(ctx, cfg, h)
	rep.Notes = append(rep.Notes, notes...)
	if err != nil {
		return rep, err
	}
	for _, st := range starters {
		if ctx.Err() != nil {
			break
		}
		r, err := runKubeletTarget(ctx, cfg, tp, h, st)
		if err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", st.name, err))
			h.logf("%s: %v", st.name, err)
			continue
		}
		h.logf("%s", r.line())
		rep.Results = append(rep.Results, r)
	}
	if err := cleanKubelet(context.WithoutCancel(ctx), h.cli, cfg.Prefix); err != nil {
		rep.Notes = append(rep.Notes, err.Error())
	}
	if err := writeJSONFile(filepath.Join(cfg.Out, "kubelet.json"), rep); err != nil {
		return rep, err
	}
	if cfg.UpdateResults {
		if err := UpdateResultsSection(filepath.Join(cfg.Repo, "bench", "RESULTS.md"), fmt.Sprintf("kubelet fan-out (%d nodes)", cfg.Nodes), rep.Markdown()); err != nil {
			return rep, err
		}
	}
	return rep, ctx.Err()
}

func kubeletStarters(ctx context.Context, cfg KubeletConfig, h *harness) ([]starter, []string, error) {
	var starters []starter
	var notes []string
	if !cfg.SkipLazyAPI {
		bin := cfg.LazyAPIBin
		if bin == "" {
			var err error
			if bin, err = BuildLazyAPI(ctx, cfg.Repo, cfg.Out); err != nil {
				return nil, nil, err
			}
		}
		starters = append(starters, starter{"lazyapi", "/readyz", func() (*Proc, error) {
			return StartLazyAPI(bin, h.etcd, cfg.Prefix, h.logDir, cfg.LazyAPIFlags...)
		}})
	}
	script := cfg.KubeScript
	if script == "" {
		script = filepath.Join(cfg.Repo, "bench", "kube-apiserver.sh")
	}
	if !cfg.SkipKube {
		if _, kerr := KubeAPIServerBinary(ctx, script); kerr == nil {
			starters = append(starters, starter{"kube-apiserver", "/readyz", func() (*Proc, error) {
				return StartKubeAPIServer(script, h.etcd, cfg.Prefix, h.logDir, true)
			}})
		} else {
			notes = append(notes, "kube-apiserver: "+kerr.Error())
		}
	}
	return starters, notes, nil
}

// runKubeletTarget seeds the objects, starts the target, opens the
// watches, runs the write load and measures.
func runKubeletTarget(ctx context.Context, cfg KubeletConfig, tp kubeletTopology, h *harness, st starter) (KubeletResult, error) {
	res := KubeletResult{Target: st.name, Watches: cfg.Nodes * tp.watchesPerNode()}
	if err := cleanKubelet(ctx, h.cli, cfg.Prefix); err != nil {
		return res, err
	}
	w := newKubeletWriter(h.cli, cfg, tp)
	acks := newKubeletAcks(w.windowWrites(cfg.Duration))
	w.acks = acks
	h.logf("%s: seeding %d nodes' objects", st.name, cfg.Nodes)
	r0, err := w.seed(ctx)
	if err != nil {
		return res, err
	}
	p, err := h.startReady(ctx, st)
	if err != nil {
		return res, err
	}
	defer p.Stop()
	if err := waitKubeletReady(ctx, p.Target, tp); err != nil {
		return res, err
	}
	sampler, err := newMemSampler(p.Target, 250*time.Millisecond)
	if err != nil {
		return res, err
	}
	sctx, stopSampler := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Go(func() { sampler.run(sctx) })
	defer func() { stopSampler(); swg.Wait() }()
	sleepCtx(ctx, cfg.Settle)
	res.IdleRSS = medianRSS(sampler, time.Since(sampler.start)-cfg.Settle/2, time.Since(sampler.start))

	cl := newKubeletClients(p.Target, cfg, tp, r0)
	cl.acks = acks
	defer cl.close()
	h.logf("%s: opening %d watches", st.name, res.Watches)
	t0 := time.Now()
	res.Opened = cl.open(ctx)
	res.OpenTime = time.Since(t0)
	if res.Opened < res.Watches {
		h.logf("%s: %d of %d watches opened: %s", st.name, res.Opened, res.Watches, cl.firstErr())
	}
	sleepCtx(ctx, cfg.Settle)
	res.Connections = countConnections(p.Target)
	res.WatchRSS = medianRSS(sampler, time.Since(sampler.start)-cfg.Settle/2, time.Since(sampler.start))

	h.logf("%s: %d watches open in %s; writing for %s", st.name, res.Opened, res.OpenTime.Round(time.Millisecond), cfg.Duration)
	cl.measure(true)
	cpu0, err := ProcCPU(p.Target.PID)
	if err != nil {
		return res, err
	}
	winStart := time.Since(sampler.start)
	start := time.Now()
	res.Writes, res.Expected = w.run(ctx, cfg.Duration)
	winEnd := time.Since(sampler.start)
	cl.drain(ctx, res.Expected, 15*time.Second)
	res.Window = time.Since(start)
	cpu1, err := ProcCPU(p.Target.PID)
	if err != nil {
		return res, err
	}
	cl.measure(false)
	res.CPU = cpu1 - cpu0
	cl.result(&res)
	if werr := w.firstErr(); werr != "" && res.FirstError == "" {
		res.FirstError = "write: " + werr
	}
	mem, _ := sampler.result()
	for _, s := range mem {
		if s.T >= winStart {
			res.PeakRSS = max(res.PeakRSS, s.RSS)
		}
	}
	res.SteadyRSS = medianRSS(sampler, winStart+(winEnd-winStart)/2, winEnd)
	return res, nil
}

// waitKubeletReady waits until the target serves the scenario's
// resources (a LIST of each answers 200).
func waitKubeletReady(ctx context.Context, t Target, tp kubeletTopology) error {
	hc, err := t.httpClient(1)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	paths := []string{"/api/v1/pods?limit=1", "/api/v1/nodes?limit=1", "/apis/coordination.k8s.io/v1/namespaces/" + kubeletLeaseNS + "/leases?limit=1",
		"/api/v1/secrets?limit=1", "/api/v1/configmaps?limit=1"}
	deadline := time.Now().Add(2 * time.Minute)
	for _, p := range paths {
		for {
			req, err := t.newRequest(ctx, p, "application/json")
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not serve %s after 2 minutes (%v)", t.Name, p, err)
			}
			sleepCtx(ctx, 250*time.Millisecond)
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// medianRSS is the median of the sampler's samples between from and to.
func medianRSS(m *memSampler, from, to time.Duration) int64 {
	mem, _ := m.result()
	var v []int64
	for _, s := range mem {
		if s.T >= from && s.T <= to {
			v = append(v, s.RSS)
		}
	}
	if len(v) == 0 {
		if len(mem) == 0 {
			return 0
		}
		return mem[len(mem)-1].RSS
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func (r KubeletResult) line() string {
	return fmt.Sprintf("%s: %d/%d watches (%s to open), %d connections; %d writes, %d/%d events delivered, %d bookmarks, cut %d, refused %d, ERROR %d; "+
		"CPU %s over %s = %s per event; latency p50 %.1f ms p99 %.1f ms; from etcd's ack p50 %.1f ms p99 %.1f ms p99.9 %.1f ms max %.1f ms (%d before the ack, %d unmatched); "+
		"etcd write p50 %.1f ms p99 %.1f ms max %.1f ms; RSS idle %s, watches %s (%s KiB per watch), peak %s, steady %s MiB %s",
		r.Target, r.Opened, r.Watches, r.OpenTime.Round(time.Millisecond), r.Connections, r.Writes, r.Delivered, r.Expected, r.Bookmarks, r.Cut, r.Refused, r.ErrorEvents,
		r.CPU, r.Window.Round(time.Millisecond), r.CPUPerEvent().Round(100*time.Nanosecond), r.Latency.P50, r.Latency.P99,
		r.LatencyFromAck.P50, r.LatencyFromAck.P99, r.LatencyFromAck.P999, r.LatencyFromAck.Max, r.AckNegative, r.AckUnmatched,
		r.EtcdWrite.P50, r.EtcdWrite.P99, r.EtcdWrite.Max,
		mib(r.IdleRSS), mib(r.WatchRSS), f1(float64(r.PerWatch())/1024), mib(r.PeakRSS), mib(r.SteadyRSS), r.FirstError)
}

// Markdown renders the report as a section body, with the ratios of
// lazyapi's figures to kube-apiserver's when both ran.
func (r *KubeletReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Date: %s. Machine: %s. Load average at the start: %s.\n\nCommand:\n\n    %s\n\nData and load: %s.\n\n", r.Date.Format("2006-01-02 15:04 UTC"), r.Machine, r.Load, r.Command, r.Data)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	b.WriteString("\n| target | watches open | connections | writes | events delivered / expected | cut | refused | server CPU per event µs | p50 ms | p99 ms | p50 from etcd's ack ms | p99 from ack ms | p99.9 from ack ms | etcd write p50 / p99 / max ms | RSS idle MiB | RSS watches open MiB | per idle watch KiB | peak RSS MiB | steady RSS MiB |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	byName := map[string]KubeletResult{}
	for _, res := range r.Results {
		byName[res.Target] = res
		fmt.Fprintf(&b, "| %s | %d/%d | %d | %d | %d / %d | %d | %d | %s | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s | %s | %s |\n", res.Target, res.Opened, res.Watches, res.Connections, res.Writes,
			res.Delivered, res.Expected, res.Cut, res.Refused, f1(float64(res.CPUPerEvent().Nanoseconds())/1000), f1(res.Latency.P50), f1(res.Latency.P99),
			f1(res.LatencyFromAck.P50), f1(res.LatencyFromAck.P99), f1(res.LatencyFromAck.P999), f1(res.EtcdWrite.P50), f1(res.EtcdWrite.P99), f1(res.EtcdWrite.Max),
			mib(res.IdleRSS), mib(res.WatchRSS), f1(float64(res.PerWatch())/1024), mib(res.PeakRSS), mib(res.SteadyRSS))
	}
	b.WriteString("\n")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "- %s: %d timed events from etcd's ack (%d arrived before the writer saw the ack, counted as 0; %d unmatched); slowest from the ack:", res.Target,
			res.LatencyFromAck.Count, res.AckNegative, res.AckUnmatched)
		for i, e := range res.SlowestFromAck {
			if i == 5 {
				break
			}
			fmt.Fprintf(&b, " %s ms at %s s (%s, %s, etcd write %s ms);", f1(e.FromAckMillis), f1(e.AtMillis/1000), e.Arrived.Format("15:04:05.000"), e.Write, f1(e.EtcdMillis))
		}
		b.WriteString("\n")
	}
	l, lok := byName["lazyapi"]
	k, kok := byName["kube-apiserver"]
	if lok && kok && k.CPUPerEvent() > 0 && k.Latency.P99 > 0 && k.PeakRSS > 0 {
		fromAck := "n/a"
		if k.LatencyFromAck.P99 > 0 {
			fromAck = f2(l.LatencyFromAck.P99 / k.LatencyFromAck.P99)
		}
		fmt.Fprintf(&b, "\nlazyapi / kube-apiserver: CPU per event %s (target ≤ 0.5), p99 delivery %s (target ≤ 1; from etcd's ack %s), peak RSS %s, steady RSS %s (target ≤ 0.5).\n",
			f2(float64(l.CPUPerEvent())/float64(k.CPUPerEvent())), f2(l.Latency.P99/k.Latency.P99), fromAck, f2(float64(l.PeakRSS)/float64(k.PeakRSS)), f2(float64(l.SteadyRSS)/float64(k.SteadyRSS)))
	}
	return b.String()
}

// countConnections counts the established TCP connections whose local
// port is t's (the server's side of its clients' connections), from
// /proc/net/tcp and tcp6.
func countConnections(t Target) int {
	i := strings.LastIndexByte(t.URL, ':')
	if i < 0 {
		return -1
	}
	var port int
	if _, err := fmt.Sscanf(t.URL[i+1:], "%d", &port); err != nil {
		return -1
	}
	want := fmt.Sprintf(":%04X", port)
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && fs[3] == "01" {
				n++
			}
		}
	}
	return n
}

// writeJSONFile writes v as indented JSON to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
