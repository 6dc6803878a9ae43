package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/lazyapi/lazyapi/bench"
)

func runSuite(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := suiteConfig(args, stdout, stderr)
	if cfg == nil || err != nil {
		return err
	}
	start := time.Now()
	rep, err := bench.RunSuite(ctx, *cfg)
	if rep != nil {
		_ = rep.WriteTerminal(stdout)
		fmt.Fprintf(stdout, "suite took %s; results in %s\n", time.Since(start).Round(time.Second), cfg.Out)
	}
	return err
}

// suiteConfig parses suite's flags; nil, nil for --help.
func suiteConfig(args []string, stdout, stderr io.Writer) (*bench.SuiteConfig, error) {
	d := bench.DefaultSuiteConfig()
	fs := newFlagSet("suite", "suite [flags]", stdout)
	sb := addSideBySide(fs, d.Repo, d.Out)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd started by the suite)"
	fs.Lookup("repo").Usage = "lazyapi source tree (go build ./cmd/lazyapi; bench/kube-apiserver.sh; bench/RESULTS.md)"
	objects := fs.Int("objects", d.Objects, "ConfigMaps to seed")
	nss := fs.Int("namespaces", d.Namespaces, "namespaces to spread them over")
	size := fs.String("size", d.Size.String(), "stored object size distribution")
	listDur := fs.Duration("list-duration", d.ListDuration, "single-client LIST phase")
	floodDur := fs.Duration("flood-duration", d.FloodDuration, "concurrent full LIST phase (json; protobuf gets half)")
	floodC := fs.Int("flood-concurrency", d.FloodConcurrency, "concurrent full LISTs")
	informers := fs.Int("informers", d.Informers, "informers in the informers phase (0 skips it)")
	watchers := fs.Int("watchers", d.Watchers, "watchers in the watch phase, 20 writes/s for 8s (0 skips it)")
	reference := fs.Bool("reference", false, "add the reference server even when kube-apiserver is available")
	noLazy := fs.Bool("skip-lazyapi", false, "leave lazyapi out")
	update := updateResultsFlag(fs, "## suite")
	quiet := fs.Bool("quiet", false, "no status line")
	if help, err := parse(fs, args); help || err != nil {
		return nil, err
	}
	sd, err := bench.ParseSizeDist(*size)
	if err != nil {
		return nil, fmt.Errorf("invalid --size: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find the lazybench binary: %w", err)
	}
	cfg := &bench.SuiteConfig{
		Repo: sb.repo, Out: sb.out, EtcdServers: sb.etcd.servers, Prefix: sb.etcd.prefix, Objects: *objects, Namespaces: *nss, Size: sd,
		ListDuration: *listDur, FloodDuration: *floodDur, FloodConcurrency: *floodC, Informers: *informers, Watchers: *watchers, Idle: d.Idle,
		Reference: *reference, SkipLazyAPI: *noLazy, UpdateResults: *update,
		Command: commandName() + " suite " + strings.Join(args, " "), Self: self, Log: stderr,
	}
	if !*quiet {
		cfg.Status, cfg.StatusTTY = stderr, isTTY(stderr)
	}
	return cfg, nil
}

func runCost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := bench.DefaultCostConfig()
	fs := newFlagSet("cost", "cost [flags]", stdout)
	sb := addSideBySide(fs, d.Repo, d.Out)
	objects := fs.Int("objects", d.Objects, "ConfigMaps to seed")
	namespaces := fs.Int("namespaces", 1, "namespaces the ConfigMaps are spread over; the phases read the first (the others grow the caches)")
	size := fs.String("size", d.Size.String(), "stored object size distribution")
	clients := fs.Int("clients", d.Clients, "concurrent clients per phase")
	dur := fs.Duration("duration", d.Duration, "length of each phase")
	link := fs.Float64("link-rate", d.LinkRate, "bytes/s of the throttled link of the gzip phases (125e6 = 1 Gbit/s)")
	lazyFlags := fs.StringArray("lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	variants := fs.StringArray("lazyapi-variant", nil, `run lazyapi once per variant, with these space-separated flags added ("" for none; repeatable, e.g. --lazyapi-variant=--memory-limit=1Gi --lazyapi-variant "")`)
	skipKube := fs.Bool("skip-kube-apiserver", false, "measure lazyapi only")
	update := updateResultsFlag(fs, "## serving cost")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	sd, err := bench.ParseSizeDist(*size)
	if err != nil {
		return fmt.Errorf("invalid --size: %w", err)
	}
	cfg := bench.CostConfig{Repo: sb.repo, Out: sb.out, EtcdServers: sb.etcd.servers, Prefix: sb.etcd.prefix, Objects: *objects, Namespaces: *namespaces, Size: sd,
		Clients: *clients, Duration: *dur, LinkRate: *link, LazyAPIFlags: *lazyFlags, LazyAPIVariants: *variants, SkipKube: *skipKube, UpdateResults: *update,
		Command: commandName() + " cost " + strings.Join(args, " "), Log: stderr}
	return report(ctx, stdout, cfg, bench.RunCost, (*bench.Report).CostMarkdown)
}

