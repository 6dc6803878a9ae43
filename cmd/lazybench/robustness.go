package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	if *bin == "" {
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
			Faults: *faults, FaultEvery: *every, MemoryLimit: limit, BigValues: *big, Readers: *readers,
			Start: func(ctx context.Context, eps []string) (robustness.Server, error) {
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
