package estimate

import (
	"fmt"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/codec"
)

// TestSizeMemo: sizes are found by key and revision only, survive the
// field ranges of real values, and the memo stays within sizeMemoEntries.
func TestSizeMemo(t *testing.T) {
	m := NewSizeMemo(metrics.NewSet())
	z := codec.ItemSizes{Format: codec.FormatProtobuf, Raw: 3100, Meta: -1}
	m.Put([]byte("/registry/secrets/a/s"), 7, z)
	if got, ok := m.Get([]byte("/registry/secrets/a/s"), 7); !ok || got != z {
		t.Fatalf("get at the revision put: %+v %v, want %+v", got, ok, z)
	}
	if _, ok := m.Get([]byte("/registry/secrets/a/s"), 8); ok {
		t.Fatal("found at another revision")
	}
	if _, ok := m.Get([]byte("/registry/secrets/a/t"), 7); ok {
		t.Fatal("found under another key")
	}
	z2 := codec.ItemSizes{Format: codec.FormatJSON, Raw: 1 << 30, Meta: 1 << 20}
	m.Put([]byte("/registry/secrets/a/s"), 9, z2)
	if got, ok := m.Get([]byte("/registry/secrets/a/s"), 9); !ok || got != z2 {
		t.Fatalf("get after a new revision: %+v %v, want %+v", got, ok, z2)
	}
	for i := range sizeMemoEntries + 10 {
		m.Put(fmt.Appendf(nil, "/registry/secrets/b/s-%d", i), 1, z)
	}
	if n := len(m.m); n > sizeMemoEntries {
		t.Fatalf("%d entries, bound %d", n, sizeMemoEntries)
	}
}
