package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/etcdtest"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// logSink collects JSON log lines and hands the "serving" entry's URL over a
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
		if json.Unmarshal(line, &e) == nil && e.Msg == "serving" {
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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &logSink{serving: make(chan string, 1)}
	var stdout bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--etcd-servers=" + etcd.Endpoint, "--port=0"}, &stdout, sink)
	}()
	var url string
	select {
	case url = <-sink.serving:
	case err := <-done:
		t.Fatalf("run returned before serving: %v\n%s", err, sink)
	case <-time.After(60 * time.Second):
		t.Fatalf("run did not serve within 60s\n%s", sink)
	}

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

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancel")
	}
	if !strings.Contains(stdout.String(), "kubectl --server "+url) {
		t.Errorf("stdout = %q, want the kubectl hint", stdout.String())
	}
	if _, err := http.Get(url + "/version"); err == nil {
		t.Errorf("server still answers after run returned")
	}
}
