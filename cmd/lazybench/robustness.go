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
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/embedetcd"
	"github.com/lazyapi/lazyapi/internal/robustness"
)

// runRobustness runs the robustness suite (internal/robustness) for
// --duration per seed: a 3-member embedded etcd cluster, lazyapi built
// from --repo, seeded traffic and faults, every answer checked against
// etcd's history.
func runRobustness(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("robustness", "robustness [flags]", stdout)
	repo := fs.String("repo", ".", "lazyapi source tree (go build ./cmd/lazyapi)")
	bin := fs.String("lazyapi", "", "lazyapi binary to test (default: built from --repo)")
	out := fs.String("out", filepath.Join(os.TempDir(), "lazybench-robustness"), "folder for the history files and lazyapi's logs")
	seed := fs.Uint64("seed", 1, "seed of the first run: traffic and fault schedule (a failure prints it)")
	seeds := fs.Int("seeds", 1, "runs, with seeds --seed, --seed+1, ...")
	dur := fs.Duration("duration", 0, "traffic per seed (e.g. 1h)")
	every := fs.Duration("fault-every", 0, "mean time between two faults (default 5s)")
	faults := fs.StringSlice("faults", robustness.DefaultFaults, "fault kinds to inject, of "+strings.Join(robustness.AllFaults, ", ")+
		" (kill-member and kill-leader stop a member as etcd's shutdown does, a leader handing over its leadership: the members run in the harness's process, which an abrupt stop can crash)")
	members := fs.Int("members", 3, "etcd members (member kills and partitions need 3)")
	lazyFlags := fs.StringArray("lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	memLimit := fs.String("memory-limit", "512Mi", "lazyapi's --memory-limit, which its RSS must stay under (0: none, unchecked)")
	big := fs.Bool("big-values", true, "values up to 1 MiB (else up to 64 KiB)")
	server := fs.String("server", "lazyapi", "the server under test: lazyapi, or kube-apiserver (v1.37.2 by bench/kube-apiserver.sh under --repo, "+
		"built beforehand; watch cache on, its own compactor off; it is not killed)")
	readers := fs.Int("readers", 0, "concurrent LIST and GET clients (default 4)")
	profile := fs.String("profile", "", "a targeted run, setting --faults, --fault-every and --readers unless given, and lazyapi flags: "+
		robustness.ProfileNames())
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *dur <= 0 {
		return fmt.Errorf("--duration is required (e.g. --duration 1h)")
	}
	var prof robustness.Profile
	if *profile != "" {
		var err error
		if prof, err = robustness.LookupProfile(*profile); err != nil {
			return err
		}
		given := map[string]bool{}
		fs.Visit(func(f *pflag.Flag) { given[f.Name] = true })
		if !given["faults"] {
			*faults = prof.Faults
		}
		if !given["fault-every"] && prof.FaultEvery > 0 {
			*every = prof.FaultEvery
		}
		if !given["readers"] {
			*readers = prof.Readers
		}
		if !given["memory-limit"] && prof.MemoryLimit != "" {
			*memLimit = prof.MemoryLimit
		}
	}
	var limit int64
	if *memLimit != "0" {
		q, err := resource.ParseQuantity(*memLimit)
		if err != nil {
			return fmt.Errorf("invalid --memory-limit %q: %w", *memLimit, err)
		}
		limit = q.Value()
		*lazyFlags = append([]string{"--memory-limit=" + *memLimit}, *lazyFlags...)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	kube := *server == "kube-apiserver"
	if !kube && *server != "lazyapi" {
		return fmt.Errorf("--server %q: lazyapi or kube-apiserver", *server)
	}
	if kube {
		limit = 0
	} else if *bin == "" {
		fmt.Fprintln(stderr, "building lazyapi from", *repo)
		var err error
		if *bin, err = bench.BuildLazyAPI(ctx, *repo, *out); err != nil {
			return err
		}
	}
	failed := 0
	for i := range *seeds {
		s := *seed + uint64(i)
		dir := filepath.Join(*out, fmt.Sprintf("seed%d", s))
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		cl, err := embedetcd.StartCluster(filepath.Join(dir, "etcd"), *members)
		if err != nil {
			return err
		}
		cl.Graceful = true // member kills: etcd's own shutdown, which the harness's process survives
		rep, err := robustness.Run(ctx, robustness.Config{Seed: s, Duration: *dur, Cluster: cl, Out: dir, Log: stderr,
			Faults: *faults, FaultEvery: *every, MemoryLimit: limit, BigValues: *big, Readers: *readers, ReorderHold: prof.ReorderHold,
			Start: func(ctx context.Context, eps []string) (robustness.Server, error) {
				if kube {
					return startKube(ctx, filepath.Join(*repo, "bench", "kube-apiserver.sh"), dir, eps)
				}
				args := *lazyFlags
				if prof.ServerArgs != nil {
					args = append(prof.ServerArgs(eps), args...)
				}
				return robustness.StartProcess(ctx, *bin, dir, eps, args...)
			}})
		cl.Close()
		if rep != nil {
			fmt.Fprint(stdout, rep.String())
			if rep.Failed() {
				failed++
			}
		}
		if err != nil {
			return fmt.Errorf("seed %d: %w", s, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d seeds violated a guarantee", failed, *seeds)
	}
	return nil
}

// kubeServer is kube-apiserver as the robustness suite's server under
// test: the reference its validators must pass on.
type kubeServer struct{ p *bench.Proc }

var _ robustness.Authenticated = kubeServer{}

// startKube starts kube-apiserver on the cluster with its watch cache and
// without its compactor (the harness compacts as it does, through
// compact_rev_key, and must know every compaction).
func startKube(ctx context.Context, script, dir string, eps []string) (robustness.Server, error) {
	p, err := bench.StartKubeAPIServerWith(script, strings.Join(eps, ","), "/registry", dir, true, "--", "--etcd-compaction-interval=0")
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx, "/readyz", 3*time.Minute); err != nil {
		p.Stop()
		return nil, err
	}
	return kubeServer{p}, nil
}

func (k kubeServer) URL() string                        { return k.p.Target.URL }
func (k kubeServer) Token() string                      { return k.p.Target.Token }
func (k kubeServer) Kill(context.Context) (bool, error) { return false, nil }
func (k kubeServer) Exited() error                      { return nil }
func (k kubeServer) Stop()                              { k.p.Stop() }

// RSS reads VmRSS from /proc.
func (k kubeServer) RSS() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", k.p.Target.PID))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