func runStorm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storm", "storm [flags]", stdout)
	sb := addSideBySide(fs, ".", filepath.Join(os.TempDir(), "lazybench-storm"))
	kind := fs.String("kind", "configmap", "kind to seed and read: configmap, secret, pod")
	objects := fs.Int("objects", 10000, "objects to seed (one namespace)")
	size := fs.String("size", "fixed:10KiB", "stored object size distribution")
	rows := fs.StringSlice("rows", []string{"informers:16", "informers:64", "watchlist:256", "listwatch:256"}, "MODE:CLIENTS rows (informers, watchlist, listwatch)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on one run of a row")
	sv := addServers(fs)
	update := updateResultsFlag(fs, "## informer storm")
	profile := fs.Bool("profile", false, "run lazyapi with --profiling and save its heap profile and metrics at each run's peak RSS to OUT/profiles")
	transform := fs.String("informer-transform", "", "what the informers rows' informers keep of each object (client-go SetTransform): empty keeps it whole; strip-data counts its data (checked against etcd's) and keeps its metadata only")
	ownConns := fs.Bool("informer-own-connections", false, "give each informer its own transport and connection, as informers in different pods have (default: client-go's shared transport, one HTTP/2 connection for all to kube-apiserver)")
	distinct := fs.Bool("distinct-addresses", false, "give each informer its own connection from its own loopback address (127.0.1.1, 127.0.1.2, ...), as informers in different pods connect (lazyapi's fair shares see one client each); implies --informer-own-connections")
	gzip := fs.Bool("gzip", false, "WatchList and LIST+WATCH streams ask for gzip as client-go does (Go's transport: Accept-Encoding: gzip, a compressed response decoded; counted); default: no compression asked")
	closeStreams := fs.Bool("close-streams", false, "close each WatchList and LIST+WATCH stream once synced (the older storm rows); default: hold it open to the end of the row, as a reflector's watch stays open")
	hold := fs.Duration("hold", 0, "keep each synced stream and informer open this long after its own sync (issue 29's storm: 150s; within --timeout) and end the row when the last hold ends; 0: to the end of the row (every stream synced or failed)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *hold < 0 {
		return fmt.Errorf("invalid --hold %s: want 0 or a positive duration", *hold)
	}
	k, ok := bench.LookupKind(*kind)
	if !ok {
		return fmt.Errorf("unknown --kind %q", *kind)
	}
	if err := bench.CheckInformerTransform(*transform); err != nil {
		return fmt.Errorf("invalid --informer-transform: %w", err)
	}
	sd, err := bench.ParseSizeDist(*size)
	if err != nil {
		return fmt.Errorf("invalid --size: %w", err)
	}
	var rs []bench.StormRow
	for _, r := range *rows {
		mode, n, ok := strings.Cut(r, ":")
		c, err := strconv.Atoi(n)
		if !ok || err != nil || c <= 0 || (mode != bench.StormInformers && mode != bench.StormWatchList && mode != bench.StormListWatch) {
			return fmt.Errorf("invalid --rows %q: want informers|watchlist|listwatch:N", r)
		}
		rs = append(rs, bench.StormRow{Mode: mode, Clients: c})
	}
	cfg := bench.StormConfig{Repo: sb.repo, Out: sb.out, EtcdServers: sb.etcd.servers, Prefix: sb.etcd.prefix, Kind: k, Objects: *objects, Size: sd,
		Rows: rs, Timeout: *timeout, InformerTransform: *transform, OwnConnections: *ownConns, DistinctAddresses: *distinct, Gzip: *gzip, CloseStreams: *closeStreams, Hold: *hold, LazyAPIFlags: sv.lazyFlags, SkipKube: sv.skipKube, SkipLazyAPI: sv.skipLazy, UpdateResults: *update, Profile: *profile,
		Command: commandName() + " storm " + strings.Join(args, " "), Log: stderr}
	return report(ctx, stdout, cfg, bench.RunStorm, (*bench.StormReport).Markdown)
}

