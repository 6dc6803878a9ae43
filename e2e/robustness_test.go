package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/robustness"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestRobustness is the short run of the robustness suite
// (internal/robustness; the long one is `lazybench robustness`): a
// 3-member etcd cluster, lazyapi as the real binary, seeded traffic and
// faults (compactions, defragmentation, lazyapi SIGKILL, member kills,
// leader changes, partitions, bursts past the watch cache's budget), and
// every answer checked against etcd's history. A few seeds of
// LAZYAPI_ROBUSTNESS_SECONDS (default 20) each; LAZYAPI_ROBUSTNESS_SEED
// runs one seed (a failure prints it); LAZYAPI_ROBUSTNESS_OUT=dir keeps
// the history files and lazyapi's log; LAZYAPI_ROBUSTNESS_ARGS adds lazyapi
// flags, LAZYAPI_ROBUSTNESS_FAULTS=kind,kind picks the faults (empty: none).
func TestRobustness(t *testing.T) {
	secs := 20
	if s := os.Getenv("LAZYAPI_ROBUSTNESS_SECONDS"); s != "" {
		secs, _ = strconv.Atoi(s)
	}
	seeds := []uint64{1, 2}
	if s := os.Getenv("LAZYAPI_ROBUSTNESS_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LAZYAPI_ROBUSTNESS_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	}
	for _, seed := range seeds {
		t.Run("seed"+strconv.FormatUint(seed, 10), func(t *testing.T) {
			runRobustness(t, seed, time.Duration(secs)*time.Second)
		})
	}
}

func runRobustness(t *testing.T, seed uint64, d time.Duration) {
	cluster := etcdtest.StartCluster(t, 3)
	out := t.TempDir()
	if keep := os.Getenv("LAZYAPI_ROBUSTNESS_OUT"); keep != "" {
		out = filepath.Join(keep, "seed"+strconv.FormatUint(seed, 10))
	}
	// Odd seeds run with a watch cache too small for the traffic's large
	// values: refusals, evictions and reads from etcd.
	args := []string{"--memory-limit=512Mi"}
	if seed%2 == 1 {
		args = append(args, "--watch-cache-memory=2Mi")
	}
	args = append(args, strings.Fields(os.Getenv("LAZYAPI_ROBUSTNESS_ARGS"))...)
	var limit int64 = 512 << 20
	if raceEnabled {
		limit = 0 // the race detector's shadow memory counts in the RSS
	}
	var faults []string // nil: every fault
	if f, ok := os.LookupEnv("LAZYAPI_ROBUSTNESS_FAULTS"); ok {
		faults = strings.FieldsFunc(f, func(r rune) bool { return r == ',' })
		if faults == nil {
			faults = []string{}
		}
	}
	cfg := robustness.Config{Faults: faults,
		Seed: seed, Duration: d, Cluster: cluster, Out: out, Log: testLog{t}, MemoryLimit: limit, FaultEvery: 4 * time.Second,
		Start: func(ctx context.Context, eps []string) (robustness.Server, error) {
			return robustness.StartProcess(ctx, lazyapiBin, out, eps, args...)
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	rep, err := robustness.Run(ctx, cfg)
	if rep != nil {
		t.Log(rep.String())
	}
	if err != nil {
		t.Fatalf("robustness seed %d: %v", seed, err)
	}
	if rep.Failed() {
		t.Fatalf("robustness seed %d: %d violations (rerun with LAZYAPI_ROBUSTNESS_SEED=%d; LAZYAPI_ROBUSTNESS_OUT=dir keeps the history and lazyapi's log)", seed, len(rep.Violations), seed)
	}
	if rep.Ops < 50 {
		t.Fatalf("robustness seed %d: only %d answers checked", seed, rep.Ops)
	}
}

// testLog writes the harness's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p))
	return len(p), nil
}
