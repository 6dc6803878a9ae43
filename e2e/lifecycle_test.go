package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/internal/demo"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// exitCode returns the process's exit status, or -1 if it did not exit
// normally.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// oneLine checks that stderr is exactly one "lazyapi: ..." line mentioning
// want.
func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "lazyapi: ") || !strings.Contains(lines[0], want) {
		t.Errorf("stderr = %q, want one line \"lazyapi: ...\" naming %q", stderr, want)
	}
}

func TestBadFlagsExit(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "--no-such-flag"},
		{[]string{"--port=70000"}, "--port"},
		{[]string{"--port=http"}, "--port"},
		{[]string{"--list-page-size=0"}, "--list-page-size"},
		{[]string{"--log-level=verbose"}, "--log-level"},
		{[]string{"--request-timeout=-1s"}, "--request-timeout"},
		{[]string{"--etcd-servers=https://127.0.0.1:2379", "--etcd-cafile=" + missing}, "--etcd-cafile"},
		{[]string{"--etcd-servers=https://127.0.0.1:2379", "--etcd-certfile=" + missing, "--etcd-keyfile=" + missing}, "--etcd-certfile"},
		{[]string{"--demo", "--etcd-servers=http://127.0.0.1:2379"}, "--demo"},
		// Issue 23: no port to serve on, TLS and audit flags.
		{[]string{"--port=0"}, "--port and --secure-port are both 0"},
		{[]string{"--tls-min-version=VersionTLS9"}, "--tls-min-version"},
		{[]string{"--tls-cipher-suites=NOPE"}, "--tls-cipher-suites"},
		{[]string{"--audit-log-path=" + missing, "--audit-log-maxsize=-1"}, "--audit-log-maxsize"},
		{[]string{"--audit-log-path=" + missing, "--audit-policy-file=" + missing}, "--audit-policy-file"},
	}
	for _, tt := range tests {
		p := run(t, tt.args...)
		err := p.waitExit(30 * time.Second)
		if code := exitCode(err); code != 2 {
			t.Errorf("lazyapi %s: exit %d (%v), want 2", strings.Join(tt.args, " "), code, err)
		}
		oneLine(t, p.stderr.String(), tt.want)
	}
}

func TestUnreachableEtcdExit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := run(t, "--etcd-servers=http://"+addr)
	err = p.waitExit(30 * time.Second)
	if code := exitCode(err); code != 1 {
		t.Errorf("exit %d (%v), want 1", code, err)
	}
	oneLine(t, p.stderr.String(), "--etcd-servers")
	if !strings.Contains(p.stderr.String(), addr) {
		t.Errorf("stderr %q does not name the endpoint %s", p.stderr.String(), addr)
	}
}

func TestPortInUseExit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	p := run(t, fmt.Sprintf("--port=%d", port), "--etcd-servers=http://127.0.0.1:1")
	err = p.waitExit(30 * time.Second)
	if code := exitCode(err); code != 1 {
		t.Errorf("exit %d (%v), want 1", code, err)
	}
	oneLine(t, p.stderr.String(), "--port")
}

// TestSIGTERMDrains starts a large LIST, reads only its beginning, sends
// SIGTERM, and checks that lazyapi stops accepting connections, still
// completes the LIST, and exits 0.
func TestSIGTERMDrains(t *testing.T) {
	etcd := etcdtest.Start(t)
	const n = 300
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seedBig(t, ctx, etcd.Client, n)
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--list-page-size=20", "--request-timeout=30s")
	resp, head := startBigList(t, ctx, p.URL)
	defer resp.Body.Close()

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused once the listener is closed, while the
	// LIST is still in flight.
	host := strings.TrimPrefix(p.URL, "http://")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", host, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("lazyapi still accepts connections 20s after SIGTERM")
		}
		select {
		case <-p.exited:
			t.Fatalf("lazyapi exited before the in-flight LIST was read: %v\nstderr:\n%s", p.err, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-p.exited:
		t.Fatalf("lazyapi exited before the in-flight LIST was read: %v\nstderr:\n%s", p.err, p.stderr)
	default:
	}

	tail, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("in-flight LIST cut during shutdown after %d bytes: %v", len(head)+len(tail), err)
	}
	var list corev1.ConfigMapList
	if err := json.Unmarshal(append(head, tail...), &list); err != nil {
		t.Fatalf("in-flight LIST is not complete JSON (%d bytes): %v", len(head)+len(tail), err)
	}
	if len(list.Items) != n {
		t.Errorf("in-flight LIST has %d items, want %d", len(list.Items), n)
	}
	if err := p.waitExit(30 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0\nstderr:\n%s", err, p.stderr)
	}
	if s := p.stderr.String(); strings.Contains(s, "drain incomplete") || !strings.Contains(s, "shutting down") {
		t.Errorf("shutdown logs:\n%s", s)
	}
}

