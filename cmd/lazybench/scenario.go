package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lazyapi/lazyapi/bench"
)

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
