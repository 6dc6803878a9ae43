package bench

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram records durations with 3 significant digits from 1µs to 1h. It is
// safe for concurrent use.
type Histogram struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{h: hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)}
}

// Record adds one duration; values outside 1µs..1h are clamped.
func (h *Histogram) Record(d time.Duration) {
	us := min(max(d.Microseconds(), 1), int64(time.Hour/time.Microsecond))
	h.mu.Lock()
	_ = h.h.RecordValue(us)
	h.mu.Unlock()
}

// Merge adds every value of o into h.
func (h *Histogram) Merge(o *Histogram) {
	o.mu.Lock()
	snap := o.h.Export()
	o.mu.Unlock()
	h.mu.Lock()
	h.h.Merge(hdrhistogram.Import(snap))
	h.mu.Unlock()
}

// Percentiles are a latency summary in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// CDFPoint is one point of a cumulative distribution: Fraction of values are
// at most Millis.
type CDFPoint struct {
	Millis   float64 `json:"ms"`
	Fraction float64 `json:"fraction"`
}

func ms(us int64) float64 { return float64(us) / 1000 }

// Summary returns the percentiles of the recorded values.
func (h *Histogram) Summary() Percentiles {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: h.h.TotalCount(),
		Mean:  h.h.Mean() / 1000,
		P50:   ms(h.h.ValueAtQuantile(50)),
		P90:   ms(h.h.ValueAtQuantile(90)),
		P99:   ms(h.h.ValueAtQuantile(99)),
		P999:  ms(h.h.ValueAtQuantile(99.9)),
		Max:   ms(h.h.Max()),
	}
}

// CDF returns the cumulative distribution at the histogram's distinct
// recorded values, thinned to at most about maxPoints points.
func (h *Histogram) CDF(maxPoints int) []CDFPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	total := h.h.TotalCount()
	if total == 0 {
		return nil
	}
	var pts []CDFPoint
	var cum int64
	for _, b := range h.h.Distribution() {
		if b.Count == 0 {
			continue
		}
		cum += b.Count
		pts = append(pts, CDFPoint{Millis: ms(b.To), Fraction: float64(cum) / float64(total)})
	}
	if maxPoints > 0 && len(pts) > maxPoints {
		step := float64(len(pts)) / float64(maxPoints)
		thin := make([]CDFPoint, 0, maxPoints+1)
		for f := 0.0; int(f) < len(pts); f += step {
			thin = append(thin, pts[int(f)])
		}
		if thin[len(thin)-1] != pts[len(pts)-1] {
			thin = append(thin, pts[len(pts)-1])
		}
		pts = thin
	}
	return pts
}
