package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	faults := fs.StringSlice("faults", robustness.AllFaults, "fault kinds to inject ("+strings.Join(robustness.AllFaults, ", ")+")")
	members := fs.Int("members", 3, "etcd members (member kills and partitions need 3)")
	lazyFlags := fs.StringArray("lazyapi-flag", nil, "extra lazyapi flag (repeatable)")
	memLimit := fs.String("memory-limit", "512Mi", "lazyapi's --memory-limit, which its RSS must stay under (0: none, unchecked)")
	big := fs.Bool("big-values", true, "values up to 1 MiB (else up to 64 KiB)")
	if help, err := parse(fs, args); help || err != nil {
		return err
	}
	if *dur <= 0 {
		return fmt.Errorf("--duration is required (e.g. --duration 1h)")
	}
	limit := 0
	if *memLimit != "0" {
		var err error
		if limit, err = bench.ParseBytes(*memLimit); err != nil {
			return fmt.Errorf("invalid --memory-limit: %w", err)
		}
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
		rep, err := robustness.Run(ctx, robustness.Config{Seed: s, Duration: *dur, Cluster: cl, Out: dir, Log: stderr,
			Faults: *faults, FaultEvery: *every, MemoryLimit: int64(limit), BigValues: *big,
			Start: func(ctx context.Context, eps []string) (robustness.Server, error) {
				return robustness.StartProcess(ctx, *bin, dir, eps, *lazyFlags...)
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
