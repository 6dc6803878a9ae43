package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersion: --version prints the module version, the VCS revision and
// the Kubernetes release served, from the build information (issue 28: it
// printed "lazyapi (devel)" alone).
func TestVersion(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/lazyapi/lazyapi", Version: "v0.3.1-0.20261204172337-5ced5cd5b1a2+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "5ced5cd5b1a2c0ffee0000000000000000000000"},
			{Key: "vcs.time", Value: "2026-12-04T17:23:37Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := versionOf(bi).long()
	for _, want := range []string{"lazyapi v0.3.1-0.20261204172337-5ced5cd5b1a2+dirty\n",
		"revision:   5ced5cd5b1a2c0ffee0000000000000000000000 (2026-12-04T17:23:37Z), with uncommitted changes",
		"kubernetes: v1.37.2", "go:         go1.26.8"} {
		if !strings.Contains(got, want) {
			t.Errorf("--version =\n%s\nwant it to contain %q", got, want)
		}
	}
	if s := versionOf(bi).short(); s != "v0.3.1-0.20261204172337-5ced5cd5b1a2+dirty" {
		t.Errorf("short = %q, want the module version alone (it holds the revision)", s)
	}

	// A test binary has no VCS stamp: the command says so.
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, &stdout, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lazyapi ", "revision:", "kubernetes: v1.37.2"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("run --version = %q, want it to contain %q", stdout.String(), want)
		}
	}
}
