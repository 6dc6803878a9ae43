//go:build !race

// The hostile suite asserts the peak RSS of the plain lazyapi binary and
// another client's latency: .ci/run runs it without the race detector,
// after the race run, so that its race-instrumented client and the other
// packages' race tests do not take the 2 cores from the server it measures
// (in one -race CI run, beside proxy's tests, the 400-connection case
// peaked at 557 MiB against its 512 MiB limit).

package e2e

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Where the other client's latency goes during an attack (issue 10 item
// 4): a breakdown from lazyapi's /metrics before and after the attack and
// the CPU of both processes. It tells CPU starvation (the Go scheduler's
// run-queue latency and the cores both processes used, on a machine whose
// load average is quoted beside) from queueing in admission (queue waits)
// and from the server's own handling (the request duration lazyapi
// measured for the probe's GETs and LISTs of ConfigMaps, the storm's
// watches being verb watch).

// metricSnap is one scrape of /metrics: value by "name{labels}".
type metricSnap struct {
	at    time.Time
	vals  map[string]float64
	selfT time.Duration // the test process's CPU (etcd and the clients)
}

func snapMetrics(url string) metricSnap {
	m := metricSnap{at: time.Now(), vals: map[string]float64{}, selfT: selfCPU()}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m.vals[line[:i]] = v
		}
	}
	return m
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// histQuantile returns the upper bound of the bucket holding quantile q
// of the observations of histogram name (series whose labels contain every
// filter, summed) between snapshots a and b, and their count.
func histQuantile(a, b metricSnap, name string, q float64, filters ...string) (float64, float64) {
	byLE := map[float64]float64{}
	for k, v := range b.vals {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		ok := true
		for _, f := range filters {
			ok = ok && strings.Contains(k, f)
		}
		if !ok {
			continue
		}
		i := strings.Index(k, `le="`)
		if i < 0 {
			continue
		}
		s := k[i+4:]
		s = s[:strings.IndexByte(s, '"')]
		le := math.Inf(1)
		if s != "+Inf" {
			le, _ = strconv.ParseFloat(s, 64)
		}
		byLE[le] += v - a.vals[k]
	}
	var les []float64
	for le := range byLE {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 {
		return 0, 0
	}
	total := byLE[les[len(les)-1]]
	for _, le := range les {
		if byLE[le] >= q*total {
			return le, total
		}
	}
	return math.Inf(1), total
}

// breakdown describes the interval between a and b in one line.
func breakdown(a, b metricSnap, pid int) string {
	wall := b.at.Sub(a.at).Seconds()
	srv, n := histQuantile(a, b, "lazyapi_apiserver_request_duration_seconds", 0.99, `resource="configmaps"`, `verb="GET"`)
	srvL, nL := histQuantile(a, b, "lazyapi_apiserver_request_duration_seconds", 0.99, `resource="configmaps"`, `verb="LIST"`)
	wait, nw := histQuantile(a, b, "lazyapi_ratelimit_queue_wait_seconds", 0.99)
	sched, _ := histQuantile(a, b, "go_sched_latencies_seconds", 0.99)
	etcd, ne := histQuantile(a, b, "lazyapi_etcd_request_duration_seconds", 0.99)
	sched50, _ := histQuantile(a, b, "go_sched_latencies_seconds", 0.5)
	cpu := (b.vals["process_cpu_seconds_total"] - a.vals["process_cpu_seconds_total"]) / wall
	self := (b.selfT - a.selfT).Seconds() / wall
	load, _ := os.ReadFile("/proc/loadavg")
	_ = pid
	return fmt.Sprintf("server-side p99 of GETs <= %gs (%v), of LISTs <= %gs (%v); queued admissions %v (p99 wait <= %gs); etcd calls %v (p99 <= %gs); Go scheduler latency p50 <= %gs, p99 <= %gs; lazyapi %.2f cores, test process (etcd, clients) %.2f cores; loadavg %s",
		srv, n, srvL, nL, nw, wait, ne, etcd, sched50, sched, cpu, self, strings.Fields(string(load))[0])
}
