package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

func TestParseFlagsDefaults(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatalf("parseFlags(nil) = %v", err)
	}
	if len(c.Etcd.servers) != 0 || c.Etcd.prefix != "/registry" || c.Serving.bindAddress.String() != "127.0.0.1" ||
		c.Serving.port != 8080 || c.Etcd.listPageSize != 500 || int(c.Etcd.listPageBytes) != 1<<20 || c.Serving.requestTimeout != time.Minute ||
		c.Logging.level != zapcore.InfoLevel || c.Etcd.dataDir == "" || c.Misc.demo || c.Etcd.tls != nil || int64(c.Admission.memoryLimit) != 0 {
		t.Errorf("parseFlags(nil) = %+v, want the documented defaults", c)
	}
	if c.WatchCache.preloadFilter() != nil || c.Serving.writeTimeout != 10*time.Second {
		t.Errorf("--watch-cache-preload %q, --write-timeout %s, want * and 10s", c.WatchCache.preload, c.Serving.writeTimeout)
	}
	if c.limiterConfig(nil, nil).MaxQueueWait != 15*time.Second {
		t.Errorf("--max-queue-wait = %s, want 15s (a quarter of --request-timeout=1m)", c.limiterConfig(nil, nil).MaxQueueWait)
	}
}

// TestQueueWaitFromRequestTimeout: unset, --max-queue-wait is at most a
// quarter of --request-timeout (kube-apiserver's APF queue wait); set, it
// is what was given.
func TestQueueWaitFromRequestTimeout(t *testing.T) {
	tests := []struct {
		args []string
		want time.Duration
	}{
		{[]string{"--request-timeout=20s"}, 5 * time.Second},
		{[]string{"--request-timeout=10m"}, 15 * time.Second},
		{[]string{"--request-timeout=20s", "--max-queue-wait=30s"}, 30 * time.Second},
	}
	for _, tt := range tests {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Fatalf("parseFlags(%q) = %v", tt.args, err)
		}
		if c.limiterConfig(nil, nil).MaxQueueWait != tt.want {
			t.Errorf("parseFlags(%q): --max-queue-wait = %s, want %s", tt.args, c.limiterConfig(nil, nil).MaxQueueWait, tt.want)
		}
	}
}

