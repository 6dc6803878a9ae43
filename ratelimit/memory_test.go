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
	const goLimit = 416 << 20 // 512 MiB minus 96 MiB (more than an eighth)
	if prev := ApplyMemoryLimit(512 << 20); prev != orig {
		t.Fatalf("ApplyMemoryLimit returned %d, want previous %d", prev, orig)
	}
	if got := debug.SetMemoryLimit(-1); got != goLimit {
		t.Fatalf("memory limit = %d, want %d", got, goLimit)
	}
	if prev := ApplyMemoryLimit(0); prev != goLimit {
		t.Fatalf("ApplyMemoryLimit(0) = %d, want current %d", prev, goLimit)
	}
	if got := debug.SetMemoryLimit(-1); got != goLimit {
		t.Fatalf("ApplyMemoryLimit(0) changed the limit to %d", got)
	}
}

// TestGoMemoryLimit: the headroom below --memory-limit is an eighth, at
// least 96 MiB, at most a quarter.
func TestGoMemoryLimit(t *testing.T) {
	for _, tt := range []struct{ limit, want int64 }{
		{512 << 20, 416 << 20},
		{1 << 30, 896 << 20},
		{4 << 30, 3584 << 20},
		{300 << 20, 225 << 20}, // 96 MiB would be more than a quarter
		{128 << 20, 96 << 20},
		{4 << 20, 3 << 20},
	} {
		if got := GoMemoryLimit(tt.limit); got != tt.want {
			t.Errorf("GoMemoryLimit(%d MiB) = %d MiB, want %d MiB", tt.limit>>20, got>>20, tt.want>>20)
		}
	}
}
