package codec

import (
	"os"
	"testing"
)

// BenchmarkUnwrapCRD: what the v1beta1 CRD check costs every JSON value
// (a custom resource: the marker is not in its head) and what converting a
// stored CRD to v1 costs (multi: 5 KB, three versions with schemas).
func BenchmarkUnwrapCRD(b *testing.B) {
	crd, err := os.ReadFile("testdata/crdv1/multi.stored.json")
	if err != nil {
		b.Fatal(err)
	}
	cr := []byte(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"creationTimestamp":"2026-03-04T05:06:07Z","generation":1,"labels":{"app":"w"},"name":"w1","namespace":"ns","uid":"6c1f0c4e-0000-4000-8000-000000000019"},"spec":{"color":"red","size":3}}`)
	// Baseline in the same run: a JSON value as Unwrap returned it before
	// the CRD check.
	b.Run("baseline-no-check", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(cr)))
		for b.Loop() {
			o := Object{Format: FormatJSON, Raw: cr}
			if len(o.Raw) == 0 || o.Raw[0] != '{' {
				b.Fatal("not JSON")
			}
		}
	})
	for _, c := range []struct {
		name   string
		stored []byte
	}{{"custom-resource", cr}, {"crd-v1beta1", crd}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(c.stored)))
			for b.Loop() {
				if _, err := Unwrap(c.stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
