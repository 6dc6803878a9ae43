// Command lazyapi serves the Kubernetes read API (GET, LIST, WATCH) straight
// from the bytes kube-apiserver stored in etcd, with bounded memory.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/internal/certfile"
	"github.com/lazyapi/lazyapi/openapi"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handling: a second
		// SIGINT or SIGTERM ends the process without waiting for the drain.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lazyapi: "+strings.ReplaceAll(err.Error(), "\n", " "))
		if errors.As(err, new(usageError)) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run is the whole command: it parses args, starts every component, serves
// until ctx ends, then stops the components in reverse order. Human-readable
// hints go to stdout, logs (text or JSON, --logging-format) to stderr. It returns nil after a clean
// shutdown.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	if o.Misc.help {
		_, err := io.WriteString(stdout, o.usage(helpWidth(stdout)))
		return err
	}
	if o.Misc.version {
		bi, _ := debug.ReadBuildInfo()
		_, err := io.WriteString(stdout, versionOf(bi).long())
		return err
	}
	lg := newLogger(stderr, o.Logging.level, o.Logging.format)
	defer lg.Sync() //nolint:errcheck // stderr sync errors are not actionable
	// Components with no I/O are built now, so that their configuration
	// errors are command-line errors.
	ms := metrics.NewSet()
	lim, err := ratelimit.New(o.limiterConfig(lg.Named("ratelimit"), ms))
	if err != nil {
		return usageError{err} // validate checked the flags: not expected
	}
	// --memory-limit, 0 when none: what the memory alerts compare the RSS
	// with (go_memlimit_bytes is GOMEMLIMIT, below it).
	memoryLimit := int64(o.Admission.memoryLimit)
	ms.GetOrCreateGauge("lazyapi_memory_limit_bytes", func() float64 { return float64(memoryLimit) })
	if memoryLimit > 0 {
		prev := ratelimit.ApplyMemoryLimit(memoryLimit)
		defer debug.SetMemoryLimit(prev) // for in-process callers (tests)
		// Garbage above the live heap is capped too: with GOGC alone it
		// could grow by the watch cache's size (ratelimit.GarbageHeadroom).
		stopCap := ratelimit.CapGarbage(ratelimit.GarbageHeadroom(memoryLimit))
		defer stopCap()
		lg.Info("memory limit set", zap.Int64("bytes", memoryLimit), zap.Int64("GOMEMLIMIT", ratelimit.GoMemoryLimit(memoryLimit)),
			zap.Int64("garbageHeadroom", ratelimit.GarbageHeadroom(memoryLimit)))
	}
	// GOGC as CapGarbage last set it (-1 when off).
	ms.GetOrCreateGauge("lazyapi_gc_percent", func() float64 { return float64(ratelimit.GCPercent()) })
	certs := &certfile.Reloader{Logger: lg.Named("certs")}
	if o.Etcd.keyPair != nil {
		certs.AddKeyPair("--etcd-certfile/--etcd-keyfile", o.Etcd.keyPair, nil)
	}
	if o.Etcd.cas != nil {
		certs.AddCAs("--etcd-cafile", o.Etcd.cas, nil)
	}
	return serve(ctx, o, &parts{metrics: ms, limiter: lim, certs: certs}, lg, stdout)
}

// parts are the components, built in start order: run builds those with
// no I/O, serve and serveAPI the others. proxyConfig takes them all.
type parts struct {
	metrics *metrics.Set       // every component's metrics, served at /metrics
	limiter *ratelimit.Limiter // admission of GET and LIST
	certs   *certfile.Reloader // re-reads certificate and CA files (serveAPI adds the serving ones and runs it)
	// failover keeps the etcd client on --etcd-preferred-server while it
	// answers; nil without the flag.
	failover *store.Failover
	cli      *clientv3.Client
	// enc decrypts values encrypted at rest (--encryption-provider-config);
	// nil without.
	enc        *encryption.Transformers
	resources  *resource.Table
	openAPI    *openapi.Service
	cache      *cache.Cache // nil with --watch-cache=false
	authorizer *authz.Chain // nil: no authorization
	authn      *authn.Authenticator
	audit      *audit.Log         // nil without --audit-log-path
	forward    *forward.Forwarder // nil without --upstream-kubeconfig
}

