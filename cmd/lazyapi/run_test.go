package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// logSink collects log lines (text or JSON) and hands the "serving" entry's URL over a
// channel.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	serving chan string
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf.Write(p)
	for _, line := range bytes.Split(p, []byte("\n")) {
		var e struct{ Msg, URL string }
		if i := bytes.Index(line, []byte(" INFO serving {")); i >= 0 { // --logging-format=text
			if json.Unmarshal(line[i+len(" INFO serving "):], &e) == nil {
				s.serving <- e.URL
			}
		} else if json.Unmarshal(line, &e) == nil && e.Msg == "serving" {
			s.serving <- e.URL
		}
	}
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestRunServesAndStops runs the command in-process against a test etcd,
// reads an object through it, and stops it by cancelling the context.
func TestRunServesAndStops(t *testing.T) {
	etcd := etcdtest.Start(t)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm-1", Namespace: "ns", UID: "uid-1", CreationTimestamp: metav1.Now()},
		Data:       map[string]string{"k": "v"},
	}
	val, err := storagefmt.Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	put, err := etcd.Client.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "ns", "cm-1"), string(val))
	if err != nil {
		t.Fatal(err)
	}

	var stdout lockedBuffer
	r := startServing(t, &stdout, "--etcd-servers="+etcd.Endpoint, freePortFlag(t))
	url := r.url

	resp, err := http.Get(url + "/api/v1/namespaces/ns/configmaps/cm-1")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got corev1.ConfigMap
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || got.Name != "cm-1" || got.Data["k"] != "v" {
		t.Errorf("GET cm-1: %s %s", resp.Status, body)
	}
	if want := put.Header.Revision; got.ResourceVersion != strconv.FormatInt(want, 10) {
		t.Errorf("resourceVersion = %q, want %d", got.ResourceVersion, want)
	}

	if err := r.stop(); err != nil {
		t.Errorf("run after cancel = %v, want nil", err)
	}
	if !strings.Contains(stdout.String(), "kubectl --server "+url) {
		t.Errorf("stdout = %q, want the kubectl hint", stdout.String())
	}
	if _, err := http.Get(url + "/version"); err == nil {
		t.Errorf("server still answers after run returned")
	}
}

// TestDataDirInUse: a second lazyapi on the data directory of a running one
// fails within seconds with a one-line error naming --data-dir (it used to
// wait forever in etcd's database lock, deaf to the first SIGTERM).
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &logSink{serving: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--data-dir=" + dir, freePortFlag(t)}, io.Discard, sink) }()
	var url string
	select {
	case url = <-sink.serving:
	case err := <-done:
		t.Fatalf("first run returned before serving: %v\n%s", err, sink)
	case <-time.After(60 * time.Second):
		t.Fatalf("first run did not serve within 60s\n%s", sink)
	}

	second := make(chan error, 1)
	start := time.Now()
	go func() { second <- run(ctx, []string{"--data-dir=" + dir, freePortFlag(t)}, io.Discard, io.Discard) }()
	select {
	case err := <-second:
		if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "in use by another lazyapi") ||
			strings.Contains(err.Error(), "\n") {
			t.Errorf("second run on the same --data-dir = %v, want one line saying the directory is in use", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("second run failed after %v, want within seconds", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("second run on the same --data-dir did not fail within 30s")
	}

	// The first one serves (its accept loop runs: a cancel before that
	// is a shutdown race of its own, not this test's subject).
	if resp, err := http.Get(url + "/version"); err != nil {
		t.Fatalf("first run: %v", err)
	} else {
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("first run after cancel = %v", err)
	}
	// The directory is free again once the first one stopped.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	sink2 := &logSink{serving: make(chan string, 1)}
	third := make(chan error, 1)
	go func() { third <- run(ctx2, []string{"--data-dir=" + dir, freePortFlag(t)}, io.Discard, sink2) }()
	select {
	case url = <-sink2.serving:
	case err := <-third:
		t.Fatalf("run after the first stopped = %v, want it to serve\n%s", err, sink2)
	case <-time.After(60 * time.Second):
		t.Fatalf("run after the first stopped did not serve within 60s")
	}
	if resp, err := http.Get(url + "/version"); err == nil {
		resp.Body.Close()
	}
	cancel2()
	<-third
}

// running is the command run in-process by startServing.
type running struct {
	url  string // the plain port's URL, or the TLS one's when it is off
	sink *logSink
	stop func() error // cancels run and returns its error (once; the cleanup calls it too)
}

// startServing runs the command in-process with args (stdout to stdout)
// and returns once it serves; it is stopped at the end of the test if it
// was not before.
func startServing(t *testing.T, stdout io.Writer, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{sink: &logSink{serving: make(chan string, 1)}}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, stdout, r.sink) }()
	var once sync.Once
	var err error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = errors.New("run did not return within 30s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("run after cancel = %v", err)
		}
	})
	select {
	case r.url = <-r.sink.serving:
	case err := <-done:
		done <- err // for stop
		t.Fatalf("run returned before serving: %v\n%s", err, r.sink)
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not serve within 60s\n%s", r.sink)
	}
	return r
}