func TestParseFlagsValues(t *testing.T) {
	c, err := parseFlags([]string{
		"--etcd-servers=http://a:2379, http://b:2379", "--etcd-prefix=kube/registry/",
		"--bind-address=0.0.0.0", "--port=8081", "--list-page-size=7", "--list-page-bytes=512Ki",
		"--request-timeout=5s", "--log-level=debug", "--memory-limit=1.5Gi",
		"--watch-cache-sizes=configmaps#100,deployments.apps#0", "--watch-cache-preload=ConfigMaps,deployments.apps",
		"--write-timeout=3s", "--etcd-preferred-server=http://b:2379", "--etcd-slow-member-margin=250ms",
		"--watch-cache-progress-interval=1ms",
	})
	if err != nil {
		t.Fatalf("parseFlags = %v", err)
	}
	if got := strings.Join(c.Etcd.servers, "|"); got != "http://a:2379|http://b:2379" {
		t.Errorf("etcdServers = %q", got)
	}
	if c.Etcd.preferred != "http://b:2379" {
		t.Errorf("etcdPreferred = %q", c.Etcd.preferred)
	}
	off := &Options{Etcd: etcdOptions{slowMargin: 0}}
	if got, offGot := c.failoverConfig(nil, nil, nil, nil).SlowMargin, off.failoverConfig(nil, nil, nil, nil).SlowMargin; c.Etcd.slowMargin != 250*time.Millisecond ||
		got != 250*time.Millisecond || offGot >= 0 {
		t.Errorf("--etcd-slow-member-margin=250ms: etcdSlow = %s, FailoverConfig.SlowMargin %s (0: %s, want negative: off)",
			c.Etcd.slowMargin, got, offGot)
	}
	if c.Etcd.prefix != "/kube/registry" {
		t.Errorf("etcdPrefix = %q, want /kube/registry", c.Etcd.prefix)
	}
	if c.Serving.bindAddress.String() != "0.0.0.0" || c.Serving.port != 8081 || c.Etcd.listPageSize != 7 || int(c.Etcd.listPageBytes) != 512<<10 ||
		c.Serving.requestTimeout != 5*time.Second || c.Logging.level != zapcore.DebugLevel || int64(c.Admission.memoryLimit) != 3<<29 {
		t.Errorf("parseFlags = %+v", c)
	}
	if f := c.WatchCache.preloadFilter(); f == nil || !f("configmaps") || !f("deployments.apps") || f("secrets") || c.Serving.writeTimeout != 3*time.Second {
		t.Errorf("--watch-cache-preload %q, --write-timeout %s", c.WatchCache.preload, c.Serving.writeTimeout)
	}
	if c.WatchCache.sizes["configmaps"] != 100 || c.WatchCache.sizes["deployments.apps"] != 0 || len(c.WatchCache.sizes) != 2 || !c.WatchCache.enabled {
		t.Errorf("watch cache flags: sizes %v, enabled %v", c.WatchCache.sizes, c.WatchCache.enabled)
	}
	if got := c.cacheConfig(nil, &parts{}, nil).ProgressInterval; got != time.Millisecond {
		t.Errorf("--watch-cache-progress-interval=1ms: cache.Config.ProgressInterval %s", got)
	}
	// Budgets derived from --memory-limit: cache a quarter, in-flight half
	// minus the cache.
	if c.cacheBytes() != (3<<29)/4 || c.limiterConfig(nil, nil).MaxInflightBytes != (3<<29)/2-(3<<29)/4 {
		t.Errorf("cache %d, in-flight %d bytes from --memory-limit=1.5Gi", c.cacheBytes(), c.limiterConfig(nil, nil).MaxInflightBytes)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	dir := t.TempDir()
	cl := testpki.NewCA(t, "etcd-ca").Client(t, "lazyapi")
	certFile, keyFile := cl.CertFile, cl.KeyFile
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	etcd := "--etcd-servers=https://127.0.0.1:2379"
	checkFlagErrors(t, []flagErrorCase{
		{[]string{"--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"--port=abc"}, "--port"},
		{[]string{"--port=70000"}, "--port: 70000"},
		{[]string{"--port=-1"}, "--port: -1"},
		{[]string{"--list-page-size=0"}, "--list-page-size: 0"},
		{[]string{"--list-page-size=-5"}, "--list-page-size: -5"},
		{[]string{"--list-page-bytes=0"}, "--list-page-bytes: 0"},
		{[]string{"--list-page-bytes=lots"}, "--list-page-bytes"},
		{[]string{"--request-timeout=0s"}, "--request-timeout"},
		{[]string{"--request-timeout=soon"}, "--request-timeout"},
		{[]string{"--log-level=loud"}, "--log-level"},
		{[]string{"--memory-limit=-1Gi"}, "--memory-limit"},
		{[]string{"--memory-limit=lots"}, "--memory-limit"},
		{[]string{"--watch-cache-sizes=configmaps"}, "--watch-cache-sizes"},
		{[]string{"--watch-cache-sizes=configmaps#-1"}, "--watch-cache-sizes"},
		{[]string{"--watch-cache-preload=configmaps#1"}, "--watch-cache-preload"},
		{[]string{"--write-timeout=0s"}, "--write-timeout"},
		{[]string{"--watch-cache-memory=-5Mi"}, "--watch-cache-memory"},
		{[]string{"--watch-cache-progress-interval=0s"}, "--watch-cache-progress-interval"},
		{[]string{"--max-requests-inflight=abc"}, "--max-requests-inflight"},
		{[]string{"--bind-address=not-an-ip"}, "--bind-address"},
		{[]string{"--etcd-servers=127.0.0.1:2379"}, "--etcd-servers"},
		{[]string{"--etcd-prefix="}, "--etcd-prefix"},
		{[]string{etcd, "--etcd-preferred-server=https://127.0.0.2:2379"}, "--etcd-preferred-server"},
		{[]string{"--etcd-preferred-server=https://127.0.0.1:2379"}, "--etcd-preferred-server"},
		{[]string{"--etcd-slow-member-margin=-1ms"}, "--etcd-slow-member-margin"},
		{[]string{"--demo", etcd}, "--demo"},
		{[]string{"--etcd-cafile=" + certFile}, "--etcd-cafile: needs --etcd-servers"},
		{[]string{"--etcd-keyfile=" + keyFile}, "--etcd-keyfile: needs --etcd-servers"},
		{[]string{etcd, "--etcd-cafile=" + missing}, "--etcd-cafile"},
		{[]string{etcd, "--etcd-cafile=" + notPEM}, "--etcd-cafile"},
		{[]string{etcd, "--etcd-certfile=" + certFile}, "--etcd-keyfile: needed with --etcd-certfile"},
		{[]string{etcd, "--etcd-certfile=" + missing, "--etcd-keyfile=" + keyFile}, "--etcd-certfile"},
		{[]string{etcd, "--etcd-certfile=" + certFile, "--etcd-keyfile=" + missing}, "--etcd-keyfile"},
		{[]string{etcd, "--etcd-certfile=" + certFile, "--etcd-keyfile=" + notPEM}, "--etcd-certfile/--etcd-keyfile"},
		{[]string{"extra-arg"}, "unexpected argument"},
	})
}

// flagErrorCase is a command line parseFlags must refuse.
type flagErrorCase struct {
	args []string
	want string // substring of the error, naming the flag
}

// checkFlagErrors checks that parseFlags refuses each command line with a
// one-line usageError containing want and no token ("secret").
func checkFlagErrors(t *testing.T, tests []flagErrorCase) {
	t.Helper()
	for _, tt := range tests {
		_, err := parseFlags(tt.args)
		if err == nil {
			t.Errorf("parseFlags(%q) = nil, want an error naming %q", tt.args, tt.want)
			continue
		}
		if !errors.As(err, new(usageError)) {
			t.Errorf("parseFlags(%q) = %v, want a usageError", tt.args, err)
		}
		if msg := err.Error(); !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "secret") {
			t.Errorf("parseFlags(%q) = %q, want one line containing %q (and no token)", tt.args, msg, tt.want)
		}
	}
}

func TestParseFlagsTLS(t *testing.T) {
	ca := testpki.NewCA(t, "etcd-ca")
	cl := ca.Client(t, "lazyapi")
	c, err := parseFlags([]string{"--etcd-servers=https://127.0.0.1:2379",
		"--etcd-cafile=" + ca.File, "--etcd-certfile=" + cl.CertFile, "--etcd-keyfile=" + cl.KeyFile})
	if err != nil {
		t.Fatalf("parseFlags = %v", err)
	}
	// Reloadable: the CA is checked by VerifyConnection against the pool
	// in force, the client certificate handed out by GetClientCertificate.
	if c.Etcd.tls == nil || c.Etcd.tls.VerifyConnection == nil || !c.Etcd.tls.InsecureSkipVerify || c.Etcd.tls.GetClientCertificate == nil ||
		c.Etcd.cas == nil || c.Etcd.keyPair == nil {
		t.Fatalf("etcdTLS = %+v, want a CA pool and one client certificate", c.Etcd.tls)
	}
	if cert, _ := c.Etcd.tls.GetClientCertificate(nil); cert == nil || cert.Leaf == nil || !cert.Leaf.Equal(cl.Cert) {
		t.Errorf("etcd client certificate = %v, want %s", cert, cl.CertFile)
	}
}

func TestRunHelpAndVersion(t *testing.T) {
	for _, tt := range []struct{ arg, want string }{{"--help", "--etcd-servers"}, {"--version", "lazyapi "}} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), []string{tt.arg}, &stdout, &stderr); err != nil {
			t.Errorf("run(%s) = %v", tt.arg, err)
		}
		if !strings.Contains(stdout.String(), tt.want) {
			t.Errorf("run(%s) printed %q, want it to contain %q", tt.arg, stdout.String(), tt.want)
		}
	}
}

func TestByteSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8388608", 8 << 20, true},
		{"8Mi", 8 << 20, true},
		{"512Ki", 512 << 10, true},
		{"1G", 1e9, true},
		{"1.5", 0, false},
		{"8MB", 0, false},
	} {
		var b byteSize
		err := b.Set(tt.in)
		if (err == nil) != tt.ok || (tt.ok && int64(b) != tt.want) {
			t.Errorf("byteSize.Set(%q) = %d, %v; want %d, ok=%v", tt.in, b, err, tt.want, tt.ok)
		}
	}
}

// TestHelpSections: --help prints the flags in kube-apiserver's named
// sections (cliflag.NamedFlagSets), in order, each flag once, and every
// flag in a section.
func TestHelpSections(t *testing.T) {
	var stdout bytes.Buffer
	t.Setenv("COLUMNS", "100")
	if err := run(context.Background(), []string{"--help"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	help := stdout.String()
	want := []string{"Etcd flags:", "Serving flags:", "Authentication flags:", "Authorization flags:", "Encryption flags:",
		"Admission and memory flags:", "Watch cache flags:", "Auditing flags:", "Logging flags:", "Misc flags:"}
	at := 0
	for _, h := range want {
		i := strings.Index(help[at:], "\n"+h+"\n")
		if i < 0 {
			t.Fatalf("--help has no section %q after byte %d (sections in order %q):\n%s", h, at, want, help)
		}
		at += i + 1
	}
	// Every flag is printed once, under the section that holds it.
	o, err := parseFlags([]string{"--help"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range o.fss.Order {
		o.fss.FlagSets[name].VisitAll(func(f *pflag.Flag) {
			if f.Hidden { // not printed (--watch-cache-progress-interval, for the robustness suite)
				return
			}
			n++
			flagLine := regexp.MustCompile(`(?m)^  (?:-\w, |    )--` + f.Name + `[ =\[\n]`)
			if c := len(flagLine.FindAllString(help, -1)); c != 1 {
				t.Errorf("--help prints --%s %d times, want once", f.Name, c)
			}
		})
	}
	if n < 60 {
		t.Errorf("the sections hold %d flags, want all of lazyapi's (60 or more)", n)
	}
	for _, f := range []struct{ flag, section string }{
		{"--etcd-servers", "Etcd"}, {"--secure-port", "Serving"}, {"--token-auth-file", "Authentication"},
		{"--authorization-mode", "Authorization"}, {"--encryption-provider-config", "Encryption"},
		{"--max-inflight-bytes", "Admission and memory"}, {"--watch-cache-memory", "Watch cache"},
		{"--audit-log-path", "Auditing"}, {"--logging-format", "Logging"}, {"--demo", "Misc"},
	} {
		i := regexp.MustCompile(`(?m)^  (?:-\w, |    )` + f.flag + `[ =\[\n]`).FindStringIndex(help)[0]
		s := strings.LastIndex(help[:max(i, 0)], " flags:\n")
		if i < 0 || s < 0 || !strings.HasSuffix(help[:s], "\n"+f.section) {
			t.Errorf("--help prints %s outside its section %q", f.flag, f.section)
		}
	}
}

// TestHelpWidth: --help wraps to $COLUMNS (the terminal's width when
// stdout is one): no line is wider, except a single word longer than the
// room beside the flag names.
func TestHelpWidth(t *testing.T) {
	for _, cols := range []int{80, 120} {
		t.Setenv("COLUMNS", strconv.Itoa(cols))
		var stdout bytes.Buffer
		if err := run(context.Background(), []string{"--help"}, &stdout, io.Discard); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(stdout.String(), "\n")
		longest := 0
		for _, l := range lines {
			longest = max(longest, len(l))
			if len(l) > cols && strings.Count(strings.TrimSpace(l), " ") > 0 {
				t.Errorf("COLUMNS=%d: line of %d characters:\n%s", cols, len(l), l)
			}
		}
		if longest < cols-20 {
			t.Errorf("COLUMNS=%d: longest line %d characters: the text is not wrapped to the width", cols, longest)
		}
		if len(lines) < 150 {
			t.Errorf("COLUMNS=%d: %d lines of help, want the descriptions wrapped", cols, len(lines))
		}
	}
	if w := helpWidth(io.Discard); w != 120 {
		t.Errorf("helpWidth with COLUMNS=120 = %d", w)
	}
	t.Setenv("COLUMNS", "")
	if w := helpWidth(io.Discard); w != 80 {
		t.Errorf("helpWidth without a terminal or COLUMNS = %d, want 80", w)
	}
}