// version is set at build time: -ldflags "-X main.version=v0.1.0".
var version string

// versionString is the module version: main.version when set, else the
// build information's (a pseudo-version with go build in a git checkout,
// "(devel)" with go run), with the first 12 digits of the VCS revision.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi).short()
}

// buildVersion is what --version prints.
type buildVersion struct {
	module   string // module version, or main.version
	revision string // VCS revision ("" when not stamped)
	time     string // VCS commit time
	modified bool   // the tree had uncommitted changes
	goVer    string
}

func versionOf(bi *debug.BuildInfo) buildVersion {
	v := buildVersion{module: version}
	if bi == nil {
		if v.module == "" {
			v.module = "(unknown)"
		}
		return v
	}
	if v.module == "" {
		v.module = bi.Main.Version
	}
	v.goVer = bi.GoVersion
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
		case "vcs.time":
			v.time = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	return v
}

func (v buildVersion) short() string {
	if len(v.revision) >= 12 && !strings.Contains(v.module, v.revision[:12]) {
		return v.module + " " + v.revision[:12]
	}
	return v.module
}

// long is --version's text: module version, VCS revision, the Kubernetes
// release whose read API lazyapi serves, the Go version.
func (v buildVersion) long() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lazyapi %s\n", v.module)
	switch {
	case v.revision == "":
		b.WriteString("  revision:   unknown (no VCS stamp: built by go run, go test or outside a git checkout; go build in the checkout stamps it unless GOFLAGS has -buildvcs=false)\n")
	default:
		rev := v.revision
		if v.time != "" {
			rev += " (" + v.time + ")"
		}
		if v.modified {
			rev += ", with uncommitted changes"
		}
		fmt.Fprintf(&b, "  revision:   %s\n", rev)
	}
	fmt.Fprintf(&b, "  kubernetes: %s (the read API served; /version reports %s)\n", strings.TrimSuffix(resource.GitVersion, "-lazyapi"), resource.GitVersion)
	if v.goVer != "" {
		fmt.Fprintf(&b, "  go:         %s\n", v.goVer)
	}
	return b.String()
}

// newLogger returns a logger writing to w at level, in format: "json" (one
// object per line, as before) or "text" (time, level, logger, message,
// then the fields as JSON, tab separated: readable on a terminal).
func newLogger(w io.Writer, level zapcore.Level, format string) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	var e zapcore.Encoder
	if format == "json" {
		e = zapcore.NewJSONEncoder(enc)
	} else {
		enc.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02T15:04:05.000Z07:00")
		enc.EncodeLevel = zapcore.CapitalLevelEncoder
		enc.ConsoleSeparator = " "
		e = zapcore.NewConsoleEncoder(enc)
	}
	core := zapcore.NewCore(e, zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core)
}

// filtered returns lg that logs only the entries keep accepts; for chatty
// dependencies (etcd server and client) that should only report problems.
func filtered(lg *zap.Logger, keep func(zapcore.Entry) bool) *zap.Logger {
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return filterCore{c, keep}
	}))
}

// atLeast returns lg restricted to level and above.
func atLeast(lg *zap.Logger, level zapcore.Level) *zap.Logger {
	return filtered(lg, func(e zapcore.Entry) bool { return e.Level >= level })
}

type filterCore struct {
	zapcore.Core
	keep func(zapcore.Entry) bool
}

func (c filterCore) With(f []zapcore.Field) zapcore.Core {
	return filterCore{c.Core.With(f), c.keep}
}

func (c filterCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.keep(e) {
		return ce
	}
	return c.Core.Check(e, ce)
}
