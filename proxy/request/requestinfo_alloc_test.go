//go:build !race

package request

import (
	"testing"
)

// TestResolveRequestAllocs: resolving a GET, a LIST or a watch without a
// field selector allocates nothing (a field selector naming an object is
// parsed, as kube-apiserver parses it).
func TestResolveRequestAllocs(t *testing.T) {
	for _, c := range resolveCases[:2] {
		var ri Info
		if allocs := testing.AllocsPerRun(100, func() { Resolve(&ri, "GET", c.path, c.query) }); allocs != 0 {
			t.Errorf("resolveRequest(%s %s?%s): %v allocations, want 0", "GET", c.path, c.query, allocs)
		}
	}
}
