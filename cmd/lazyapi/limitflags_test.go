package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/lazyapi/lazyapi/ratelimit"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"512Mi", 512 << 20, false},
		{"1Gi", 1 << 30, false},
		{"1G", 1_000_000_000, false},
		{"500M", 500_000_000, false},
		{"64Ki", 64 << 10, false},
		{"1k", 1000, false},
		{"1e9", 1_000_000_000, false},
		{"1.5Ki", 1536, false},
		{"0.5", 0, true},              // not a whole byte
		{"8Ei", math.MaxInt64, false}, // ParseQuantity saturates
		{"9223372036854775808", 0, true},
		{"1e19", 0, true},
		{"7Ei", 7 << 60, false},
		{"", 0, true},
		{"-1Mi", 0, true},
		{"12 MB", 0, true},
		{"1MB", 0, true},
		{"Mi", 0, true},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLimitFlags: the limiter's flags fill ratelimit.Config.
func TestLimitFlags(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	fs := pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	var memLimit byteSize
	fs.Var(&memLimit, "memory-limit", "")
	addLimitFlags(fs, &cfg)
	err := fs.Parse([]string{"--memory-limit=512Mi", "--max-requests-inflight=10", "--max-watches-inflight=7",
		"--max-single-request-bytes=1Gi", "--max-queued-requests=5", "--max-queue-wait=3s",
		"--per-client-qps=2.5", "--per-client-burst=4", "--max-bulk-lists-inflight=3", "--bulk-list-threshold=8Mi",
		"--short-reserved-inflight-bytes=32Mi", "--bulk-list-yield=20ms", "--per-client-share=0.25"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxInflightBytes == 0 {
		if cfg.MaxInflightBytes, err = ratelimit.DefaultInflightBytes(int64(memLimit), ratelimit.DefaultCacheBytes(int64(memLimit))); err != nil {
			t.Fatal(err)
		}
	}
	want := ratelimit.Config{MaxRequestsInflight: 10, MaxWatchesInflight: 7, MaxInflightBytes: 128 << 20,
		MaxSingleRequestBytes: 1 << 30, MaxQueued: 5, MaxQueueWait: 3 * time.Second,
		PerClientQPS: 2.5, PerClientBurst: 4, MaxBulkInflight: 3, BulkListBytes: 8 << 20,
		ShortReservedBytes: 32 << 20, BulkYield: 20 * time.Millisecond, ClientShare: 0.25, MaxClasses: 1024}
	if cfg != want {
		t.Fatalf("parsed config = %+v, want %+v", cfg, want)
	}
	if _, err := ratelimit.New(cfg); err != nil {
		t.Fatalf("New(parsed) = %v", err)
	}
	if memLimit.String() != "512Mi" {
		t.Fatalf("byteSize.String() = %q", memLimit.String())
	}

	fs = pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	addLimitFlags(fs, &cfg)
	err = fs.Parse([]string{"--max-inflight-bytes=12 parsecs"})
	if err == nil || !strings.Contains(err.Error(), "max-inflight-bytes") {
		t.Fatalf("Parse(bad quantity) = %v, want error naming the flag", err)
	}
}

func TestParseWatchCacheSizes(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]int
		wantErr bool
	}{
		{in: nil, want: map[string]int{}},
		{in: []string{"configmaps#100", "deployments.apps#0"}, want: map[string]int{"configmaps": 100, "deployments.apps": 0}},
		{in: []string{" Secrets#5 "}, want: map[string]int{"secrets": 5}},
		{in: []string{"configmaps"}, wantErr: true},
		{in: []string{"#5"}, wantErr: true},
		{in: []string{"pods#x"}, wantErr: true},
		{in: []string{"pods#-1"}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseWatchCacheSizes(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseWatchCacheSizes(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "--watch-cache-sizes") {
				t.Errorf("parseWatchCacheSizes(%q) error %q does not name the flag", tt.in, err)
			}
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("parseWatchCacheSizes(%q) = %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("parseWatchCacheSizes(%q)[%q] = %d, want %d", tt.in, k, got[k], v)
			}
		}
	}
}

// TestLimitErrorNamesFlags: ratelimit's errors name Config fields; the
// command line names the flags.
func TestLimitErrorNamesFlags(t *testing.T) {
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 1 << 20
	cfg.MaxSingleRequestBytes = 10
	_, err := ratelimit.New(cfg)
	if err == nil {
		t.Fatal("ratelimit.New(MaxSingleRequestBytes below MaxInflightBytes) = nil error")
	}
	got := limitError(err).Error()
	if !strings.Contains(got, "--max-single-request-bytes") || !strings.Contains(got, "--max-inflight-bytes") || strings.Contains(got, "Max") {
		t.Errorf("limitError(%q) = %q, want the flags named instead of the fields", err, got)
	}
}
