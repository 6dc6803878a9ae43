// Command lazybench seeds etcd in kube-apiserver's storage format and
// benchmarks Kubernetes read APIs (lazyapi, kube-apiserver) side by side.
//
//	lazybench seed --etcd-servers URL --kind configmap --count 10000 --size lognormal:32KiB --namespaces 10
//	lazybench clean --etcd-servers URL
//	lazybench run list --etcd-servers URL --target lazyapi=http://127.0.0.1:8080 --target kube-apiserver=https://127.0.0.1:6443 --token ...
//	lazybench suite
//	lazybench refserver --etcd-servers URL --port 8081
//	lazybench robustness --duration 1h --seed 1
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/term"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lazybench:", err)
		os.Exit(1)
	}
}

const usage = `Usage: lazybench COMMAND [flags]

Commands:
  seed       write objects into etcd in kube-apiserver's storage format
  clean      remove what seed wrote
  run        run a scenario (list, get, watch, listflood, informers, mixed) against targets
  suite      the standard suite against lazyapi and kube-apiserver (or the reference server)
  storm      informer storms: many informers / WatchList / LIST+WATCH streams at once, lazyapi and kube-apiserver
  kubelet    kubelet-shaped watch fan-out: N nodes' Pod, Node, Lease, Secret and ConfigMap watches under Pod, Lease and rollout writes, lazyapi and kube-apiserver
  cost       server CPU per MiB served, lazyapi and kube-apiserver over TLS (gzip over a throttled link too)
  refserver  serve the reference read API (what kube-apiserver does per request) on loopback
  etcd       run an embedded etcd (for trying things without one)
  record     rewrite the ## suite section of bench/RESULTS.md from a suite's results.json
  probe      the listflood GET probe as a process of its own (started by run --probe-process)
  robustness seeded traffic and faults against lazyapi on a 3-member etcd, every answer checked against etcd's history

Run "lazybench COMMAND --help" for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "seed":
		return runSeed(ctx, args, stdout, stderr)
	case "clean":
		return runClean(ctx, args, stdout)
	case "run":
		return runRun(ctx, args, stdout, stderr)
	case "suite":
		return runSuite(ctx, args, stdout, stderr)
	case "cost":
		return runCost(ctx, args, stdout, stderr)
	case "storm":
		return runStorm(ctx, args, stdout, stderr)
	case "kubelet":
		return runKubelet(ctx, args, stdout, stderr)
	case "refserver":
		return runRefServer(ctx, args, stderr)
	case "etcd":
		return runEtcd(ctx, args, stderr)
	case "record":
		return runRecord(args, stdout)
	case "probe":
		return runProbe(ctx, args, os.Stdin, stdout)
	case "robustness":
		return runRobustness(ctx, args, stdout, stderr)
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

// etcdFlags are shared by every command that talks to etcd.
type etcdFlags struct {
	servers []string
	prefix  string
}

func (e *etcdFlags) add(fs *pflag.FlagSet) {
	fs.StringSliceVar(&e.servers, "etcd-servers", nil, "etcd servers (scheme://host:port), comma separated (required)")
	fs.StringVar(&e.prefix, "etcd-prefix", "/registry", "the prefix kube-apiserver stores resources under")
}

func (e *etcdFlags) connect(required bool) (*clientv3.Client, error) {
	if len(e.servers) == 0 {
		if required {
			return nil, errors.New("--etcd-servers is required (e.g. --etcd-servers http://127.0.0.1:2379)")
		}
		return nil, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.servers, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallSendMsgSize: 2 << 20})
	if err != nil {
		return nil, fmt.Errorf("cannot connect to etcd %v: %w", e.servers, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cli.Get(ctx, "lazybench-health", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("cannot reach etcd %v (--etcd-servers): %w", e.servers, err)
	}
	return cli, nil
}

func newFlagSet(name, synopsis string, stdout io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: lazybench %s\n\nFlags:\n%s", synopsis, fs.FlagUsages())
	}
	return fs
}

func parse(fs *pflag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return true, nil
		}
		return false, fmt.Errorf("%w (see --help)", err)
	}
	return false, nil
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func runSeed(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("seed", "seed [flags]", stdout)
	var (
		ef        etcdFlags
		kind      = fs.String("kind", "configmap", "kind to seed: configmap, secret, pod, widget (a custom resource; its CRD is seeded too)")
		count     = fs.Int("count", 1000, "number of objects")
		nss       = fs.Int("namespaces", 1, "spread the objects over this many namespaces")
		nsPrefix  = fs.String("namespace-prefix", bench.DefaultNamespacePrefix, "prefix of the seeded namespaces (clean removes by it)")
		size      = fs.String("size", "4KiB", "stored object size: SIZE, fixed:SIZE, uniform:MIN-MAX, lognormal:MEDIAN[:SIGMA]")
		asJSON    = fs.Bool("json", false, "store built-in kinds as JSON (kube-apiserver --storage-media-type=application/json); custom resources are always JSON")
		seed      = fs.Uint64("seed", 1, "random seed (same seed, same objects)")
		inFlight  = fs.Int("in-flight", 8, "concurrent etcd transactions")
		quiet     = fs.Bool("quiet", false, "no progress bar")
		cleanMode = fs.Bool("clean-first", false, "remove previously seeded objects first")
	)
	ef.add(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	k, ok := bench.LookupKind(*kind)
	if !ok {
		return fmt.Errorf("unknown --kind %q (want configmap, secret, pod or widget)", *kind)
	}
	sd, err := bench.ParseSizeDist(*size)
	if err != nil {
		return fmt.Errorf("invalid --size: %w", err)
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	if *cleanMode {
		if _, err := bench.Clean(ctx, cli, bench.CleanConfig{Prefix: ef.prefix, NamespacePrefix: *nsPrefix}); err != nil {
			return err
		}
	}
	cfg := bench.SeedConfig{Prefix: ef.prefix, Kind: k, Count: *count, Namespaces: *nss, NamespacePrefix: *nsPrefix, Size: sd, JSON: *asJSON, Seed: *seed, InFlight: *inFlight}
	if !*quiet && isTTY(stderr) {
		cfg.Progress = stderr
	}
	res, err := bench.Seed(ctx, cli, cfg)
	if err != nil {
		return err
	}
	format := "protobuf"
	if k.Custom || *asJSON {
		format = "JSON"
	}
	fmt.Fprintf(stdout, "seeded %d %s (%s, %s) in %d namespaces: %s in %d transactions, %s (%.0f objects/s), etcd revision %d\n",
		res.Objects, k.Resource, sd, format, res.Namespaces, bench.HumanBytes(res.Bytes), res.Txns, res.Duration.Round(time.Millisecond),
		float64(res.Objects)/res.Duration.Seconds(), res.Revision)
	return nil
}

func runClean(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("clean", "clean [flags]", stdout)
	var ef etcdFlags
	nsPrefix := fs.String("namespace-prefix", bench.DefaultNamespacePrefix, "prefix of the seeded namespaces")
	ef.add(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	n, err := bench.Clean(ctx, cli, bench.CleanConfig{Prefix: ef.prefix, NamespacePrefix: *nsPrefix})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deleted %d keys (namespaces %s* and their seeded objects)\n", n, *nsPrefix)
	return nil
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("run", "run SCENARIO [flags]   (SCENARIO: "+strings.Join(bench.Scenarios, ", ")+")", stdout)
	var (
		ef          etcdFlags
		targets     = fs.StringArray("target", nil, "NAME=URL of a server to measure (repeatable)")
		tokens      = fs.StringArray("token", nil, "NAME=TOKEN bearer token for a target (repeatable)")
		kubeconfigs = fs.StringArray("kubeconfig", nil, "NAME=PATH kubeconfig for a target (repeatable)")
		pids        = fs.StringArray("pid", nil, "NAME=PID local process of a target: RSS from /proc (else scraped from URL/metrics)")
		reference   = fs.Bool("reference", false, "also start the bench reference server (needs --etcd-servers) as target \"reference\"")
		kind        = fs.String("kind", "configmap", "kind to read: configmap, secret, pod, widget")
		ns          = fs.String("namespace", "", "namespace to read (default: all namespaces)")
		conc        = fs.Int("concurrency", 0, "concurrent clients / watchers / informers (default per scenario)")
		dur         = fs.Duration("duration", 10*time.Second, "load duration per target")
		rate        = fs.Float64("rate", 0, "requests/s over all clients (0: unlimited); for watch, changes written per second (default 10)")
		limit       = fs.Int("limit", 0, "page LISTs with limit= (0: full lists)")
		accept      = fs.String("accept", "json", "response format: json, protobuf or table")
		selector    = fs.String("selector", "", "label selector for LISTs and watches (e.g. lazybench.io/group=g3)")
		rv          = fs.String("resource-version", "", "resourceVersion for LISTs (\"0\": from a watch cache)")
		idle        = fs.Duration("idle", 2*time.Second, "memory sampling before the load starts")
		sample      = fs.Duration("sample-every", 200*time.Millisecond, "memory sampling period (100-250ms)")
		out         = fs.String("out", "", "results folder (default $TMPDIR/lazybench-<scenario>-<time>)")
		quiet       = fs.Bool("quiet", false, "no status line")
		clientGo    = fs.Bool("client-go", false, "read with client-go's default transport (HTTP/2 over TLS, gzip asked for and decoded) instead of HTTP/1.1 without compression")
		linkRate    = fs.Float64("link-rate", 0, "throttle the bytes read from a target to this many bytes/s over all connections (125e6 = 1 Gbit/s; 0: unthrottled)")
		probeProc   = fs.Bool("probe-process", true, "listflood: run the GET probe in its own process (false: a goroutine of this process, whose run queue it then shares with the flooding clients)")
	)
	ef.add(fs)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("run takes one scenario (%s)", strings.Join(bench.Scenarios, ", "))
	}
	scenario := fs.Arg(0)
	if !slices.Contains(bench.Scenarios, scenario) {
		return fmt.Errorf("unknown scenario %q: want one of %s", scenario, strings.Join(bench.Scenarios, ", "))
	}
	k, ok := bench.LookupKind(*kind)
	if !ok {
		return fmt.Errorf("unknown --kind %q", *kind)
	}
	if _, err := bench.AcceptHeader(*accept); err != nil {
		return err
	}
	var ts []bench.Target
	for _, s := range *targets {
		t, err := bench.ParseTarget(s)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	perTarget := func(flag string, vals []string, set func(t *bench.Target, v string) error) error {
		for _, s := range vals {
			name, v, ok := strings.Cut(s, "=")
			if !ok {
				return fmt.Errorf("invalid --%s %q: want NAME=VALUE", flag, s)
			}
			found := false
			for i := range ts {
				if ts[i].Name == name {
					found = true
					if err := set(&ts[i], v); err != nil {
						return fmt.Errorf("invalid --%s %q: %w", flag, s, err)
					}
				}
			}
			if !found {
				return fmt.Errorf("--%s %q names no --target", flag, s)
			}
		}
		return nil
	}
	if err := perTarget("token", *tokens, func(t *bench.Target, v string) error { t.Token = v; return nil }); err != nil {
		return err
	}
	if err := perTarget("kubeconfig", *kubeconfigs, func(t *bench.Target, v string) error { t.Kubeconfig = v; return nil }); err != nil {
		return err
	}
	if err := perTarget("pid", *pids, func(t *bench.Target, v string) error {
		n, err := strconv.Atoi(v)
		t.PID = n
		return err
	}); err != nil {
		return err
	}
	cli, err := ef.connect(*reference || scenario == bench.ScenarioWatch || scenario == bench.ScenarioGet || scenario == bench.ScenarioMixed)
	if err != nil {
		return err
	}
	if cli != nil {
		defer cli.Close()
	}
	if *out == "" {
		*out = filepath.Join(os.TempDir(), "lazybench-"+scenario+"-"+time.Now().UTC().Format("20060102-150405"))
	}
	rep := &bench.Report{Date: time.Now().UTC().Truncate(time.Second), Command: commandName() + " run " + strings.Join(args, " "), Machine: bench.ThisMachine(), Peer: "none (targets as given)"}
	for _, t := range ts {
		if strings.Contains(t.Name, "kube-apiserver") {
			rep.Peer = "kube-apiserver at " + t.URL + " (as given by --target " + t.Name + ")"
		}
	}
	if *reference {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("cannot find the lazybench binary: %w", err)
		}
		p, err := bench.StartRefServerProc(self, strings.Join(ef.servers, ","), ef.prefix, filepath.Join(*out, "logs"))
		if err != nil {
			return err
		}
		defer p.Stop()
		if err := p.WaitReady(ctx, "/healthz", 30*time.Second); err != nil {
			return err
		}
		ts = append(ts, p.Target)
		if !strings.HasPrefix(rep.Peer, "kube-apiserver") {
			rep.Peer = "bench reference server (started by --reference)"
		} else {
			rep.Peer += "; plus the bench reference server"
		}
	}
	if len(ts) == 0 {
		return errors.New("no targets: give --target NAME=URL (repeatable) or --reference")
	}
	if cli != nil {
		if n, _, err := bench.CountObjects(ctx, cli, ef.prefix, k, *ns); err == nil {
			rep.Data = fmt.Sprintf("%d %s in etcd (%s)", n, k.Resource, nsOrAll(*ns))
		}
	} else {
		rep.Notes = append(rep.Notes, "no --etcd-servers: LIST completeness judged by status and parsing only")
	}
	env := bench.Env{Etcd: cli, Prefix: ef.prefix}
	if *probeProc && scenario == bench.ScenarioListFlood {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("cannot find the lazybench binary for --probe-process: %w", err)
		}
		env.ProbeCommand = []string{self, "probe"}
	}
	if !*quiet {
		env.Status, env.StatusTTY = stderr, isTTY(stderr)
	}
	s := bench.Scenario{Name: scenario, Kind: k, Namespace: *ns, Concurrency: *conc, Duration: *dur, Rate: *rate, Limit: *limit,
		Accept: *accept, LabelSelector: *selector, ResourceVersion: *rv, Idle: *idle, SampleEvery: *sample, ClientGo: *clientGo, LinkRate: *linkRate}
	var firstErr error
	for _, t := range ts {
		if ctx.Err() != nil {
			break
		}
		r, err := bench.RunScenario(ctx, env, t, s)
		rep.Results = append(rep.Results, r)
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", t.Name, err)
		}
	}
	if err := rep.WriteTerminal(stdout); err != nil {
		return err
	}
	paths, err := rep.WriteFiles(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", strings.Join(paths, " "))
	return firstErr
}

func nsOrAll(ns string) string {
	if ns == "" {
		return "all namespaces"
	}
	return "namespace " + ns
}

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
	var ef etcdFlags
	ef.add(fs)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd started by the suite)"
	repo := fs.String("repo", d.Repo, "lazyapi source tree (go build ./cmd/lazyapi; bench/kube-apiserver.sh; bench/RESULTS.md)")
	out := fs.String("out", d.Out, "results folder")
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
		Repo: *repo, Out: *out, EtcdServers: ef.servers, Prefix: ef.prefix, Objects: *objects, Namespaces: *nss, Size: sd,
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
	var ef etcdFlags
	ef.add(fs)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd)"
	repo := fs.String("repo", d.Repo, "lazyapi source tree")
	out := fs.String("out", d.Out, "results folder")
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
	cfg := bench.CostConfig{Repo: *repo, Out: *out, EtcdServers: ef.servers, Prefix: ef.prefix, Objects: *objects, Namespaces: *namespaces, Size: sd,
		Clients: *clients, Duration: *dur, LinkRate: *link, LazyAPIFlags: *lazyFlags, LazyAPIVariants: *variants, SkipKube: *skipKube, UpdateResults: *update,
		Command: commandName() + " cost " + strings.Join(args, " "), Log: stderr}
	rep, err := bench.RunCost(ctx, cfg)
	if rep != nil {
		fmt.Fprint(stdout, rep.CostMarkdown())
	}
	return err
}

func runStorm(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storm", "storm [flags]", stdout)
	var ef etcdFlags
	ef.add(fs)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd)"
	repo := fs.String("repo", ".", "lazyapi source tree")
	out := fs.String("out", filepath.Join(os.TempDir(), "lazybench-storm"), "results folder")
	kind := fs.String("kind", "configmap", "kind to seed and read: configmap, secret, pod")
	objects := fs.Int("objects", 10000, "objects to seed (one namespace)")
	size := fs.String("size", "fixed:10KiB", "stored object size distribution")
	rows := fs.StringSlice("rows", []string{"informers:16", "informers:64", "watchlist:256", "listwatch:256"}, "MODE:CLIENTS rows (informers, watchlist, listwatch)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on one run of a row")
	lazyFlags := fs.StringArray("lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	skipKube := fs.Bool("skip-kube-apiserver", false, "measure lazyapi only")
	skipLazy := fs.Bool("skip-lazyapi", false, "measure kube-apiserver only")
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
	cfg := bench.StormConfig{Repo: *repo, Out: *out, EtcdServers: ef.servers, Prefix: ef.prefix, Kind: k, Objects: *objects, Size: sd,
		Rows: rs, Timeout: *timeout, InformerTransform: *transform, OwnConnections: *ownConns, DistinctAddresses: *distinct, Gzip: *gzip, CloseStreams: *closeStreams, Hold: *hold, LazyAPIFlags: *lazyFlags, SkipKube: *skipKube, SkipLazyAPI: *skipLazy, UpdateResults: *update, Profile: *profile,
		Command: commandName() + " storm " + strings.Join(args, " "), Log: stderr}
	rep, err := bench.RunStorm(ctx, cfg)
	if rep != nil {
		fmt.Fprint(stdout, rep.Markdown())
	}
	return err
}

func runKubelet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	d := bench.DefaultKubeletConfig()
	fs := newFlagSet("kubelet", "kubelet [flags]", stdout)
	var ef etcdFlags
	ef.add(fs)
	fs.Lookup("etcd-servers").Usage = "external etcd (default: an embedded etcd)"
	repo := fs.String("repo", d.Repo, "lazyapi source tree")
	out := fs.String("out", d.Out, "results folder")
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
	lazyFlags := fs.StringArray("lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	skipKube := fs.Bool("skip-kube-apiserver", false, "measure lazyapi only")
	skipLazy := fs.Bool("skip-lazyapi", false, "measure kube-apiserver only")
	update := updateResultsFlag(fs, "## kubelet fan-out (N nodes)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cfg := bench.KubeletConfig{Repo: *repo, Out: *out, EtcdServers: ef.servers, Prefix: ef.prefix,
		Nodes: *nodes, PodsPerNode: *podsPerNode, Replicas: *replicas, NodesPerDeployment: *spread, SecretsPerPod: *secrets, ConfigMapsPerPod: *configMaps,
		LeaseEvery: *leaseEvery, PodUpdateEvery: *podEvery, RolloutEvery: *rolloutEvery, Duration: *dur, Settle: *settle, SameAddress: *sameAddr,
		LazyAPIFlags: *lazyFlags, SkipKube: *skipKube, SkipLazyAPI: *skipLazy, UpdateResults: *update,
		Command: commandName() + " kubelet " + strings.Join(args, " "), Log: stderr}
	if err := cfg.Check(); err != nil {
		return err
	}
	rep, err := bench.RunKubelet(ctx, cfg)
	if rep != nil {
		fmt.Fprint(stdout, rep.Markdown())
	}
	return err
}

func runRefServer(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("refserver", "refserver [flags]", stderr)
	var ef etcdFlags
	ef.add(fs)
	bind := fs.String("bind-address", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 8081, "port to listen on")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	cli, err := ef.connect(true)
	if err != nil {
		return err
	}
	defer cli.Close()
	ln, err := net.Listen("tcp", net.JoinHostPort(*bind, strconv.Itoa(*port)))
	if err != nil {
		return fmt.Errorf("cannot listen: %w", err)
	}
	srv := &http.Server{Handler: bench.NewRefServer(cli, ef.prefix), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "reference server on http://%s\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runRecord(args []string, stdout io.Writer) error {
	fs := newFlagSet("record", "record --report DIR/results.json [--repo .]", stdout)
	report := fs.String("report", "", "results.json written by lazybench suite (required)")
	repo := fs.String("repo", ".", "lazyapi source tree holding bench/RESULTS.md")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *report == "" {
		return errors.New("--report is required")
	}
	f, err := os.Open(*report)
	if err != nil {
		return fmt.Errorf("cannot open --report: %w", err)
	}
	defer f.Close()
	rep, err := bench.ReadReport(f)
	if err != nil {
		return err
	}
	p := filepath.Join(*repo, "bench", "RESULTS.md")
	if err := bench.UpdateResultsSection(p, "suite", rep.SuiteMarkdown()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "updated ## suite in %s\n", p)
	return nil
}

func runEtcd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("etcd", "etcd [--listen 127.0.0.1:2379] [--data-dir DIR]", stderr)
	listen := fs.String("listen", "127.0.0.1:2379", "client address")
	dir := fs.String("data-dir", "", "data directory (default: a temporary one, removed at exit)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "lazybench-etcd-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	e, err := embedetcd.Start(embedetcd.Config{Dir: *dir, ClientAddr: *listen, UnsafeNoFsync: true})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Fprintf(stderr, "etcd on %s (data in %s); Ctrl-C stops it\n", e.Endpoint(), *dir)
	<-ctx.Done()
	return nil
}

// updateResultsFlag adds --update-results: rewrite section of the
// checkout's bench/RESULTS.md (under --repo). Off by default: results go to
// --out only, and a quick try never dirties the checkout.
// --no-update-results, the old opt-out, is kept and hidden.
func updateResultsFlag(fs *pflag.FlagSet, section string) *bool {
	update := fs.Bool("update-results", false, "also rewrite the "+section+" section of bench/RESULTS.md under --repo (default: write into --out only)")
	fs.Bool("no-update-results", false, "the default; kept for old command lines")
	_ = fs.MarkHidden("no-update-results")
	return update
}

// commandName is how this binary was invoked, for reports: "go run
// ./cmd/lazybench" when it runs from go run's build cache.
func commandName() string {
	if self, err := os.Executable(); err == nil && strings.Contains(self, "go-build") {
		return "go run ./cmd/lazybench"
	}
	return "lazybench"
}

// runProbe is the listflood GET probe in its own process: it reads paths on
// stdin, GETs them for --duration and writes its bench.ProbeResult as JSON.
func runProbe(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := newFlagSet("probe", "probe --url URL [flags] < paths", os.Stderr)
	var (
		u          = fs.String("url", "", "target base URL (required)")
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig of the target")
		accept     = fs.String("accept-header", "application/json", "Accept header")
		dur        = fs.Duration("duration", 10*time.Second, "how long to probe")
	)
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *u == "" {
		return errors.New("probe: --url is required")
	}
	paths, err := bench.ReadProbePaths(stdin)
	if err != nil {
		return err
	}
	t := bench.Target{Name: "probe", URL: *u, Kubeconfig: *kubeconfig, Token: os.Getenv(bench.ProbeTokenEnv)}
	pctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	res, err := bench.RunProbe(pctx, t, *accept, paths)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}
