package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The listflood GET probe.
//
// The probe is one client GETting random single objects at probeRate, one
// at a time, on its own connection and, when the target is 127.0.0.1, from
// 127.0.0.2 (another remote IP: servers that key fairness by client address
// see it as another client, as a controller on another host would be).
//
// Where it runs matters: inside the lazybench process its goroutine shares
// the Go scheduler (GOMAXPROCS threads) with the flooding clients' goroutines,
// which read hundreds of MB/s, so its latency includes lazybench's own run
// queue. With Env.ProbeCommand set it runs in a process of its own (an OS
// process the kernel schedules on its own, like a client on another host
// sharing only the CPUs), started as ProbeCommand + probe flags, reading the
// paths to GET on stdin and writing its ProbeResult as JSON on stdout.
// ProbeResult.Where says which.

// Probe locations (ProbeResult.Where).
const (
	ProbeInProcess  = "goroutine in the lazybench process"
	ProbeOwnProcess = "own process"
)

// probeHTTPClient returns the probe's client: one connection, from
// 127.0.0.2 when the target is 127.0.0.1.
func probeHTTPClient(t Target) (*http.Client, error) {
	hc, err := t.httpClient(1)
	if err != nil {
		return nil, err
	}
	if u, err := url.Parse(t.URL); err == nil && u.Hostname() == "127.0.0.1" {
		hc.Transport.(*http.Transport).DialContext = (&net.Dialer{Timeout: 5 * time.Second,
			LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext
	}
	return hc, nil
}

// RunProbe GETs random paths of t (relative to its URL) at probeRate until
// ctx ends and returns what it saw. accept is the Accept header.
func RunProbe(ctx context.Context, t Target, accept string, paths []string) (*ProbeResult, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("cannot probe: no paths")
	}
	if err := t.resolve(); err != nil {
		return nil, err
	}
	hc, err := probeHTTPClient(t)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	pc := &client{t: t, http: hc, accept: accept, c: newCollector()}
	workers(ctx, 1, rate.NewLimiter(probeRate, 1), func(ctx context.Context, _ int, r *rand.Rand) {
		_, _, _ = pc.get(ctx, paths[r.IntN(len(paths))], nil)
	})
	return &ProbeResult{
		Where:       ProbeInProcess,
		Requests:    pc.c.requests.Load(),
		Errors:      pc.c.errs.Load(),
		Throttled:   pc.c.throttled.Load(),
		StatusCodes: pc.c.codes,
		Latency:     pc.c.lat.Summary(),
		FirstError:  pc.c.firstErr,
	}, nil
}

// ProbeTokenEnv is the environment variable a probe process reads its
// target's bearer token from (not on its command line).
const ProbeTokenEnv = "LAZYBENCH_PROBE_TOKEN"

// ProbeArgs are the flags of a probe process: the target and how long to run.
func probeArgs(t Target, accept string, d time.Duration) []string {
	args := []string{"--url", t.URL, "--accept-header", accept, "--duration", d.String()}
	if t.Kubeconfig != "" {
		args = append(args, "--kubeconfig", t.Kubeconfig)
	}
	return args
}

// runProbeProcess runs the probe as cmd + probe flags until ctx's deadline
// and returns its result.
func runProbeProcess(ctx context.Context, cmd []string, t Target, accept string, paths []string) (*ProbeResult, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil, fmt.Errorf("cannot start the probe process: the run has no deadline")
	}
	d := time.Until(deadline)
	// The process stops by itself after d; the grace covers start and report.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d+30*time.Second)
	defer cancel()
	c := exec.CommandContext(pctx, cmd[0], append(append([]string{}, cmd[1:]...), probeArgs(t, accept, d)...)...)
	c.Env = append(os.Environ(), ProbeTokenEnv+"="+t.Token)
	c.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	var stdout, stderr strings.Builder
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return nil, fmt.Errorf("cannot run the probe process: %w: %s", err, stderr.String())
	}
	var res ProbeResult
	if err := json.Unmarshal([]byte(stdout.String()), &res); err != nil {
		return nil, fmt.Errorf("cannot parse the probe process's result: %w", err)
	}
	res.Where = ProbeOwnProcess
	return &res, nil
}

// ReadProbePaths reads the paths a probe process GETs, one per line.
func ReadProbePaths(r io.Reader) ([]string, error) {
	var paths []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if p := strings.TrimSpace(sc.Text()); p != "" {
			paths = append(paths, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read probe paths: %w", err)
	}
	return paths, nil
}

// startProbe runs the probe beside a listflood, in its own process when
// env.ProbeCommand is set, and returns a function that waits for its result.
func startProbe(ctx context.Context, env Env, t Target, accept string, paths []string) func() (*ProbeResult, error) {
	var (
		wg  sync.WaitGroup
		res *ProbeResult
		err error
	)
	wg.Go(func() {
		if len(env.ProbeCommand) > 0 {
			res, err = runProbeProcess(ctx, env.ProbeCommand, t, accept, paths)
			return
		}
		res, err = RunProbe(ctx, t, accept, paths)
	})
	return func() (*ProbeResult, error) {
		wg.Wait()
		return res, err
	}
}
