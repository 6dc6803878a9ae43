package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/ratelimit"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"512Mi", 512 << 20, false},
		{"1Gi", 1 << 30, false},
		{"1G", 1_000_000_000, false},
		{"500M", 500_000_000, false},
		{"64Ki", 64 << 10, false},
		{"1k", 1000, false},
		{"1e9", 1_000_000_000, false},
		{"1.5Ki", 1536, false},
		{"0.5", 0, true},              // not a whole byte
		{"8Ei", math.MaxInt64, false}, // ParseQuantity saturates
		{"9223372036854775808", 0, true},
		{"1e19", 0, true},
		{"7Ei", 7 << 60, false},
		{"", 0, true},
		{"-1Mi", 0, true},
		{"12 MB", 0, true},
		{"1MB", 0, true},
		{"Mi", 0, true},
	}
	for _, tt := range tests {
		got, err := parseBytes(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, err=%v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestLimitFlags: the limiter's flags fill ratelimit.Config through
// limiterConfig.
func TestLimitFlags(t *testing.T) {
	o, err := parseFlags([]string{"--memory-limit=512Mi", "--max-requests-inflight=10", "--max-watches-inflight=7",
		"--max-single-request-bytes=1Gi", "--max-queued-requests=5", "--max-queue-wait=3s",
		"--per-client-qps=2.5", "--per-client-burst=4", "--max-bulk-lists-inflight=3", "--bulk-list-threshold=8Mi",
		"--short-reserved-inflight-bytes=32Mi", "--bulk-list-yield=20ms", "--per-client-share=0.25"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := o.limiterConfig(nil, nil)
	want := ratelimit.Config{MaxRequestsInflight: 10, MaxWatchesInflight: 7, MaxInflightBytes: 128 << 20,
		MaxSingleRequestBytes: 1 << 30, MaxQueued: 5, MaxQueueWait: 3 * time.Second,
		PerClientQPS: 2.5, PerClientBurst: 4, MaxBulkInflight: 3, BulkListBytes: 8 << 20,
		ShortReservedBytes: 32 << 20, BulkYield: 20 * time.Millisecond, ClientShare: 0.25, MaxClasses: 1024}
	if cfg != want {
		t.Fatalf("limiterConfig = %+v, want %+v", cfg, want)
	}
	if _, err := ratelimit.New(cfg); err != nil {
		t.Fatalf("New(limiterConfig) = %v", err)
	}
	if _, err := parseFlags([]string{"--max-inflight-bytes=12 parsecs"}); err == nil || !strings.HasPrefix(err.Error(), "--max-inflight-bytes: ") {
		t.Fatalf("parseFlags(bad quantity) = %v, want an error naming the flag", err)
	}
}

// TestInvalidValuesNameTheFlag: every invalid value is a start-up error
// (a usage error, one line) that begins with the flag at fault, as
// "--flag: problem"; ratelimit.New is never what refuses a flag.
func TestInvalidValuesNameTheFlag(t *testing.T) {
	for _, tt := range []struct{ flag, value string }{
		{"etcd-servers", "127.0.0.1:2379"},
		{"etcd-slow-member-margin", "-1ms"},
		{"etcd-prefix", ""},
		{"etcd-preferred-server", "http://x:2379"},
		{"list-page-size", "0"},
		{"list-page-bytes", "0"},
		{"data-dir", " "},
		{"bind-address", "not-an-ip"},
		{"port", "70000"},
		{"port", "abc"},
		{"secure-port", "-1"},
		{"request-timeout", "0s"},
		{"write-timeout", "-1s"},
		{"enable-response-compression", "maybe"},
		{"tls-min-version", "VersionTLS14"},
		{"tls-cipher-suites", "NOPE"},
		{"anonymous-auth", "maybe"},
		{"authentication-token-webhook-version", "v2"},
		{"authentication-token-webhook-cache-ttl", "-1s"},
		{"authorization-mode", "Magic"},
		{"authorization-webhook-version", "v1alpha1"},
		{"authorization-webhook-cache-authorized-ttl", "-1s"},
		{"authorization-webhook-cache-unauthorized-ttl", "-1s"},
		{"memory-limit", "-1Gi"},
		{"memory-limit", "2Mi"}, // leaves no in-flight budget: named as --max-inflight-bytes below
		{"max-requests-inflight", "0"},
		{"max-watches-inflight", "-1"},
		{"max-inflight-bytes", "lots"},
		{"max-watch-bytes", "-1"},
		{"max-single-request-bytes", "1Ki"},
		{"max-queued-requests", "-1"},
		{"max-queue-wait", "0s"},
		{"max-bulk-lists-inflight", "-1"},
		{"bulk-list-threshold", "0"},
		{"short-reserved-inflight-bytes", "8Ei"},
		{"bulk-list-yield", "-1ms"},
		{"per-client-share", "1.5"},
		{"per-client-share", "0"},
		{"per-client-qps", "-1"},
		{"watch-cache", "maybe"},
		{"watch-cache-sizes", "configmaps"},
		{"watch-cache-preload", "configmaps#1"},
		{"watch-cache-memory", "-5Mi"},
		{"audit-log-maxage", "-1"},
		{"audit-log-maxbackup", "-1"},
		{"audit-log-maxsize", "-1"},
		{"audit-log-format", "legacy"},
		{"audit-log-version", "audit.k8s.io/v1beta1"},
		{"audit-policy-file", "/nonexistent"},
		{"log-level", "loud"},
		{"logging-format", "xml"},
		{"profiling", "maybe"},
		{"encryption-provider-config-automatic-reload", "true"},
		{"watch-cache-decrypted", "true"},
	} {
		args := []string{"--" + tt.flag + "=" + tt.value}
		want := "--" + tt.flag + ": "
		switch tt.flag {
		case "memory-limit":
			if tt.value == "2Mi" {
				want = "--max-inflight-bytes: "
			}
		case "per-client-qps":
			args = append(args, "--per-client-burst=0")
		}
		_, err := parseFlags(args)
		if err == nil {
			t.Errorf("parseFlags(%q) = nil, want an error beginning %q", args, want)
			continue
		}
		if !errors.As(err, new(usageError)) || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") ||
			strings.Contains(err.Error(), "ratelimit") {
			t.Errorf("parseFlags(%q) = %q (%T), want a one-line usage error beginning %q", args, err, err, want)
		}
	}
	// Problems of several flags are reported together.
	_, err := parseFlags([]string{"--port=-1", "--log-level=loud", "--max-queued-requests=-1"})
	for _, f := range []string{"--port: ", "--log-level: ", "--max-queued-requests: "} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("parseFlags(three bad flags) = %v, want %q among them", err, f)
		}
	}
}

func TestParseWatchCacheSizes(t *testing.T) {
	tests := []struct {
		in      []string
		want    map[string]int
		wantErr bool
	}{
		{in: nil, want: map[string]int{}},
		{in: []string{"configmaps#100", "deployments.apps#0"}, want: map[string]int{"configmaps": 100, "deployments.apps": 0}},
		{in: []string{" Secrets#5 "}, want: map[string]int{"secrets": 5}},
		{in: []string{"configmaps"}, wantErr: true},
		{in: []string{"#5"}, wantErr: true},
		{in: []string{"pods#x"}, wantErr: true},
		{in: []string{"pods#-1"}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseWatchCacheSizes(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseWatchCacheSizes(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), "--watch-cache-sizes") {
				t.Errorf("parseWatchCacheSizes(%q) error %q does not name the flag", tt.in, err)
			}
			continue
		}
		if len(got) != len(tt.want) {
			t.Errorf("parseWatchCacheSizes(%q) = %v, want %v", tt.in, got, tt.want)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("parseWatchCacheSizes(%q)[%q] = %d, want %d", tt.in, k, got[k], v)
			}
		}
	}
}
