package ratelimit

import (
	"runtime/debug"
	"strings"
	"testing"
)

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
		if err != nil && !strings.Contains(err.Error(), "MaxInflightBytes") {
			t.Errorf("DefaultInflightBytes error %q does not name MaxInflightBytes", err)
		}
	}
	if _, err := DefaultInflightBytes(1<<30, -5); err == nil {
		t.Errorf("DefaultInflightBytes(negative cache) = nil error")
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
