package ratelimit

import (
	"github.com/VictoriaMetrics/metrics"
)

// limiterMetrics are a Limiter's metrics; counters are atomic, gauges read
// the Limiter's state under its mutex when scraped.
type limiterMetrics struct {
	admittedNow    *metrics.Counter
	admittedQueued *metrics.Counter
	rejectedFull   *metrics.Counter
	rejectedTime   *metrics.Counter
	rejectedLarge  *metrics.Counter
	rejectedRate   *metrics.Counter
	cancelled      *metrics.Counter
	wait           *metrics.PrometheusHistogram
	usedBytes      *metrics.Counter
	estimatedBytes *metrics.Counter
	yields         *metrics.Counter
	yieldTimeouts  *metrics.Counter
	yieldWait      *metrics.PrometheusHistogram
}

func newLimiterMetrics(l *Limiter, s *metrics.Set) *limiterMetrics {
	if s == nil {
		s = metrics.NewSet()
	}
	stat := func(f func(st Stats) float64) func() float64 {
		return func() float64 { return f(l.Stats()) }
	}
	s.NewGauge(`lazyapi_ratelimit_inflight{kind="short"}`, stat(func(st Stats) float64 { return float64(st.InflightRequests) }))
	s.NewGauge(`lazyapi_ratelimit_inflight{kind="watch"}`, stat(func(st Stats) float64 { return float64(st.InflightWatches) }))
	s.NewGauge(`lazyapi_ratelimit_inflight{kind="bulk"}`, stat(func(st Stats) float64 { return float64(st.InflightBulk) }))
	// The seats themselves, for graphs and alerts of in-flight against them.
	s.NewGauge(`lazyapi_ratelimit_seats{kind="short"}`, func() float64 { return float64(l.cfg.MaxRequestsInflight) })
	s.NewGauge(`lazyapi_ratelimit_seats{kind="watch"}`, func() float64 { return float64(l.cfg.MaxWatchesInflight) })
	s.NewGauge(`lazyapi_ratelimit_seats{kind="bulk"}`, func() float64 { return float64(l.cfg.MaxBulkInflight) })
	s.NewGauge(`lazyapi_ratelimit_bulk_reserved_bytes`, stat(func(st Stats) float64 { return float64(st.BulkReservedBytes) }))
	s.NewGauge(`lazyapi_ratelimit_draining`, stat(func(st Stats) float64 { return float64(st.Draining) }))
	s.NewGauge(`lazyapi_ratelimit_queued`, stat(func(st Stats) float64 { return float64(st.Queued) }))
	s.NewGauge(`lazyapi_ratelimit_reserved_bytes`, stat(func(st Stats) float64 { return float64(st.ReservedBytes) }))
	s.NewGauge(`lazyapi_ratelimit_budget_bytes`, stat(func(st Stats) float64 { return float64(st.BudgetBytes) }))
	s.NewGauge(`lazyapi_ratelimit_watch_reserved_bytes`, stat(func(st Stats) float64 { return float64(st.WatchReservedBytes) }))
	s.NewGauge(`lazyapi_ratelimit_watch_budget_bytes`, stat(func(st Stats) float64 { return float64(st.WatchBudgetBytes) }))
	s.NewGauge(`lazyapi_ratelimit_watch_clients`, stat(func(st Stats) float64 { return float64(st.WatchClients) }))
	return &limiterMetrics{
		admittedNow:    s.NewCounter(`lazyapi_ratelimit_admitted_total{how="immediate"}`),
		admittedQueued: s.NewCounter(`lazyapi_ratelimit_admitted_total{how="queued"}`),
		rejectedFull:   s.NewCounter(`lazyapi_ratelimit_rejected_total{reason="queue_full"}`),
		rejectedTime:   s.NewCounter(`lazyapi_ratelimit_rejected_total{reason="queue_timeout"}`),
		rejectedLarge:  s.NewCounter(`lazyapi_ratelimit_rejected_total{reason="too_large"}`),
		rejectedRate:   s.NewCounter(`lazyapi_ratelimit_rejected_total{reason="rate_limited"}`),
		cancelled:      s.NewCounter(`lazyapi_ratelimit_cancelled_total`),
		wait:           s.NewPrometheusHistogram(`lazyapi_ratelimit_queue_wait_seconds`),
		usedBytes:      s.NewCounter(`lazyapi_ratelimit_used_bytes_total`),
		estimatedBytes: s.NewCounter(`lazyapi_ratelimit_estimated_bytes_total`),
		yields:         s.NewCounter(`lazyapi_ratelimit_bulk_yields_total`),
		yieldTimeouts:  s.NewCounter(`lazyapi_ratelimit_bulk_yield_timeouts_total`),
		yieldWait:      s.NewPrometheusHistogram(`lazyapi_ratelimit_bulk_yield_seconds`),
	}
}

func (m *limiterMetrics) rejected(r Reason) *metrics.Counter {
	switch r {
	case ReasonQueueFull:
		return m.rejectedFull
	case ReasonQueueTimeout:
		return m.rejectedTime
	case ReasonTooLarge:
		return m.rejectedLarge
	default:
		return m.rejectedRate
	}
}
