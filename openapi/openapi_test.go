package openapi

import (
	"runtime"
	"testing"
)

// builtinsOnly is a Source of the core, apps and batch group-versions and
// no CRDs.
type builtinsOnly struct{}

func (builtinsOnly) ServedBuiltinGroupVersions() []GroupVersion {
	return []GroupVersion{{"", "v1"}, {"apps", "v1"}, {"batch", "v1"}}
}
func (builtinsOnly) CRDGeneration() uint64 { return 1 }
func (builtinsOnly) CRDDocs() []*CRD       { return nil }
func (builtinsOnly) ServesWrites() bool    { return true }

var _ Source = builtinsOnly{}

// TestV2Memory measures what the merged v2 document costs: allocations to
// build it and its protobuf form (transient), and the heap kept afterwards
// (the compressed JSON and the protobuf), which must stay small; a second
// request reuses both.
func TestV2Memory(t *testing.T) {
	s := New(builtinsOnly{})
	var m0, m1, m2, m3 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	d, err := s.V2()
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m1)
	p, err := d.Proto()
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m2)
	runtime.GC()
	runtime.ReadMemStats(&m3)
	kept := int64(m3.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("v2: build allocated %d MiB, protobuf %d MiB; kept %d KiB (gzip JSON %d KiB, protobuf %d KiB)",
		(m1.TotalAlloc-m0.TotalAlloc)>>20, (m2.TotalAlloc-m1.TotalAlloc)>>20, kept>>10, len(d.Gzip())>>10, len(p)>>10)
	if kept > 8<<20 {
		t.Errorf("v2 document keeps %d KiB of heap, want at most 8 MiB", kept>>10)
	}
	allocs := testing.AllocsPerRun(10, func() {
		d2, err := s.V2()
		if err != nil || d2 != d {
			t.Fatalf("V2 again = %p, %v, want the same document", d2, err)
		}
		if _, err := d2.Proto(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("V2 and Proto again: %v allocations per call, want none but the source's", allocs)
	}
}

func TestServedV2Path(t *testing.T) {
	served := map[string]bool{"/v1": true, "apps/v1": true, "apps": true}
	for _, tt := range []struct {
		p    string
		want bool
	}{
		{"/api/", true}, {"/apis/", true}, {"/version/", true},
		{"/api/v1/namespaces/{namespace}/pods", true},
		{"/apis/apps/", true}, {"/apis/apps/v1/deployments", true},
		{"/apis/batch/v1/jobs", false}, {"/apis/batch/", false},
		{"/logs/", false}, {"/.well-known/openid-configuration", false},
	} {
		if got := servedV2Path(tt.p, served); got != tt.want {
			t.Errorf("servedV2Path(%q) = %v, want %v", tt.p, got, tt.want)
		}
	}
}
