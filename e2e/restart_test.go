package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// restartObjects is the 10,000 ConfigMaps (2,000 under the race
// detector, which slows the race-built lazyapi and this client's decoding
// of the LIST several times: 10,000 were served in 8.8 s instead of the
// 5 s asserted); LAZYAPI_RESTART_OBJECTS overrides it.
func restartObjects(t *testing.T) int {
	if v := os.Getenv("LAZYAPI_RESTART_OBJECTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("LAZYAPI_RESTART_OBJECTS=%q: want a positive integer", v)
		}
		return n
	}
	if raceEnabled {
		return 2000
	}
	return 10000
}

// fullList GETs a consistent LIST of every ConfigMap and returns how many
// items it had (-1 when the answer was not a 200 list).
func fullList(c *http.Client, url, token string) int {
	req, err := http.NewRequest("GET", url+"/api/v1/configmaps", nil)
	if err != nil {
		return -1
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return -1
	}
	var l corev1.ConfigMapList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return -1
	}
	return len(l.Items)
}

var cacheStateRe = regexp.MustCompile(`(?m)^lazyapi_cache_state\{resource="configmaps"\} (\d+)`)

// restartTimes are the figures of one restart, from the kill.
type restartTimes struct {
	ready, list, cache time.Duration // /readyz 200; the full LIST served; the cache ready (lazyapi only)
}

