package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/internal/embedetcd"
)

// harness is what RunSuite, RunCost and RunStorm set up alike: the
// results folder, their log, and the etcd they seed and start servers on
// (the given endpoints, or an embedded etcd of their own) with a client.
type harness struct {
	logDir  string           // the servers' logs, in the results folder
	etcd    string           // the servers' --etcd-servers
	cli     *clientv3.Client // every endpoint
	log     io.Writer        // nil: nothing logged
	closers []func()         // run last first by close
}

// newHarness creates out and connects to the etcd at endpoints, or starts
// an embedded one (in a temporary folder) when there are none. Call close
// when done.
func newHarness(out string, endpoints []string, log io.Writer) (*harness, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create %q: %w", out, err)
	}
	h := &harness{logDir: filepath.Join(out, "logs"), log: log}
	if len(endpoints) == 0 {
		dir, err := os.MkdirTemp("", "lazybench-etcd-")
		if err != nil {
			return nil, fmt.Errorf("cannot create etcd dir: %w", err)
		}
		h.closers = append(h.closers, func() { os.RemoveAll(dir) })
		e, err := embedetcd.Start(embedetcd.Config{Dir: dir, UnsafeNoFsync: true})
		if err != nil {
			h.close()
			return nil, err
		}
		h.closers = append(h.closers, func() { e.Close() })
		endpoints = []string{e.Endpoint()}
		h.logf("embedded etcd at %s", e.Endpoint())
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallSendMsgSize: 2 << 20})
	if err != nil {
		h.close()
		return nil, fmt.Errorf("cannot connect to etcd: %w", err)
	}
	h.closers = append(h.closers, func() { cli.Close() })
	h.cli, h.etcd = cli, strings.Join(endpoints, ",")
	return h, nil
}

// close closes the client and stops the embedded etcd (after the clean up
// seed asked for).
func (h *harness) close() {
	for i := len(h.closers) - 1; i >= 0; i-- {
		h.closers[i]()
	}
	h.closers = nil
}

func (h *harness) logf(format string, args ...any) {
	if h.log != nil {
		fmt.Fprintf(h.log, format+"\n", args...)
	}
}

// seed deletes everything under cfg.Prefix and seeds cfg; with cleanAfter,
// close deletes it again (best effort).
func (h *harness) seed(ctx context.Context, cfg SeedConfig, cleanAfter bool) (SeedResult, error) {
	if _, err := Clean(ctx, h.cli, CleanConfig{Prefix: cfg.Prefix}); err != nil {
		return SeedResult{}, err
	}
	sr, err := Seed(ctx, h.cli, cfg)
	if err != nil {
		return sr, err
	}
	if cleanAfter {
		h.closers = append(h.closers, func() {
			Clean(context.WithoutCancel(ctx), h.cli, CleanConfig{Prefix: cfg.Prefix}) //nolint:errcheck // best effort
		})
	}
	return sr, nil
}

// starter starts one target of a run.
type starter struct {
	name  string
	ready string // the path that answers 200 once it is ready
	start func() (*Proc, error)
}

// startReady starts st and waits (up to 3 minutes) until it is ready; on
// failure the process, if any, is stopped.
func (h *harness) startReady(ctx context.Context, st starter) (*Proc, error) {
	h.logf("starting %s", st.name)
	p, err := st.start()
	if err == nil {
		err = p.WaitReady(ctx, st.ready, 3*time.Minute)
	}
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// commitNote is the report note naming the commit of repo lazyapi is built
// from (git describe), "" when git cannot tell.
func commitNote(ctx context.Context, repo string) string {
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return "lazyapi built from commit " + strings.TrimSpace(string(out))
}
