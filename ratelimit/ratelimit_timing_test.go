package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func benchLimiter(b *testing.B, mutate func(*Config)) *Limiter {
	cfg := defaultConfig()
	cfg.MaxInflightBytes = 1 << 40
	cfg.MaxQueued = 1 << 20
	cfg.Metrics = metrics.NewSet()
	mutate(&cfg)
	l, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAdmitRelease measures one Admit + Release pair.
func BenchmarkAdmitRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		l := benchLimiter(b, func(*Config) {})
		req := Request{Client: "10.0.0.1", Class: "list/configmaps", Bytes: 1 << 20}
		b.ReportAllocs()
		for b.Loop() {
			tk, err := l.Admit(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			tk.Release(1 << 19)
		}
	})
	b.Run("parallel-fits", func(b *testing.B) {
		l := benchLimiter(b, func(c *Config) { c.MaxRequestsInflight = 1 << 20 })
		b.ReportAllocs()
		b.SetParallelism(8)
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			req := Request{Client: strconv.FormatInt(id.Add(1)%64, 10), Class: "list/configmaps", Bytes: 1 << 20}
			for pb.Next() {
				tk, err := l.Admit(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				tk.Release(1 << 19)
			}
		})
	})
	b.Run("parallel-queued", func(b *testing.B) {
		// 16 goroutines over 2 slots: most requests wait in the queue.
		l := benchLimiter(b, func(c *Config) { c.MaxRequestsInflight = 2 })
		b.ReportAllocs()
		b.SetParallelism(8)
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			req := Request{Client: strconv.FormatInt(id.Add(1)%64, 10), Class: "list/configmaps", Bytes: 1 << 20}
			for pb.Next() {
				tk, err := l.Admit(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				tk.Release(1 << 19)
			}
		})
	})
	b.Run("uncontended-qps", func(b *testing.B) {
		l := benchLimiter(b, func(c *Config) { c.PerClientQPS = 1e12; c.PerClientBurst = 1 << 30 })
		req := Request{Client: "10.0.0.1", Class: "list/configmaps", Bytes: 1 << 20}
		b.ReportAllocs()
		for b.Loop() {
			tk, err := l.Admit(ctx, req)
			if err != nil {
				b.Error(err)
				return
			}
			tk.Release(1 << 19)
		}
	})
}

// BenchmarkChanSemaphore is the baseline: kube-apiserver's max-in-flight
// filter, a buffered channel used as a counting semaphore (no bytes, no
// queue, no fairness).
func BenchmarkChanSemaphore(b *testing.B) {
	b.Run("uncontended", func(b *testing.B) {
		sem := make(chan struct{}, 400)
		b.ReportAllocs()
		for b.Loop() {
			sem <- struct{}{}
			<-sem
		}
	})
	b.Run("parallel-fits", func(b *testing.B) {
		sem := make(chan struct{}, 1<<20)
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sem <- struct{}{}
				<-sem
			}
		})
	})
	b.Run("parallel-queued", func(b *testing.B) {
		sem := make(chan struct{}, 2)
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				sem <- struct{}{}
				<-sem
			}
		})
	})
}
