package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lazyapi/lazyapi/bench"
)

// TestProbeCommand runs the probe command as `run --probe-process` starts
// it (paths on stdin, token in the environment) against a real HTTP server
// and checks that it GETs only the given paths with the token and reports
// them as JSON.
func TestProbeCommand(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	var badAuth int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		if r.Header.Get("Authorization") != "Bearer secret" {
			badAuth++
		}
		mu.Unlock()
		if r.URL.Path == "/b" {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"kind":"ConfigMap"}`))
	}))
	defer srv.Close()
	t.Setenv(bench.ProbeTokenEnv, "secret")
	var out bytes.Buffer
	err := runProbe(context.Background(), []string{"--url", srv.URL, "--duration", "400ms"}, strings.NewReader("/a\n\n/b\n"), &out)
	if err != nil {
		t.Fatal(err)
	}
	var res bench.ProbeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("cannot parse the probe's output %q: %v", out.String(), err)
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for p, n := range seen {
		if p != "/a" && p != "/b" {
			t.Errorf("probe GET %s, not a given path", p)
		}
		total += n
	}
	if total == 0 || res.Requests != int64(total) {
		t.Fatalf("probe reported %d requests, server saw %d (%v)", res.Requests, total, seen)
	}
	if badAuth != 0 {
		t.Errorf("%d requests without the token from %s", badAuth, bench.ProbeTokenEnv)
	}
	if res.StatusCodes["200"] != int64(seen["/a"]) || res.Throttled != int64(seen["/b"]) || res.Errors != 0 {
		t.Errorf("probe result %+v does not match the server's counts %v", res, seen)
	}
}

func TestProbeCommandErrors(t *testing.T) {
	var out bytes.Buffer
	if err := runProbe(context.Background(), nil, strings.NewReader("/a\n"), &out); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Errorf("probe without --url: %v", err)
	}
	if err := runProbe(context.Background(), []string{"--url", "http://127.0.0.1:1"}, strings.NewReader(""), &out); err == nil || !strings.Contains(err.Error(), "no paths") {
		t.Errorf("probe without paths: %v", err)
	}
}
