package codec

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
)

// Benchmarks: the same stored objects through
//   Apimachinery: protobuf decode + set RV + JSON encode (kube-apiserver's path)
//   AppendJSON:   Unwrap + Schema.AppendJSON
//   AppendProtobuf: Unwrap + AppendProtobufEnvelope (protobuf client)
// SetBytes is the stored size, so MB/s compare directly. cpu-ns/op is the
// process CPU time (user+sys, all threads, so GC included) per op: on a
// shared, overloaded machine it is steadier than wall time.

// cpuTimer reports cpu-ns/op for the benchmark loop it brackets.
type cpuTimer struct{ start time.Duration }

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuTimer { return cpuTimer{processCPU()} }

func (c cpuTimer) report(b *testing.B) {
	b.ReportMetric(float64(processCPU()-c.start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkCodec(b *testing.B) {
	s := DefaultSchema()
	for _, f := range fixtures(b) {
		b.Run(f.name+"/Apimachinery", func(b *testing.B) {
			var buf bytes.Buffer
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			defer startCPU().report(b)
			for b.Loop() {
				obj, _, err := oracleProto.Decode(f.stored, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				meta.NewAccessor().SetResourceVersion(obj, "12345")
				buf.Reset()
				if err := oracleJSON.Encode(obj, &buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/AppendJSON", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			defer startCPU().report(b)
			for b.Loop() {
				o, err := Unwrap(f.stored)
				if err != nil {
					b.Fatal(err)
				}
				if buf, err = s.AppendJSON(buf[:0], o, 12345, JSONOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(f.name+"/AppendProtobuf", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			defer startCPU().report(b)
			for b.Loop() {
				o, err := Unwrap(f.stored)
				if err != nil {
					b.Fatal(err)
				}
				buf = AppendProtobufEnvelope(buf[:0], o, 12345)
			}
		})
		b.Run(f.name+"/PeekMeta", func(b *testing.B) {
			var m Meta
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			defer startCPU().report(b)
			for b.Loop() {
				o, err := Unwrap(f.stored)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.PeekMeta(o, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkJSONPassthrough(b *testing.B) {
	for _, f := range fixtures(b) {
		o, _ := Unwrap(f.stored)
		js, err := DefaultSchema().AppendJSON(nil, o, 0, JSONOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.name, func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			b.SetBytes(int64(len(js)))
			defer startCPU().report(b)
			for b.Loop() {
				if buf, err = AppendJSONPassthrough(buf[:0], js, 12345); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCodecParallel measures throughput with every core busy
// (b.RunParallel), the situation of a server under load: there the
// baseline's garbage collection competes with the work instead of running
// on an idle core, so this is the throughput ratio of (a) and (b).
func BenchmarkCodecParallel(b *testing.B) {
	s := DefaultSchema()
	for _, f := range fixtures(b) {
		b.Run(f.name+"/Apimachinery", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			b.RunParallel(func(pb *testing.PB) {
				var buf bytes.Buffer
				for pb.Next() {
					obj, _, err := oracleProto.Decode(f.stored, nil, nil)
					if err != nil {
						b.Error(err)
						return
					}
					meta.NewAccessor().SetResourceVersion(obj, "12345")
					buf.Reset()
					if err := oracleJSON.Encode(obj, &buf); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run(f.name+"/AppendJSON", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(f.stored)))
			b.RunParallel(func(pb *testing.PB) {
				var buf []byte
				for pb.Next() {
					o, err := Unwrap(f.stored)
					if err != nil {
						b.Error(err)
						return
					}
					if buf, err = s.AppendJSON(buf[:0], o, 12345, JSONOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
