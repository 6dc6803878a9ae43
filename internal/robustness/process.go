package robustness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Server is the API server under test, as the harness sees it.
type Server interface {
	// URL is the server's base URL (plain HTTP, no authentication).
	URL() string
	// Kill kills the server with SIGKILL and starts it again on the same
	// port; false when this server cannot be (kube-apiserver).
	Kill(ctx context.Context) (bool, error)
	// RSS returns the resident set of the server's process in bytes (0:
	// unknown).
	RSS() int64
	// Exited returns an error when the process exited without being
	// killed by the harness, once.
	Exited() error
	// Stop ends the server.
	Stop()
}

// Process is a lazyapi binary run by the harness on a loopback port with
// its logs in a file. It is safe for concurrent use.
type Process struct {
	bin  string
	args []string
	port int
	log  *os.File

	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{}
	killed   bool  // the harness killed the current process
	exitErr  error // an exit the harness did not cause, not yet reported
	restarts int
}

var _ Server = (*Process)(nil)

// StartProcess starts bin with args plus --etcd-servers, --port and
// --bind-address on a free loopback port, logging to dir/lazyapi.log, and
// waits until /readyz answers 200.
func StartProcess(ctx context.Context, bin, dir string, endpoints []string, args ...string) (*Process, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cannot pick a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	log, err := os.Create(filepath.Join(dir, "lazyapi.log"))
	if err != nil {
		return nil, err
	}
	p := &Process{bin: bin, port: port, log: log,
		args: append([]string{"--etcd-servers", strings.Join(endpoints, ","), "--bind-address", "127.0.0.1",
			"--port", strconv.Itoa(port), "--secure-port", "0", "--logging-format", "json"}, args...)}
	if err := p.start(ctx); err != nil {
		log.Close()
		return nil, err
	}
	return p, nil
}

func (p *Process) start(ctx context.Context) error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.killed = cmd, done, false
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		if !p.killed && p.cmd == cmd {
			p.exitErr = fmt.Errorf("lazyapi (pid %d) exited on its own: %v (see %s)", cmd.Process.Pid, err, p.log.Name())
		}
		p.mu.Unlock()
		close(done)
	}()
	return p.waitReady(ctx, done)
}

func (p *Process) waitReady(ctx context.Context, done chan struct{}) error {
	deadline := time.Now().Add(90 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(p.URL() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("lazyapi exited before it was ready; see %s", p.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling /readyz
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lazyapi not ready within 90s; see %s", p.log.Name())
		}
	}
}

// URL implements Server.
func (p *Process) URL() string { return "http://127.0.0.1:" + strconv.Itoa(p.port) }

// Kill implements Server: SIGKILL, then the same binary and flags again.
func (p *Process) Kill(ctx context.Context) (bool, error) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed = true
	p.restarts++
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	return true, p.start(ctx)
}

// RSS implements Server from /proc/PID/status.
func (p *Process) RSS() int64 {
	p.mu.Lock()
	pid := p.cmd.Process.Pid
	p.mu.Unlock()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// Exited implements Server.
func (p *Process) Exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.exitErr
	p.exitErr = nil
	return err
}

// Stop implements Server: SIGTERM, SIGKILL after 10 s.
func (p *Process) Stop() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.killed = true
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	p.log.Close()
}
