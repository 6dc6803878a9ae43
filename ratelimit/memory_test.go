package ratelimit

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
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
		{"0.5", 1, false},             // rounds up
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
		got, err := ParseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDefaultBudgets(t *testing.T) {
	tests := []struct {
		limit, cache int64
		wantCache    int64
		wantInflight int64
		wantErr      bool
	}{
		{512 << 20, -1, 128 << 20, 128 << 20, false},
		{1 << 30, -1, 256 << 20, 256 << 20, false},
		{0, -1, 256 << 20, 256 << 20, false}, // no limit: as DefaultMemoryLimit
		{1 << 30, 100 << 20, 256 << 20, 412 << 20, false},
		{1 << 30, 512 << 20, 256 << 20, 0, true}, // cache takes the whole half
		{4 << 20, -1, 1 << 20, 1 << 20, false},
		{2 << 20, -1, 512 << 10, 0, true}, // below 1 MiB
	}
	for _, tt := range tests {
		cache := tt.cache
		if cache < 0 {
			cache = DefaultCacheBytes(tt.limit)
		}
		if cache != tt.wantCache && tt.cache < 0 {
			t.Errorf("DefaultCacheBytes(%d) = %d, want %d", tt.limit, cache, tt.wantCache)
		}
		got, err := DefaultInflightBytes(tt.limit, cache)
		if (err != nil) != tt.wantErr || got != tt.wantInflight {
			t.Errorf("DefaultInflightBytes(%d, %d) = %d, %v; want %d, err=%v", tt.limit, cache, got, err, tt.wantInflight, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "--max-inflight-bytes") {
			t.Errorf("DefaultInflightBytes error %q does not name --max-inflight-bytes", err)
		}
	}
	if _, err := DefaultInflightBytes(1<<30, -5); err == nil {
		t.Errorf("DefaultInflightBytes(negative cache) = nil error")
	}
}

func TestEstimateList(t *testing.T) {
	tests := []struct {
		avg   int64
		items int
		buf   int64
		want  int64
	}{
		{100 << 10, 500, 64 << 10, 500*(2*(100<<10)+256) + 64<<10},
		{1000, 1, 4096, 2000 + 256 + 4096},
		{0, 0, 4096, 4096},
		{-5, -1, -1, 0},
		{math.MaxInt64 / 2, 10, 0, math.MaxInt64},
		{1 << 20, 1 << 30, math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		if got := EstimateList(tt.avg, tt.items, tt.buf); got != tt.want {
			t.Errorf("EstimateList(%d, %d, %d) = %d, want %d", tt.avg, tt.items, tt.buf, got, tt.want)
		}
	}
}

// TestApplyMemoryLimit changes the process's memory limit and restores it;
// it must not run in parallel with other tests that read it (none do).
func TestApplyMemoryLimit(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	if prev := ApplyMemoryLimit(512 << 20); prev != orig {
		t.Fatalf("ApplyMemoryLimit returned %d, want previous %d", prev, orig)
	}
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Fatalf("memory limit = %d, want %d", got, 512<<20)
	}
	if prev := ApplyMemoryLimit(0); prev != 512<<20 {
		t.Fatalf("ApplyMemoryLimit(0) = %d, want current %d", prev, 512<<20)
	}
	if got := debug.SetMemoryLimit(-1); got != 512<<20 {
		t.Fatalf("ApplyMemoryLimit(0) changed the limit to %d", got)
	}
}

func TestAddFlags(t *testing.T) {
	cfg := DefaultConfig()
	fs := pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	var memLimit Bytes
	fs.Var(&memLimit, "memory-limit", "")
	cfg.AddFlags(fs)
	err := fs.Parse([]string{"--memory-limit=512Mi", "--max-requests-inflight=10", "--max-watches-inflight=7",
		"--max-single-request-bytes=1Gi", "--max-queued-requests=5", "--max-queue-wait=3s",
		"--per-client-qps=2.5", "--per-client-burst=4", "--max-bulk-lists-inflight=3", "--bulk-list-threshold=8Mi",
		"--short-reserved-inflight-bytes=32Mi", "--bulk-list-yield=20ms", "--per-client-share=0.25"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxInflightBytes == 0 {
		if cfg.MaxInflightBytes, err = DefaultInflightBytes(int64(memLimit), DefaultCacheBytes(int64(memLimit))); err != nil {
			t.Fatal(err)
		}
	}
	want := Config{MaxRequestsInflight: 10, MaxWatchesInflight: 7, MaxInflightBytes: 128 << 20,
		MaxSingleRequestBytes: 1 << 30, MaxQueued: 5, MaxQueueWait: 3 * time.Second,
		PerClientQPS: 2.5, PerClientBurst: 4, MaxBulkInflight: 3, BulkListBytes: 8 << 20,
		ShortReservedBytes: 32 << 20, BulkYield: 20 * time.Millisecond, ClientShare: 0.25, MaxClasses: 1024}
	if cfg != want {
		t.Fatalf("parsed config = %+v, want %+v", cfg, want)
	}
	if _, err := New(cfg); err != nil {
		t.Fatalf("New(parsed) = %v", err)
	}
	if memLimit.String() != "536870912" {
		t.Fatalf("Bytes.String() = %q", memLimit.String())
	}

	fs = pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	cfg.AddFlags(fs)
	err = fs.Parse([]string{"--max-inflight-bytes=12 parsecs"})
	if err == nil || !strings.Contains(err.Error(), "max-inflight-bytes") {
		t.Fatalf("Parse(bad quantity) = %v, want error naming the flag", err)
	}
}
