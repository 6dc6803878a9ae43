package bench

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// selfSampler samples the harness process's own RSS and live Go heap.
type selfSampler struct {
	mu                       sync.Mutex
	idle                     bool // still before the run
	idleRSS, peakRSS, peakLv int64
}

func (s *selfSampler) run(ctx context.Context, every time.Duration) {
	ms := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		rss, err := ProcRSS(os.Getpid())
		metrics.Read(ms)
		s.mu.Lock()
		if err == nil {
			if s.idle {
				s.idleRSS = rss
			} else {
				s.peakRSS = max(s.peakRSS, rss)
			}
		}
		if !s.idle && ms[0].Value.Kind() == metrics.KindUint64 {
			s.peakLv = max(s.peakLv, int64(ms[0].Value.Uint64()))
		}
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *selfSampler) idleEnd() {
	s.mu.Lock()
	s.idle = false
	s.mu.Unlock()
}

func (s *selfSampler) result() (idle, peak, live int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleRSS, max(s.peakRSS, s.idleRSS), s.peakLv
}

// scrapeMetric returns a metric's value from t's /metrics, -1 when absent.
func scrapeMetric(ctx context.Context, t Target, name string) int64 {
	m, err := scrapeMetrics(ctx, t, name)
	if v, ok := m[name]; ok && err == nil {
		return int64(v)
	}
	return -1
}

// scrapeMetrics returns the values of the named unlabelled metrics found
// in t's /metrics.
func scrapeMetrics(ctx context.Context, t Target, names ...string) (map[string]float64, error) {
	hc, err := t.httpClient(1)
	if err != nil {
		return nil, err
	}
	defer hc.CloseIdleConnections()
	req, err := t.newRequest(ctx, "/metrics", "text/plain")
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	m := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			m[name] = f
		}
	}
	return m, sc.Err()
}

// profileAtPeak polls t's RSS every second until ctx ends and, each time it
// passes its previous peak, saves the server's heap profile
// (/debug/pprof/heap: lazyapi with --profiling) and its /metrics to
// dir/name.heap and dir/name.metrics, so that the files describe the
// process at (about) its peak RSS; and a CPU profile of 30 s from 20 s in
// (dir/name.cpu).
func profileAtPeak(ctx context.Context, t Target, dir, name string) {
	hc, err := t.httpClient(1)
	if err != nil {
		return
	}
	defer hc.CloseIdleConnections()
	fetch := func(path, file string) {
		req, err := t.newRequest(ctx, path, "")
		if err != nil {
			return
		}
		resp, err := hc.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return
		}
		b, err := io.ReadAll(resp.Body)
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, file), b, 0o644)
		}
	}
	// One CPU profile of 30 s, 20 s into the run (the storm's steady
	// state: streams admitted and reading).
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Second):
		}
		fetch("/debug/pprof/profile?seconds=30", name+".cpu")
	}()
	var peak int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rss, err := ProcRSS(t.PID)
		if err != nil || rss <= peak+peak/20 {
			continue
		}
		peak = rss
		fetch("/debug/pprof/heap", name+".heap")
		fetch("/metrics", name+".metrics")
	}
}
