package proxy_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the process's CPU time (user+sys, all threads: the server,
// its embedded etcd, the clients and GC). On the shared, overloaded
// machine it is steadier than wall time, which the scheduler stretches;
// benchmarks report it per op as cpu-ns/op (as codec's do).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time since start per op as cpu-ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
}
