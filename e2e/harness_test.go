package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/demo"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// lazyapiBin is the lazyapi binary built once for the package by TestMain,
// with -race when the tests run under the race detector. plainBin is the
// same without -race (lazyapiBin when the tests do not run under it): the
// hostile suite asserts the memory of the binary operators run, and the
// race detector's shadow memory would count in its peak RSS.
var lazyapiBin, plainBin string

func TestMain(m *testing.M) {
	if env := os.Getenv(frontCtlEnv); env != "" { // a controller replica (front_controller_kube_test.go)
		os.Exit(runFrontCtl(env))
	}
	dir, err := os.MkdirTemp("", "lazyapi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cannot create temp dir:", err)
		os.Exit(1)
	}
	lazyapiBin = filepath.Join(dir, "lazyapi")
	plainBin = lazyapiBin
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	builds := [][]string{{"build", "-o", lazyapiBin}}
	if raceEnabled {
		plainBin = filepath.Join(dir, "lazyapi-plain")
		builds = [][]string{{"build", "-race", "-o", lazyapiBin}, {"build", "-o", plainBin}}
	}
	for _, args := range builds {
		build := exec.Command(gobin, append(args, "github.com/lazyapi/lazyapi/cmd/lazyapi")...)
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "cannot build lazyapi (go %s): %v\n%s", strings.Join(args, " "), err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startTimeout bounds a lazyapi start (embedded etcd included).
const startTimeout = 60 * time.Second

// process is a running lazyapi binary.
type process struct {
	cmd    *exec.Cmd
	URL    string // http://host:port, from the "serving" log entry
	stdout *lines
	stderr *lines
	exited chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid after exited
}

// lines collects a stream's lines and signals each new one.
type lines struct {
	mu   sync.Mutex
	all  []string
	more chan struct{} // closed and replaced on every new line
	eof  bool
}

func newLines(r io.Reader) *lines {
	l := &lines{more: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			close(l.more)
			l.more = make(chan struct{})
			l.mu.Unlock()
		}
		l.mu.Lock()
		l.eof = true
		close(l.more)
		l.mu.Unlock()
	}()
	return l
}

// String returns the lines so far.
func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

// wait returns the first line for which match returns true, waiting until
// the stream ends or the deadline.
func (l *lines) wait(deadline time.Time, match func(string) bool) (string, bool) {
	seen := 0
	for {
		l.mu.Lock()
		for ; seen < len(l.all); seen++ {
			if match(l.all[seen]) {
				s := l.all[seen]
				l.mu.Unlock()
				return s, true
			}
		}
		more, eof := l.more, l.eof
		l.mu.Unlock()
		if eof {
			return "", false
		}
		select {
		case <-more:
		case <-time.After(time.Until(deadline)):
			return "", false
		}
	}
}

// logEntry is the part of a lazyapi JSON log line the tests read.
type logEntry struct {
	Level     string `json:"level"`
	Msg       string `json:"msg"`
	Address   string `json:"address"`
	URL       string `json:"url"`
	SecureURL string `json:"secureURL"`
}

func parseLog(line string) (logEntry, bool) {
	var e logEntry
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		return e, false
	}
	return e, true
}

