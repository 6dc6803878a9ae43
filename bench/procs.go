package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// Proc is a target server the harness started as a child process.
type Proc struct {
	Target Target
	cmd    *exec.Cmd
	log    *os.File
	done   chan struct{}
	err    error
}

// LogPath returns the file holding the process's stdout and stderr.
func (p *Proc) LogPath() string { return p.log.Name() }

// Stop sends SIGTERM, waits up to 15 s, then kills the process.
func (p *Proc) Stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}

func startProc(name string, logDir string, target Target, argv ...string) (*Proc, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create %q: %w", logDir, err)
	}
	log, err := os.Create(filepath.Join(logDir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("cannot create log for %s: %w", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("cannot start %s: %w", name, err)
	}
	target.PID = cmd.Process.Pid
	p := &Proc{Target: target, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// WaitReady polls path on p's target until it answers 200, p exits, or
// timeout passes.
func (p *Proc) WaitReady(ctx context.Context, path string, timeout time.Duration) error {
	hc, err := p.Target.httpClient(1)
	if err != nil {
		return err
	}
	defer hc.CloseIdleConnections()
	hc.Timeout = 5 * time.Second
	deadline := time.Now().Add(timeout)
	var last string
	for {
		req, err := p.Target.newRequest(ctx, path, "application/json")
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = "status " + strconv.Itoa(resp.StatusCode)
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); see %s", p.Target.Name, p.err, p.LogPath())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s: %s; see %s", p.Target.Name, path, timeout, last, p.LogPath())
		}
	}
}

// FreePort returns a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("cannot pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// BuildLazyAPI runs `go build ./cmd/lazyapi` in repo and returns the binary.
func BuildLazyAPI(ctx context.Context, repo, outDir string) (string, error) {
	bin := filepath.Join(outDir, "lazyapi")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/lazyapi")
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("cannot build lazyapi (go build ./cmd/lazyapi in %s): %w: %s", repo, err, out)
	}
	return bin, nil
}

// StartLazyAPI starts a lazyapi binary against etcd on free loopback ports
// and returns it as a TLS target (https, self-signed certificate in
// logDir, as kube-apiserver.sh's --cert-dir), so both servers pay the same
// TLS costs; its plain HTTP port is left unused.
func StartLazyAPI(bin, etcd, prefix, logDir string, extra ...string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	securePort, err := FreePort()
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := selfSignedCert(filepath.Join(logDir, "lazyapi-certs"))
	if err != nil {
		return nil, err
	}
	t := Target{Name: "lazyapi", URL: "https://127.0.0.1:" + strconv.Itoa(securePort), Note: "lazyapi (go build ./cmd/lazyapi) over TLS " + fmt.Sprint(extra)}
	argv := append([]string{bin, "--etcd-servers", etcd, "--etcd-prefix", prefix, "--bind-address", "127.0.0.1", "--port", strconv.Itoa(port),
		"--secure-port", strconv.Itoa(securePort), "--tls-cert-file", certFile, "--tls-private-key-file", keyFile, "--log-level", "warn"}, extra...)
	return startProc("lazyapi", logDir, t, argv...)
}

// selfSignedCert writes a self-signed serving certificate for 127.0.0.1
// into dir (once) as kube-apiserver does for --cert-dir, and returns the
// certificate and key files.
func selfSignedCert(dir string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key")
	if _, err := os.Stat(keyFile); err == nil {
		return certFile, keyFile, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("cannot create %q: %w", dir, err)
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return "", "", fmt.Errorf("cannot generate a serving certificate: %w", err)
	}
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// KubeAPIServerToken is the bearer token bench/kube-apiserver.sh accepts.
const KubeAPIServerToken = "lazybench-token"

// KubeAPIServerBinary returns the path of the kube-apiserver that
// kube-apiserver.sh built, or an error saying why there is none.
func KubeAPIServerBinary(ctx context.Context, script string) (string, error) {
	out, err := exec.CommandContext(ctx, script, "path").Output()
	path := string(trimNL(out))
	if err != nil {
		return "", fmt.Errorf("kube-apiserver is not built (%s build): %s not found", script, path)
	}
	return path, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// StartKubeAPIServer starts kube-apiserver through kube-apiserver.sh on a
// free loopback port with the given watch cache setting.
func StartKubeAPIServer(script, etcd, prefix, logDir string, watchCache bool) (*Proc, error) {
	return StartKubeAPIServerWith(script, etcd, prefix, logDir, watchCache)
}

// StartKubeAPIServerWith is StartKubeAPIServer with more kube-apiserver.sh
// start flags (e.g. "--encryption-provider-config", file).
func StartKubeAPIServerWith(script, etcd, prefix, logDir string, watchCache bool, extra ...string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	name := "kube-apiserver"
	if !watchCache {
		name += "-nocache"
	}
	dir := filepath.Join(logDir, name)
	t := Target{Name: name, URL: "https://127.0.0.1:" + strconv.Itoa(port), Token: KubeAPIServerToken,
		Note: "kube-apiserver v1.37.2 built from k8s.io/kubernetes, --watch-cache=" + strconv.FormatBool(watchCache)}
	args := []string{"start", "--etcd-servers", etcd, "--etcd-prefix", prefix,
		"--port", strconv.Itoa(port), "--watch-cache", strconv.FormatBool(watchCache), "--dir", dir, "--token", KubeAPIServerToken}
	return startProc(name, logDir, t, append(append([]string{script}, args...), extra...)...)
}

// StartRefServerProc starts `self refserver` (this lazybench binary) as a
// child process, so its memory is measured apart from the harness's.
func StartRefServerProc(self, etcd, prefix, logDir string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	t := Target{Name: "reference", URL: "http://127.0.0.1:" + strconv.Itoa(port),
		Note: "bench reference server: per request etcd range + apimachinery decode of every object + list encode (kube-apiserver without watch cache, minus its filters)"}
	return startProc("reference", logDir, t, self, "refserver", "--etcd-servers", etcd, "--etcd-prefix", prefix, "--port", strconv.Itoa(port))
}

// ErrNoTarget is returned when no target could be started.
var ErrNoTarget = errors.New("bench: no target could be started")
