//go:build !race

package ratelimit

import (
	"context"
	"testing"
)

func TestAdmitReleaseAllocs(t *testing.T) {
	cfg, _ := testConfig(1 << 30)
	l := mustNew(t, cfg)
	ctx := context.Background()
	req := Request{Client: "10.0.0.1", Class: "list/configmaps", Bytes: 1 << 20}
	allocs := testing.AllocsPerRun(1000, func() {
		tk, err := l.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		tk.Use(900 << 10)
		tk.Release(0)
	})
	if allocs != 0 {
		t.Fatalf("Admit+Release allocate %v times per run, want 0", allocs)
	}
}
