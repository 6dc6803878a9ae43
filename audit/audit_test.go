package audit_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/lazyapi/lazyapi/audit"
)

// TestEmitNeverBlocks: with the file's reader stalled (a FIFO nobody
// reads), Emit returns at once and drops what does not fit in the buffer,
// counting it; Close returns once the reader goes away.
func TestEmitNeverBlocks(t *testing.T) {
	fifo, r := stalledFIFO(t)
	ms := metrics.NewSet()
	l, err := audit.New(audit.Config{Path: fifo, BufferSize: 10, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000 // ~2 MB of events: far more than the pipe and the writer's buffer hold
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			l.Emit(&auditv1.Event{AuditID: "id", Stage: auditv1.StageResponseComplete, Level: auditv1.LevelMetadata,
				RequestURI: "/api/v1/namespaces/ns/secrets/" + strings.Repeat("x", 300), Verb: "get",
				ResponseStatus: &metav1.Status{Code: int32(200 + i%2)}})
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Emit blocked on a stalled audit file")
	}
	dropped := ms.GetOrCreateCounter("lazyapi_audit_events_dropped_total").Get()
	if dropped == 0 || dropped >= n {
		t.Errorf("dropped %d of %d events, want some (the buffer holds 10)", dropped, n)
	}
	r.Close() // the writer's next write fails: Close can finish
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return after the reader went away")
	}
}

// TestPolicy: the default policy logs every request at Metadata but the
// health endpoints; a policy file is kube-apiserver's, levels and omitted
// stages included; a bad one is an error.
func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	l, err := audit.New(audit.Config{Path: filepath.Join(dir, "a.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	u := &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}
	secrets := &authorizer.AttributesRecord{User: u, Verb: "get", Resource: "secrets", Namespace: "ns", ResourceRequest: true}
	livez := &authorizer.AttributesRecord{Verb: "get", Path: "/livez"}
	version := &authorizer.AttributesRecord{Verb: "get", Path: "/version"}
	if c := l.Evaluate(secrets); c.Level != "Metadata" || audit.Omitted(c, auditv1.StageResponseComplete) {
		t.Errorf("default policy, secrets: %+v", c)
	}
	if c := l.Evaluate(version); c.Level != "Metadata" {
		t.Errorf("default policy, /version: %+v", c)
	}
	if c := l.Evaluate(livez); !audit.Omitted(c, auditv1.StageResponseComplete) {
		t.Errorf("default policy, /livez: %+v, want None", c)
	}

	pf := filepath.Join(dir, "policy.yaml")
	policy := `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["ResponseStarted"]
rules:
  - level: None
    users: ["alice"]
    resources: [{group: "", resources: ["configmaps"]}]
  - level: RequestResponse
    resources: [{group: "", resources: ["secrets"]}]
`
	if err := os.WriteFile(pf, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	l2, err := audit.New(audit.Config{Path: filepath.Join(dir, "b.log"), PolicyFile: pf})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if c := l2.Evaluate(secrets); c.Level != "RequestResponse" || !audit.Omitted(c, auditv1.StageResponseStarted) || audit.Omitted(c, auditv1.StageResponseComplete) {
		t.Errorf("policy file, secrets: %+v", c)
	}
	cm := &authorizer.AttributesRecord{User: u, Verb: "list", Resource: "configmaps", Namespace: "ns", ResourceRequest: true}
	if c := l2.Evaluate(cm); !audit.Omitted(c, auditv1.StageResponseComplete) {
		t.Errorf("policy file, alice's configmaps: %+v, want None", c)
	}
	if c := l2.Evaluate(livez); !audit.Omitted(c, auditv1.StageResponseComplete) {
		t.Errorf("policy file, /livez (no rule): %+v, want None", c)
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Loud\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.New(audit.Config{Path: filepath.Join(dir, "c.log"), PolicyFile: bad}); err == nil || !strings.Contains(err.Error(), "cannot load audit policy") {
		t.Errorf("bad policy: %v", err)
	}
}

// TestRotation: with MaxSize the file is rotated as kube-apiserver's
// --audit-log-maxsize rotates it (lumberjack), keeping MaxBackups files.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ms := metrics.NewSet()
	l, err := audit.New(audit.Config{Path: filepath.Join(dir, "audit.log"), MaxSize: 1, MaxBackups: 2, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	uri := "/api/v1/namespaces/ns/secrets/" + strings.Repeat("x", 1000)
	for range 4000 { // ~4.5 MB
		l.Emit(&auditv1.Event{AuditID: "id", Stage: auditv1.StageResponseComplete, Level: auditv1.LevelMetadata, RequestURI: uri, Verb: "get"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(dir, "audit*.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Errorf("files %v, want audit.log and 2 backups", files)
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.Size() > 1<<20 || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want at most 1 MiB, mode 0600", f, st.Size(), err)
		}
	}
}

// TestBufferBytes: events queued behind a stalled file are bounded in
// bytes as well as in number: 1 MiB request URIs are dropped once 16 MiB
// wait.
func TestBufferBytes(t *testing.T) {
	fifo, r := stalledFIFO(t)
	ms := metrics.NewSet()
	l, err := audit.New(audit.Config{Path: fifo, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	uri := "/api/v1/namespaces/ns/secrets?labelSelector=" + strings.Repeat("x", 1<<20)
	const n = 100
	for range n {
		l.Emit(&auditv1.Event{AuditID: "id", Stage: auditv1.StageResponseStarted, Level: auditv1.LevelMetadata, RequestURI: uri})
	}
	// At most 16 wait in the queue, one is being written.
	if dropped := ms.GetOrCreateCounter("lazyapi_audit_events_dropped_total").Get(); dropped < n-17 {
		t.Errorf("dropped %d of %d 1 MiB events, want all but at most 17 (16 MiB queued)", dropped, n)
	}
	r.Close()
	l.Close() //nolint:errcheck
}

// stalledFIFO makes a FIFO whose reader is open and reads nothing (a
// stalled audit log file), skipping the test where FIFOs are not made.
func stalledFIFO(t *testing.T) (path string, r *os.File) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "audit.fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFO: %v", err)
	}
	r, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	return path, r
}
