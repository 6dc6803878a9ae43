package resource

import (
	"fmt"
	"testing"
)

func BenchmarkLookup(b *testing.B) {
	tb := NewBuiltin()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tb.Lookup("apps", "v1", "deployments"); !ok {
			b.Fatal("deployments not found")
		}
	}
}

// BenchmarkRebuild measures what one CRD change costs: rebuilding the table
// and every discovery document, with n CRDs in the cluster.
func BenchmarkRebuild(b *testing.B) {
	for _, n := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("crds=%d", n), func(b *testing.B) {
			tb := newTableWithCRDs(b, n)
			b.ReportAllocs()
			for b.Loop() {
				tb.mu.Lock()
				tb.rebuildLocked()
				tb.mu.Unlock()
			}
		})
	}
}

func newTableWithCRDs(tb testing.TB, n int) *Table {
	t := NewBuiltin()
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range n {
		c := widgets
		c.group = fmt.Sprintf("g%04d.example.com", i)
		b, err := c.object().MarshalJSON()
		if err != nil {
			tb.Fatal(err)
		}
		parsed, err := parseCRD(b)
		if err != nil {
			tb.Fatal(err)
		}
		t.crds[c.key()] = parsed
	}
	t.rebuildLocked()
	return t
}
