//go:build !race

package resource

import "testing"

// Lookup runs on every request: it must not allocate.
func TestLookupAllocs(t *testing.T) {
	tb := NewBuiltin()
	if n := testing.AllocsPerRun(100, func() {
		if _, ok := tb.Lookup("apps", "v1", "deployments"); !ok {
			t.Fatal("deployments not found")
		}
	}); n != 0 {
		t.Errorf("Lookup allocates %v times per call, want 0", n)
	}
}