// seedBig writes n ConfigMaps of 64 KiB each into namespace "big": with
// n = 300, ~19 MiB, more than the socket buffers between lazyapi and a
// client hold, so a LIST the client stops reading stays in flight.
func seedBig(t *testing.T, ctx context.Context, cli *clientv3.Client, n int) {
	t.Helper()
	for i := range n {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%03d", i), Namespace: "big", UID: types.UID(fmt.Sprint("uid-", i))},
			Data:       map[string]string{"blob": strings.Repeat(string(rune('a'+i%26)), 64<<10)},
		}
		if _, err := cli.Put(ctx, storagefmt.Key("/registry", "configmaps", "big", cm.Name), string(mustProtobuf(t, cm))); err != nil {
			t.Fatal(err)
		}
	}
}

// startBigList starts a LIST of the "big" namespace and reads its first
// 64 KiB; the rest stays unread until the caller reads resp.Body.
func startBigList(t *testing.T, ctx context.Context, url string) (*http.Response, []byte) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/namespaces/big/configmaps", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		t.Fatalf("list: %s: %s", resp.Status, b)
	}
	head := make([]byte, 64<<10)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		resp.Body.Close()
		t.Fatalf("cannot read the start of the list: %v", err)
	}
	return resp, head
}

// TestAdmission429: with --bulk-list-threshold above the LIST's size, the
// LIST is a short request holding the only short slot and a GET gets
// kube-apiserver's 429; with the default threshold the same LIST (19 MiB)
// is bulk: it holds the only bulk seat, a second bulk LIST gets the 429
// while GETs are still served, and each slot is free again after the
// LIST's last byte.
func TestAdmission429(t *testing.T) {
	etcd := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seedBig(t, ctx, etcd.Client, 300)
	fetch := func(url string) (*http.Response, []byte) {
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		r, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r, b
	}
	want429 := func(what string, r *http.Response, body []byte) {
		t.Helper()
		var st metav1.Status
		if r.StatusCode != http.StatusTooManyRequests || json.Unmarshal(body, &st) != nil || st.Reason != metav1.StatusReasonTooManyRequests || st.Code != 429 {
			t.Errorf("%s: %s %.300s, want 429 TooManyRequests Status", what, r.Status, body)
		}
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s: 429 without Retry-After", what)
		}
	}
	// eventually200 polls url until it answers 200: a slot is released
	// after the response's last byte.
	eventually200 := func(what, url string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			r, body := fetch(url)
			if r.StatusCode == http.StatusOK {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s %.300s, want 200", what, r.Status, body)
			}
			time.Sleep(20 * time.Millisecond) // polling for the release
		}
	}
	t.Run("short", func(t *testing.T) {
		p := start(t, "--etcd-servers="+etcd.Endpoint, "--max-requests-inflight=1", "--max-queued-requests=0", "--bulk-list-threshold=1Gi")
		get := p.URL + "/api/v1/namespaces/big/configmaps/big-001"
		resp, _ := startBigList(t, ctx, p.URL)
		defer resp.Body.Close()
		r, body := fetch(get)
		want429("GET while the only short slot is taken", r, body)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		eventually200("GET after the LIST finished", get)
	})
	t.Run("bulk", func(t *testing.T) {
		p := start(t, "--etcd-servers="+etcd.Endpoint, "--max-requests-inflight=1", "--max-bulk-lists-inflight=1", "--max-queued-requests=0")
		get := p.URL + "/api/v1/namespaces/big/configmaps/big-001"
		list := p.URL + "/api/v1/namespaces/big/configmaps"
		resp, _ := startBigList(t, ctx, p.URL)
		defer resp.Body.Close()
		if r, body := fetch(get); r.StatusCode != http.StatusOK {
			t.Errorf("GET while a bulk LIST streams: %s %.300s, want 200", r.Status, body)
		}
		r, body := fetch(list)
		want429("second bulk LIST while the only bulk seat is taken", r, body)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		eventually200("bulk LIST after the first finished", list)
	})
}

