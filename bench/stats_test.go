package bench

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func near(got, want, relTol float64) bool {
	return math.Abs(got-want) <= relTol*math.Abs(want)
}

func TestHistogramPercentiles(t *testing.T) {
	// 1..10000 ms, each once: the q-quantile is q*10000 ms.
	h := NewHistogram()
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Summary()
	tests := []struct {
		name      string
		got, want float64
	}{
		{"count", float64(s.Count), 10000},
		{"mean", s.Mean, 5000.5},
		{"p50", s.P50, 5000},
		{"p90", s.P90, 9000},
		{"p99", s.P99, 9900},
		{"p99.9", s.P999, 9990},
		{"max", s.Max, 10000},
	}
	for _, tt := range tests {
		if !near(tt.got, tt.want, 0.002) { // 3 significant digits
			t.Errorf("uniform 1..10000ms: %s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}

	// Exponential with mean 20ms: the q-quantile is -20*ln(1-q).
	e := NewHistogram()
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		e.Record(time.Duration(r.ExpFloat64() * 20 * float64(time.Millisecond)))
	}
	es := e.Summary()
	for _, q := range []struct {
		name string
		got  float64
		q    float64
	}{{"p50", es.P50, 0.5}, {"p90", es.P90, 0.9}, {"p99", es.P99, 0.99}} {
		want := -20 * math.Log(1-q.q)
		if !near(q.got, want, 0.03) {
			t.Errorf("exponential(20ms): %s = %.3f, want %.3f", q.name, q.got, want)
		}
	}

	// Merge adds counts; the CDF is monotonic and ends at 1.
	h.Merge(e)
	if got := h.Summary().Count; got != 210000 {
		t.Errorf("merged count = %d, want 210000", got)
	}
	cdf := h.CDF(100)
	if len(cdf) == 0 || len(cdf) > 102 {
		t.Fatalf("CDF has %d points, want 1..102", len(cdf))
	}
	for i := 1; i < len(cdf); i++ {
		if cdf[i].Millis < cdf[i-1].Millis || cdf[i].Fraction < cdf[i-1].Fraction {
			t.Fatalf("CDF not monotonic at %d: %+v then %+v", i, cdf[i-1], cdf[i])
		}
	}
	if last := cdf[len(cdf)-1]; last.Fraction != 1 || !near(last.Millis, 10000, 0.002) {
		t.Errorf("CDF ends at %+v, want fraction 1 at 10000ms", last)
	}
	if (NewHistogram().Summary() != Percentiles{}) || NewHistogram().CDF(10) != nil {
		t.Error("empty histogram has a non-zero summary or a CDF")
	}
}