func runKubelet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := bench.DefaultKubeletConfig()
	fs := newFlagSet("kubelet", "kubelet [flags]", stdout)
	sb := addSideBySide(fs, d.Repo, d.Out)
	nodes := fs.Int("nodes", d.Nodes, "simulated nodes (kubelets), each its own client from its own loopback address")
	podsPerNode := fs.Int("pods-per-node", d.PodsPerNode, "Pods on each node (each node watches its Pods by spec.nodeName)")
	replicas := fs.Int("replicas", d.Replicas, "Pods per Deployment")
	spread := fs.Int("nodes-per-deployment", d.NodesPerDeployment, "nodes a Deployment's Pods spread over, evenly (its Secrets and ConfigMaps are watched by each)")
	secrets := fs.Int("secrets-per-pod", d.SecretsPerPod, "Secrets a Pod mounts (its Deployment's; one watch per node by metadata.name)")
	configMaps := fs.Int("configmaps-per-pod", d.ConfigMapsPerPod, "ConfigMaps a Pod mounts (its Deployment's; one watch per node by metadata.name)")
	leaseEvery := fs.Duration("lease-every", d.LeaseEvery, "each node's Lease renewal period")
	podEvery := fs.Duration("pod-update-every", d.PodUpdateEvery, "each Pod's status update period (spread evenly over the Pods)")
	rolloutEvery := fs.Duration("rollout-every", d.RolloutEvery, "period of rollouts: a Deployment's Pods replaced, one of its Secrets rotated")
	dur := fs.Duration("duration", d.Duration, "measured window of writes (then up to 15s for the events to arrive)")
	settle := fs.Duration("settle", d.Settle, "wait before each idle memory reading (server ready; watches open)")
	sameAddr := fs.Bool("same-address", false, "dial every node from 127.0.0.1 (default: node i from its own loopback address 127.0.x.y)")
	sv := addServers(fs)
	update := updateResultsFlag(fs, "## kubelet fan-out (N nodes)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cfg := bench.KubeletConfig{Repo: sb.repo, Out: sb.out, EtcdServers: sb.etcd.servers, Prefix: sb.etcd.prefix,
		Nodes: *nodes, PodsPerNode: *podsPerNode, Replicas: *replicas, NodesPerDeployment: *spread, SecretsPerPod: *secrets, ConfigMapsPerPod: *configMaps,
		LeaseEvery: *leaseEvery, PodUpdateEvery: *podEvery, RolloutEvery: *rolloutEvery, Duration: *dur, Settle: *settle, SameAddress: *sameAddr,
		LazyAPIFlags: sv.lazyFlags, SkipKube: sv.skipKube, SkipLazyAPI: sv.skipLazy, UpdateResults: *update,
		Command: commandName() + " kubelet " + strings.Join(args, " "), Log: stderr}
	if err := cfg.Check(); err != nil {
		return err
	}
	return report(ctx, stdout, cfg, bench.RunKubelet, (*bench.KubeletReport).Markdown)
}

// report runs a side-by-side measurement of cfg and prints its report
// in Markdown to stdout: whatever was measured, also when the run ended
// with an error (the error is returned).
func report[C, R any](ctx context.Context, stdout io.Writer, cfg C, run func(context.Context, C) (*R, error), markdown func(*R) string) error {
	rep, err := run(ctx, cfg)
	if rep != nil {
		fmt.Fprint(stdout, markdown(rep))
	}
	return err
}

// sideBySide are the flags of the commands that start lazyapi and
// kube-apiserver themselves (suite, cost, storm, kubelet): an external
// etcd instead of the embedded one they start, the lazyapi source tree
// (--repo) and the results folder (--out).
type sideBySide struct {
	etcd      etcdFlags
	repo, out string
}

// addSideBySide adds sideBySide's flags to fs with the defaults repo and
// out.
func addSideBySide(fs *pflag.FlagSet, repo, out string) *sideBySide {
	sb := &sideBySide{}
	sb.etcd.add(fs)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd)"
	fs.StringVar(&sb.repo, "repo", repo, "lazyapi source tree")
	fs.StringVar(&sb.out, "out", out, "results folder")
	return sb
}

// servers are the flags of the commands that measure lazyapi and
// kube-apiserver each optionally (storm, kubelet): extra lazyapi flags and
// which of the two to leave out.
type servers struct {
	lazyFlags          []string
	skipKube, skipLazy bool
}

// addServers adds servers' flags to fs.
func addServers(fs *pflag.FlagSet) *servers {
	sv := &servers{}
	fs.StringArrayVar(&sv.lazyFlags, "lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	fs.BoolVar(&sv.skipKube, "skip-kube-apiserver", false, "measure lazyapi only")
	fs.BoolVar(&sv.skipLazy, "skip-lazyapi", false, "measure kube-apiserver only")
	return sv
}