// TestRestartServesWithin5s kills lazyapi (SIGKILL) on 10,000 ConfigMaps
// and restarts it: it must be ready and serve the full consistent LIST
// within 5 s of the restart, before its cache is full (it reads etcd
// meanwhile). With LAZYAPI_RESTARTBENCH=1 it repeats the restart
// (LAZYAPI_RESTARTBENCH_RUNS, default 3) and, when bench/kube-apiserver.sh
// has built it, does the same with kube-apiserver v1.37 on the same etcd,
// timing until it serves the same LIST; the medians go to bench/RESULTS.md
// ("## restart").
func TestRestartServesWithin5s(t *testing.T) {
	n := restartObjects(t)
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ch := &churner{cli: etcd.Client, rnd: rand.New(rand.NewPCG(16, 5)), n: n}
	ch.seed(t, ctx)
	bench := os.Getenv("LAZYAPI_RESTARTBENCH") == "1"
	runs := 1
	if bench {
		runs = benchEnvInt(t, "LAZYAPI_RESTARTBENCH_RUNS", 3)
	}
	port := "--port=" + strconv.Itoa(freePort(t))
	args := []string{"--etcd-servers=" + etcd.Endpoint, port}
	p := start(t, args...)
	url := p.URL // the same port after each restart
	c := &http.Client{Timeout: 30 * time.Second}
	if got := fullList(c, url, ""); got != n {
		t.Fatalf("LIST before the kill: %d items, want %d", got, n)
	}

	var lazy []restartTimes
	for range runs {
		// The cache is full before the kill (a fill started by the LIST).
		waitCacheState(t, c, url, 2, time.Minute)
		p.kill()
		killed := time.Now()
		p = run(t, args...)
		var rt restartTimes
		deadline := killed.Add(time.Minute)
		for rt.ready == 0 || rt.list == 0 || rt.cache == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("restart: not ready, serving and cached within a minute (%+v)\nstderr:\n%s", rt, p.stderr)
			}
			if rt.ready == 0 {
				if code, _ := quietGet(c, url+"/readyz"); code == 200 {
					rt.ready = time.Since(killed)
				}
			}
			if rt.ready != 0 && rt.list == 0 {
				cacheBefore := cacheState(c, url)
				if got := fullList(c, url, ""); got == n {
					rt.list = time.Since(killed)
					if cacheBefore == 2 {
						t.Logf("the cache was already full when the first LIST was sent")
					}
				}
			}
			if rt.list != 0 && rt.cache == 0 && cacheState(c, url) == 2 {
				rt.cache = time.Since(killed)
			}
			time.Sleep(10 * time.Millisecond) // polling the restarted process to a deadline
		}
		t.Logf("lazyapi restart on %d ConfigMaps: ready %s, full LIST served %s, cache full %s after the kill",
			n, rt.ready.Round(time.Millisecond), rt.list.Round(time.Millisecond), rt.cache.Round(time.Millisecond))
		if rt.list > 5*time.Second {
			t.Errorf("lazyapi served the full LIST %s after a kill, want within 5s", rt.list)
		}
		lazy = append(lazy, rt)
	}
	if !bench {
		return
	}
	kube := kubeAPIServerRestarts(t, etcd.Endpoint, n, runs)
	med := func(rs []restartTimes, f func(restartTimes) time.Duration) time.Duration {
		ds := make([]time.Duration, len(rs))
		for i, r := range rs {
			ds[i] = f(r)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	t.Logf("RESULT lazyapi (median of %d): ready %s, full LIST %s, cache full %s", runs,
		med(lazy, func(r restartTimes) time.Duration { return r.ready }).Round(time.Millisecond),
		med(lazy, func(r restartTimes) time.Duration { return r.list }).Round(time.Millisecond),
		med(lazy, func(r restartTimes) time.Duration { return r.cache }).Round(time.Millisecond))
	if len(kube) > 0 {
		t.Logf("RESULT kube-apiserver v1.37 (median of %d): ready %s, full LIST %s", len(kube),
			med(kube, func(r restartTimes) time.Duration { return r.ready }).Round(time.Millisecond),
			med(kube, func(r restartTimes) time.Duration { return r.list }).Round(time.Millisecond))
	}
}

func quietGet(c *http.Client, url string) (int, string) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// cacheState is lazyapi_cache_state of configmaps (-1: not exported yet).
func cacheState(c *http.Client, url string) int {
	_, body := quietGet(c, url+"/metrics")
	m := cacheStateRe.FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.Atoi(m[1])
	return v
}

func waitCacheState(t *testing.T, c *http.Client, url string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for cacheState(c, url) != want {
		if time.Now().After(deadline) {
			t.Fatalf("configmaps cache state %d, want %d within %s", cacheState(c, url), want, within)
		}
		time.Sleep(50 * time.Millisecond) // polling a metric to a deadline
	}
}

// kubeAPIServerRestarts starts kube-apiserver v1.37 (bench/kube-apiserver.sh)
// on etcd, waits until it serves the full LIST, then kills and restarts it
// runs times, timing until /readyz and the full LIST answer. It returns nil
// (saying so) when kube-apiserver is not built.
func kubeAPIServerRestarts(t *testing.T, etcd string, n, runs int) []restartTimes {
	t.Helper()
	script, err := filepath.Abs("../bench/kube-apiserver.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("bash", script, "path").Run(); err != nil {
		t.Logf("kube-apiserver is not built (bench/kube-apiserver.sh build): no side-by-side figure")
		return nil
	}
	port := freePort(t)
	dir := t.TempDir()
	const token = "restart-bench-token"
	url := "https://127.0.0.1:" + strconv.Itoa(port)
	startKube := func() *exec.Cmd {
		cmd := exec.Command("bash", script, "start", "--etcd-servers", etcd, "--port", strconv.Itoa(port), "--dir", dir, "--token", token)
		dieWithParent(cmd)
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	c := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback, self-signed
	authed := func(path string) int {
		req, _ := http.NewRequest("GET", url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := c.Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return resp.StatusCode
	}
	cmd := startKube()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck
	deadline := time.Now().Add(3 * time.Minute)
	// kube-apiserver adds ConfigMaps of its own (kube-system's
	// extension-apiserver-authentication): at least n.
	for fullList(c, url, token) < n {
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver did not serve the %d ConfigMaps within 3 minutes", n)
		}
		time.Sleep(200 * time.Millisecond) // polling a starting process to a deadline
	}
	var out []restartTimes
	for range runs {
		cmd.Process.Kill() //nolint:errcheck
		cmd.Wait()         //nolint:errcheck
		killed := time.Now()
		cmd = startKube()
		var rt restartTimes
		deadline := killed.Add(3 * time.Minute)
		for rt.ready == 0 || rt.list == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("kube-apiserver restart: not serving within 3 minutes (%+v)", rt)
			}
			if rt.ready == 0 && authed("/readyz") == 200 {
				rt.ready = time.Since(killed)
			}
			if rt.list == 0 && fullList(c, url, token) >= n {
				rt.list = time.Since(killed)
			}
			time.Sleep(10 * time.Millisecond) // polling a starting process to a deadline
		}
		t.Logf("kube-apiserver restart on %d ConfigMaps: ready %s, full LIST served %s after the kill",
			n, rt.ready.Round(time.Millisecond), rt.list.Round(time.Millisecond))
		out = append(out, rt)
	}
	return out
}
