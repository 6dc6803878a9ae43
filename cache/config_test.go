package cache

import "testing"

func TestFillPageLimit(t *testing.T) {
	cfg := Config{PageSize: 1000, PageBytes: 1 << 20}
	for _, tt := range []struct {
		seen, bytes, want int64
	}{
		{0, 0, 16},               // first page: small, sizes unknown
		{16, 16 * 100 << 10, 10}, // 100 KiB objects: 10 per MiB
		{16, 16 * 10 << 20, 1},   // objects larger than a page: one at a time
		{16, 16 * 100, 1000},     // small objects: capped by PageSize
		{16, 0, 1000},            // empty values
	} {
		if got := fillPageLimit(cfg, tt.seen, tt.bytes); got != tt.want {
			t.Errorf("fillPageLimit(seen %d, bytes %d) = %d, want %d", tt.seen, tt.bytes, got, tt.want)
		}
	}
}