// start runs the lazyapi binary with args (plus --port on a free port
// unless a --port is given: --port=0 turns the plain port off, and
// --logging-format=json unless a format is) and returns once it logs
// "serving"; p.URL is the plain port's URL, or the TLS one's when the
// plain port is off. The process gets SIGTERM at the
// end of the test if it is still running.
func start(t *testing.T, args ...string) *process {
	t.Helper()
	p := run(t, args...)
	line, ok := p.stderr.wait(time.Now().Add(startTimeout), func(s string) bool {
		e, ok := parseLog(s)
		return ok && e.Msg == "serving"
	})
	if !ok {
		p.kill()
		t.Fatalf("lazyapi %s did not log \"serving\" within %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), startTimeout, p.stdout, p.stderr)
	}
	e, _ := parseLog(line)
	p.URL = e.URL
	if p.URL == "" {
		p.URL = e.SecureURL
	}
	if p.URL == "" {
		t.Fatalf("serving entry has no url: %s", line)
	}
	return p
}

// startBin is start with the binary bin (plainBin for the tests that
// measure memory without the race detector, or a baseline build) instead
// of lazyapiBin.
func startBin(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	old := lazyapiBin
	lazyapiBin = bin
	defer func() { lazyapiBin = old }()
	return start(t, args...)
}

// run starts the binary without waiting for it to serve.
func run(t *testing.T, args ...string) *process {
	t.Helper()
	hasPort, hasFormat := false, false
	for _, a := range args {
		hasPort = hasPort || strings.HasPrefix(a, "--port")
		hasFormat = hasFormat || strings.HasPrefix(a, "--logging-format")
	}
	if !hasPort {
		args = append([]string{"--port=" + strconv.Itoa(freePort(t))}, args...)
	}
	if !hasFormat { // the tests read the JSON log entries
		args = append([]string{"--logging-format=json"}, args...)
	}
	cmd := exec.Command(lazyapiBin, args...)
	dieWithParent(cmd)
	// The default --data-dir is under the user's cache dir: keep it in the
	// test's temp dir.
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+t.TempDir(), "HOME="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("cannot start lazyapi: %v", err)
	}
	p := &process{cmd: cmd, stdout: newLines(stdout), stderr: newLines(stderr), exited: make(chan struct{})}
	if raceEnabled {
		// Registered first, so it runs after the cleanup below has
		// stopped the process: a race report is complete by its exit.
		t.Cleanup(func() {
			select {
			case <-p.exited:
			case <-time.After(time.Minute):
			}
			if s := p.stderr.String(); strings.Contains(s, "WARNING: DATA RACE") {
				t.Errorf("the race detector found a data race in lazyapi %s:\n%s", strings.Join(args, " "), s)
			}
		})
	}
	go func() {
		// Wait after the pipes are drained, as exec.Cmd requires.
		p.stdout.wait(time.Now().Add(time.Hour), func(string) bool { return false })
		p.stderr.wait(time.Now().Add(time.Hour), func(string) bool { return false })
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("lazyapi did not stop cleanly on SIGTERM: %v\nstderr:\n%s", err, p.stderr)
		}
	})
	return p
}

// stop sends SIGTERM and waits up to timeout for the exit; it returns the
// exit error (nil for status 0).
func (p *process) stop(timeout time.Duration) error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return p.waitExit(timeout)
}

// waitExit waits up to timeout for the process to exit and returns Wait's
// error; it kills the process after the timeout.
func (p *process) waitExit(timeout time.Duration) error {
	select {
	case <-p.exited:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("did not exit within %s", timeout)
	}
}

func (p *process) kill() {
	p.cmd.Process.Kill()
	<-p.exited
}

// seededEtcd starts a test etcd and writes the demo objects into it under
// /registry, as kube-apiserver would have stored them.
func seededEtcd(t *testing.T) (*etcdtest.Server, []demo.Object) {
	t.Helper()
	srv := etcdtest.Start(t)
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := demo.Seed(ctx, srv.Client, "/registry", now); err != nil {
		t.Fatalf("cannot seed etcd: %v", err)
	}
	objs, err := demo.Objects("/registry", now)
	if err != nil {
		t.Fatal(err)
	}
	return srv, objs
}

// kubectl runs kubectl against server with an empty kubeconfig and returns
// its stdout and stderr; it skips the test when kubectl is not on PATH.
func kubectl(t *testing.T, server string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	path := needKubectl(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig", kubeconfig, "--server", server, "--cache-dir", filepath.Join(dir, "cache")}, args...)
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "KUBECONFIG="+kubeconfig)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), errb.String(), fmt.Errorf("kubectl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String(), nil
}

// mustKubectl is kubectl that fails the test on error and returns stdout.
func mustKubectl(t *testing.T, server string, args ...string) string {
	t.Helper()
	out, _, err := kubectl(t, server, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// needKubectl returns kubectl's path or skips the test, saying why.
func needKubectl(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH: skipping kubectl checks (.ci/run installs it from apt when it can)")
	}
	return path
}

// freePort returns a loopback port that was free a moment ago (for --port
// and --secure-port, where 0 picks a port or turns the listener off).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// procStatus reads a "kB" field of /proc/<pid>/status (VmRSS:, VmHWM:)
// in bytes; 0 when unreadable.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