// TestDemo starts lazyapi with --demo on an empty embedded etcd and lists the
// demo ConfigMaps; a second start on the same data directory does not seed
// again.
func TestDemo(t *testing.T) {
	dataDir := t.TempDir()
	objs, err := demo.Objects("/registry", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wantCMs := demo.Count(objs, "configmaps", "")

	p := start(t, "--demo", "--data-dir="+dataDir)
	if _, ok := p.stdout.wait(time.Now().Add(10*time.Second), func(s string) bool {
		return strings.Contains(s, "kubectl --server "+p.URL+" get configmaps -A")
	}); !ok {
		t.Errorf("stdout does not show the kubectl command to try:\n%s", p.stdout)
	}
	if !strings.Contains(p.stdout.String(), fmt.Sprintf("demo: wrote %d objects", len(objs))) {
		t.Errorf("stdout does not report the seeding:\n%s", p.stdout)
	}
	countConfigMaps(t, p.URL, wantCMs)
	if err := p.stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\nstderr:\n%s", err, p.stderr)
	}

	p = start(t, "--demo", "--data-dir="+dataDir)
	if !strings.Contains(p.stdout.String(), "not seeding") {
		t.Errorf("second --demo start does not say it skips seeding:\n%s", p.stdout)
	}
	countConfigMaps(t, p.URL, wantCMs)
}

// countConfigMaps checks the number of ConfigMaps with kubectl when it is on
// PATH, and with client-go always.
func countConfigMaps(t *testing.T, url string, want int) {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: url})
	list, err := cs.CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != want {
		t.Errorf("client-go lists %d configmaps (err %v), want %d", len(list.Items), err, want)
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Log("kubectl is not on PATH: checked with client-go only")
		return
	}
	tb := parseTable(t, mustKubectl(t, url, "get", "configmaps", "-A"))
	if len(tb.rows) != want {
		t.Errorf("kubectl get configmaps -A: %d rows, want %d", len(tb.rows), want)
	}
}

// TestMetricsAndMemoryLimit checks /metrics after a request, and that
// --memory-limit is exported (lazyapi_memory_limit_bytes) and sets
// GOMEMLIMIT a quarter below it (go_memlimit_bytes: 96 MiB would be more).
func TestMetricsAndMemoryLimit(t *testing.T) {
	etcd, _ := seededEtcd(t)
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--memory-limit=300Mi")
	httpGet(t, p.URL+"/api/v1/namespaces/team-a/configmaps", "application/json")
	for _, path := range []string{"/healthz", "/readyz", "/livez"} {
		if body := httpGet(t, p.URL+path, "*/*"); strings.TrimSpace(string(body)) != "ok" {
			t.Errorf("GET %s = %q, want ok", path, body)
		}
	}
	metrics := string(httpGet(t, p.URL+"/metrics", "text/plain"))
	for _, want := range []string{
		"lazyapi_memory_limit_bytes 314572800",
		"go_memlimit_bytes 235929600",
		`lazyapi_apiserver_request_total{verb="LIST",resource="configmaps"`,
		"lazyapi_etcd_request_duration_seconds",
		"process_resident_memory_bytes",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
