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
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/term"
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
