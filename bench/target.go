package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Target is one API server under test.
type Target struct {
	// Name labels the target in reports, e.g. "lazyapi".
	Name string `json:"name"`
	// URL is the server's base URL, e.g. https://127.0.0.1:6443.
	URL string `json:"url"`
	// Token is a bearer token; empty sends none.
	Token string `json:"-"`
	// Kubeconfig, when set, supplies URL, token and TLS settings.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// PID, when not 0, is the local process whose RSS is sampled from
	// /proc; otherwise process_resident_memory_bytes is scraped from
	// URL/metrics.
	PID int `json:"pid,omitempty"`
	// Note describes the target in reports (e.g. "kube-apiserver v1.37.2,
	// --watch-cache=false").
	Note string `json:"note,omitempty"`
}

// ParseTarget parses NAME=URL.
func ParseTarget(s string) (Target, error) {
	name, u, ok := strings.Cut(s, "=")
	if !ok || name == "" || u == "" {
		return Target{}, fmt.Errorf("cannot parse target %q: want NAME=URL", s)
	}
	if _, err := url.Parse(u); err != nil {
		return Target{}, fmt.Errorf("cannot parse target %q: %w", s, err)
	}
	return Target{Name: name, URL: strings.TrimSuffix(u, "/")}, nil
}

// RESTConfig returns a client-go config for t: from its kubeconfig, or its
// URL and token with TLS verification skipped (targets are on loopback).
func (t Target) RESTConfig() (*rest.Config, error) {
	if t.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", t.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("cannot load kubeconfig %q: %w", t.Kubeconfig, err)
		}
		return cfg, nil
	}
	cfg := &rest.Config{Host: t.URL, BearerToken: t.Token}
	cfg.TLSClientConfig.Insecure = strings.HasPrefix(t.URL, "https:")
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 0
	return cfg, nil
}

// resolve fills URL and Token from the kubeconfig when one is set.
func (t *Target) resolve() error {
	if t.Kubeconfig == "" {
		return nil
	}
	cfg, err := t.RESTConfig()
	if err != nil {
		return err
	}
	if t.URL == "" {
		t.URL = strings.TrimSuffix(cfg.Host, "/")
	}
	if t.Token == "" {
		t.Token = cfg.BearerToken
	}
	return nil
}

// httpClient returns a client for t with conns connections per host,
// compression off (so bytes are the server's encoded bytes) and TLS
// verification off for https targets (loopback, self-signed).
func (t Target) httpClient(conns int) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback benchmark targets
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      256 << 10,
	}
	if t.Kubeconfig != "" {
		cfg, err := t.RESTConfig()
		if err != nil {
			return nil, err
		}
		tc, err := rest.TLSConfigFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("cannot build TLS config: %w", err)
		}
		if tc != nil {
			tr.TLSClientConfig = tc
		}
	}
	return &http.Client{Transport: tr}, nil
}

// scenarioClient returns the HTTP client of a scenario: the harness's
// (httpClient) or client-go's default transport (s.ClientGo), dialing
// through ln.
func (t Target) scenarioClient(s Scenario, ln *link) (*http.Client, error) {
	if !s.ClientGo {
		hc, err := t.httpClient(s.Concurrency + 4)
		if err != nil {
			return nil, err
		}
		hc.Transport.(*http.Transport).DialContext = ln.dial
		return hc, nil
	}
	cfg, err := t.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.Dial = ln.dial
	// Authentication stays the harness's (newRequest sets the token): the
	// transport is client-go's (HTTP/2, compression, TLS settings).
	cfg.BearerToken = ""
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot build client-go's transport: %w", err)
	}
	return hc, nil
}

func (t Target) newRequest(ctx context.Context, path, accept string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL+path, nil)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+t.Token)
	}
	req.Header.Set("User-Agent", "lazybench")
	return req, nil
}

// MemSample is a target's resident memory at an offset from the start of a
// scenario.
type MemSample struct {
	T   time.Duration `json:"t_ns"`
	RSS int64         `json:"rss_bytes"`
}

// memSampler samples one target's RSS every interval until stopped.
type memSampler struct {
	t        Target
	client   *http.Client
	interval time.Duration
	start    time.Time

	mu      sync.Mutex
	samples []MemSample
	lastErr error
}

func newMemSampler(t Target, interval time.Duration) (*memSampler, error) {
	c, err := t.httpClient(1)
	if err != nil {
		return nil, err
	}
	c.Timeout = 2 * time.Second
	return &memSampler{t: t, client: c, interval: interval, start: time.Now()}, nil
}

// run samples until ctx ends; sample times count from newMemSampler.
func (m *memSampler) run(ctx context.Context) {
	tick := time.NewTicker(m.interval)
	defer tick.Stop()
	for {
		m.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (m *memSampler) sampleOnce(ctx context.Context) {
	var (
		rss int64
		err error
	)
	if m.t.PID != 0 {
		rss, err = ProcRSS(m.t.PID)
	} else {
		rss, err = m.scrape(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.lastErr = err
		return
	}
	m.samples = append(m.samples, MemSample{T: time.Since(m.start), RSS: rss})
}

func (m *memSampler) result() ([]MemSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return nil, m.lastErr
	}
	return append([]MemSample(nil), m.samples...), nil
}

func (m *memSampler) scrape(ctx context.Context) (int64, error) {
	req, err := m.t.newRequest(ctx, "/metrics", "text/plain")
	if err != nil {
		return 0, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("cannot scrape %s/metrics: %w", m.t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("cannot scrape %s/metrics: status %d", m.t.URL, resp.StatusCode)
	}
	return ParseRSSMetric(resp.Body)
}

// ParseRSSMetric finds process_resident_memory_bytes in a Prometheus text
// exposition.
func ParseRSSMetric(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "process_resident_memory_bytes") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return 0, fmt.Errorf("cannot parse %q: %w", line, err)
		}
		return int64(v), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no process_resident_memory_bytes in metrics")
}

// ProcRSS returns VmRSS of a local process from /proc/PID/status.
func ProcRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("cannot read RSS of pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cannot parse %q: %w", line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
