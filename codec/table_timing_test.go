package codec

import (
	"testing"
	"time"
)

// BenchmarkTableRow: one Table row (kubectl's default: the row with the
// object's metadata) per op, for the fixtures that have a printer.
func BenchmarkTableRow(b *testing.B) {
	s := DefaultSchema()
	now := time.Now()
	for _, f := range fixtures(b) {
		resource := map[string]string{"ConfigMap": "configmaps", "Secret": "secrets", "Pod": "pods"}[f.name]
		if resource == "" {
			continue
		}
		b.Run(f.name, func(b *testing.B) {
			obj, err := Unwrap(f.stored)
			if err != nil {
				b.Fatal(err)
			}
			var buf []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			defer startCPU().report(b)
			for b.Loop() {
				buf, err = s.AppendTableRow(buf[:0], "", resource, obj, 12345, IncludeMetadata, now)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
