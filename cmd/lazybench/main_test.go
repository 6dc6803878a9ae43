package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"seed"}, "--etcd-servers is required"},
		{[]string{"clean"}, "--etcd-servers is required"},
		{[]string{"seed", "--kind", "node", "--etcd-servers", "http://127.0.0.1:1"}, `unknown --kind "node"`},
		{[]string{"seed", "--size", "zipf:3", "--etcd-servers", "http://127.0.0.1:1"}, "invalid --size"},
		{[]string{"run"}, "run takes one scenario"},
		{[]string{"run", "list"}, "no targets"},
		{[]string{"run", "list", "--target", "nourl"}, "want NAME=URL"},
		{[]string{"run", "list", "--target", "a=http://x", "--token", "b=t"}, `names no --target`},
		{[]string{"run", "list", "--target", "a=http://x", "--accept", "xml"}, `unknown --accept "xml"`},
		{[]string{"run", "watch", "--target", "a=http://x"}, "--etcd-servers is required"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"record"}, "--report is required"},
		{[]string{"storm", "--hold", "-1s"}, "invalid --hold -1s"},
		{[]string{"robustness"}, "--duration is required"},
		{[]string{"robustness", "--duration", "1m", "--memory-limit", "lots"}, `invalid --memory-limit "lots"`},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tt.args, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("lazybench %s: error %v, want it to contain %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"run", "--help"}, &out, &out); err != nil || !strings.Contains(out.String(), "--concurrency") {
		t.Errorf("run --help: %v\n%s", err, out.String())
	}
}

// TestRunBadScenarioNoWork: an unknown scenario fails before any work: no
// sampling, no results folder (issue 28: it sampled for 2 s and wrote
// results and a PNG first).
func TestRunBadScenarioNoWork(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	start := time.Now()
	err := run(context.Background(), []string{"run", "bogus", "--target", "a=http://127.0.0.1:1", "--out", out}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `unknown scenario "bogus"`) || !strings.Contains(err.Error(), "listflood") {
		t.Errorf("run bogus = %v, want unknown scenario naming the valid ones", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("run bogus took %v, want at once", d)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("run bogus made %s (%v), want nothing written", out, err)
	}
}

// TestSuiteWritesOutOnly: lazybench suite writes into --out and leaves the
// checkout's bench/RESULTS.md alone unless --update-results is given
// (issue 28: the default run rewrote the tracked file).
func TestSuiteWritesOutOnly(t *testing.T) {
	cfg, err := suiteConfig([]string{"--out", "/tmp/x", "--repo", "/tmp/repo"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || cfg.UpdateResults || cfg.Out != "/tmp/x" {
		t.Errorf("suite defaults: %+v, %v; want UpdateResults false, Out /tmp/x", cfg, err)
	}
	cfg, err = suiteConfig([]string{"--update-results"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || !cfg.UpdateResults {
		t.Errorf("suite --update-results: %+v, %v; want UpdateResults", cfg, err)
	}
	if cfg, err = suiteConfig([]string{"--no-update-results"}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil || cfg.UpdateResults {
		t.Errorf("suite --no-update-results (old command lines): %+v, %v", cfg, err)
	}
}

// TestEtcdNewDataDir: lazybench etcd --data-dir on a directory that does
// not exist makes it (issue 28: the lock file was opened first and failed).
func TestEtcdNewDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "etcd")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"etcd", "--data-dir", dir, "--listen", "127.0.0.1:0"}, io.Discard, io.Discard)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "member")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("lazybench etcd --data-dir NEW = %v, want it to serve", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd made no member directory within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("lazybench etcd after cancel = %v", err)
	}
}
