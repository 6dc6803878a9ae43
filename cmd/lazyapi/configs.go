package main

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authn/tokenreview"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/rbacetcd"
	authzwebhook "github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/internal/quietsock"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// The translation point: each package's Config is built here from the
// parsed and validated Options (options.go and the sections in
// serving.go, decrypt.go, forward.go). The packages take these
// configurations and never see a flag; serveAPI (api.go) only starts them
// in order.

// rbacConfig is the RBAC source's configuration: the RBAC objects under
// --etcd-prefix, decrypted with p.enc, kept in rbac.
func (o *Options) rbacConfig(p *parts, rbac *authz.RBAC, lg *zap.Logger) rbacetcd.Config {
	return rbacetcd.Config{Client: p.cli, Prefix: o.Etcd.prefix, RBAC: rbac, Logger: lg, Metrics: p.metrics,
		Decrypt: rbacDecrypt(p.enc)}
}

// etcdClientConfig is the etcd client's configuration for endpoints (the
// --etcd-servers, or the embedded etcd's), with dial's options beside the
// fixed flow-control windows (etcdWindows).
func (o *Options) etcdClientConfig(endpoints []string, lg *zap.Logger, dial []grpc.DialOption) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: etcdProbeTimeout, TLS: o.Etcd.tls, Logger: lg,
		DialOptions: append(etcdWindows(), dial...)}
}

// etcdWindows are the etcd client's HTTP/2 flow-control windows, fixed,
// which turns grpc-go's bandwidth-delay estimator off. With it on, the
// first data frame after each ping's acknowledgement sends a new ping: a
// watch of sparse events (a kubelet-shaped cluster's Lease renewals and
// Pod updates, each etcd's response alone) cost a ping per response (41
// for 40: TestEtcdClientSendsNoPingPerEvent), each a wake-up of the
// client's writer and, for its acknowledgement, of its reader. At 5,000
// kubelet-shaped nodes the fixed windows took 18% of lazyapi's thread
// wake-ups away and 8% of its CPU per event (bench/RESULTS.md ## fanout:
// thread wake-ups per event). The windows are the estimator's bounds: 4 MiB
// a stream (a link of 1 ms round trip at 4 GB/s) and 16 MiB, its limit,
// for the connection. They bound what etcd sends ahead of what clientv3
// has read; clientv3 reads its watch streams as etcd sends, and so do the
// watch cache and etcd-served watches (proxy's etcdFeed) read clientv3's.
func etcdWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithInitialWindowSize(etcdStreamWindow), grpc.WithInitialConnWindowSize(etcdConnWindow),
		grpc.WithContextDialer(etcdDial)}
}

// etcdDial connects the etcd client to addr (grpc-go's form: host:port,
// unix://absolute-path or unix:relative-path) with quiet reads
// (quietsock.Wrap): the client's read of each event no longer wakes the
// runtime's monitor thread. Like any dialer given to grpc-go (and
// kube-apiserver's with an egress selector) it connects directly: grpc-go's
// own would go through an HTTPS_PROXY of the environment.
func etcdDial(ctx context.Context, addr string) (net.Conn, error) {
	network, address := "tcp", addr
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, address = "unix", strings.TrimPrefix(rest, "//")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return quietsock.Wrap(c), nil
}

// failoverConfig is store.FailoverConfig of --etcd-preferred-server and
// --etcd-slow-member-margin (0 turns the latency choice off: -1).
func (o *Options) failoverConfig(endpoints []string, retry *store.ReadRetry, lg *zap.Logger, ms *metrics.Set) store.FailoverConfig {
	margin := o.Etcd.slowMargin
	if margin == 0 {
		margin = -1
	}
	return store.FailoverConfig{Endpoints: endpoints, Preferred: o.Etcd.preferred, TLS: o.Etcd.tls, DialTimeout: etcdProbeTimeout,
		SlowMargin: margin, Retry: retry, Logger: lg, Metrics: ms}
}

// storeConfig is the store's configuration: prefix and LIST pages.
func (o *Options) storeConfig(ms *metrics.Set) store.Config {
	return store.Config{Prefix: o.Etcd.prefix, PageSize: o.Etcd.listPageSize, PageBytes: int(o.Etcd.listPageBytes), Metrics: ms}
}

// limiterConfig is the limiter's configuration. Call it after validate.
func (o *Options) limiterConfig(lg *zap.Logger, ms *metrics.Set) ratelimit.Config {
	a := &o.Admission
	cfg := ratelimit.DefaultConfig()
	inflight, _ := o.inflightBytes() // checked by validate
	cfg.MaxRequestsInflight = a.maxRequestsInflight
	cfg.MaxWatchesInflight = a.maxWatchesInflight
	cfg.MaxInflightBytes = inflight
	cfg.MaxWatchBytes = int64(a.maxWatchBytes)
	cfg.MaxSingleRequestBytes = int64(a.maxSingleRequestBytes)
	cfg.MaxQueued = a.maxQueued
	cfg.MaxQueueWait = o.queueWait()
	cfg.MaxBulkInflight = a.maxBulkInflight
	cfg.BulkListBytes = int64(a.bulkListBytes)
	cfg.ShortReservedBytes = int64(a.shortReservedBytes)
	cfg.BulkYield = a.bulkYield
	cfg.ClientShare = a.clientShare
	cfg.PerClientQPS = a.perClientQPS
	cfg.PerClientBurst = a.perClientBurst
	cfg.Logger = lg
	cfg.Metrics = ms
	return cfg
}

// cacheConfig is the watch cache's configuration over cli; p gives the
// decryption and the failover's moves.
func (o *Options) cacheConfig(cli *clientv3.Client, p *parts, lg *zap.Logger) cache.Config {
	return cache.Config{
		Client:           cli,
		Logger:           namingFlags(lg, cacheFlags),
		Metrics:          p.metrics,
		MemoryBytes:      o.cacheBytes(),
		Sizes:            o.WatchCache.sizes,
		ProgressInterval: o.WatchCache.progress,
		Decrypt:          cacheDecrypt(p.enc),
		HoldDecrypted:    o.Encryption.cacheDecrypted,
		EtcdMoved:        etcdMoved(p.failover),
		Filled:           returnFillMemory(lg, fillMemoryMinBytes(o.cacheBytes())),
	}
}

// auditConfig is the audit log's configuration; ok is false without
// --audit-log-path (no audit log).
func (o *Options) auditConfig(lg *zap.Logger, ms *metrics.Set) (cfg audit.Config, ok bool) {
	a := &o.Audit
	return audit.Config{Path: a.path, PolicyFile: a.policyFile, MaxSize: a.maxSize, MaxAge: a.maxAge,
		MaxBackups: a.maxBackup, Compress: a.compress, Logger: lg, Metrics: ms}, a.path != ""
}

// proxyConfig is the HTTP server's configuration, of the parts built
// before it.
func (o *Options) proxyConfig(p *parts, lg *zap.Logger) proxy.Config {
	return proxy.Config{
		Store:              store.New(p.cli, o.storeConfig(p.metrics)),
		RequestTimeout:     o.Serving.requestTimeout,
		WriteTimeout:       o.Serving.writeTimeout,
		DisableCompression: !o.Serving.compression,
		Resources:          p.resources,
		Logger:             namingFlags(lg, proxyFlags),
		Metrics:            p.metrics,
		Limiter:            p.limiter,
		Cache:              p.cache,
		Authenticator:      p.authn,
		Profiling:          o.Misc.profiling,
		OpenAPI:            p.openAPI,
		Authorizer:         p.authorizer,
		Encryption:         p.enc,
		CacheDecrypted:     o.Encryption.cacheDecrypted,
		EtcdFailover:       etcdFailoverStatus(p.failover),
		Audit:              p.audit,
		Forward:            p.forward,
		ServesWrites:       p.forward != nil,
	}
}

// authzWebhookConfig is the Webhook mode's configuration and the flag
// that names its kubeconfig.
func (o *Options) authzWebhookConfig(ms *metrics.Set) (authzwebhook.Config, string) {
	s := &o.Serving
	flag := "--authorization-kubeconfig"
	if s.authzWebhookConfig != "" {
		flag = "--authorization-webhook-config-file"
	}
	return authzwebhook.Config{
		Webhook:       webhookclient.Config{Kubeconfig: s.authzKubeconfig, ConfigFile: s.authzWebhookConfig, Version: s.authzWebhookVersion},
		AuthorizedTTL: s.authzAuthorizedTTL, UnauthorizedTTL: s.authzUnauthorizedTTL, Metrics: ms,
	}, flag
}

// tokenReviewConfig is the TokenReview client's configuration and the flag
// that names its kubeconfig.
func (o *Options) tokenReviewConfig(ms *metrics.Set) (tokenreview.Config, string) {
	s := &o.Serving
	auds := s.apiAudiences
	if len(auds) == 0 && len(s.saIssuers) > 0 {
		auds = s.saIssuers[:1] // kube-apiserver's default --api-audiences
	}
	flag := "--authentication-kubeconfig"
	if s.authnWebhookConfig != "" {
		flag = "--authentication-token-webhook-config-file"
	}
	return tokenreview.Config{
		Webhook:  webhookclient.Config{Kubeconfig: s.authnKubeconfig, ConfigFile: s.authnWebhookConfig, Version: s.authnWebhookVersion},
		CacheTTL: s.authnWebhookCacheTTL, Audiences: auds, Metrics: ms,
	}, flag
}

// authnConfig returns the authenticator configuration: the flags' files,
// the service account verifier reading bound objects through p.cli
// (decrypted with p.enc), and the TokenReview client.
func (o *Options) authnConfig(p *parts, lg *zap.Logger) (authn.Config, error) {
	s := &o.Serving
	cfg := s.authn
	if s.tokenReview() {
		useKlog(lg)
		trc, flag := o.tokenReviewConfig(p.metrics)
		tr, err := tokenreview.New(trc)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", flag, err)
		}
		cfg.TokenReview = tr
	}
	if len(s.saKeys) == 0 {
		return cfg, nil
	}
	prefix := o.Etcd.prefix
	v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{
		Keys: s.saKeys, Issuers: s.saIssuers, Audiences: s.apiAudiences, LookupLegacy: s.saLookup,
		Lookup: etcdLookup{cli: p.cli, prefix: prefix, enc: p.enc}, Prefix: prefix,
	}, nil)
	if err != nil {
		return cfg, fmt.Errorf("--service-account-key-file: %w", err)
	}
	cfg.ServiceAccounts = v
	return cfg, nil
}

// encryptionConfig is the decryption's configuration; ok is false without
// --encryption-provider-config (values are read as stored).
func (o *Options) encryptionConfig(lg *zap.Logger, ms *metrics.Set) (cfg encryption.Config, ok bool) {
	f := &o.Encryption
	return encryption.Config{File: f.file, AutomaticReload: f.reload, Logger: lg, Metrics: ms}, f.file != ""
}

// forwardConfig is the forwarder's configuration; ok is false without
// --upstream-kubeconfig. Call it after validate.
func (o *Options) forwardConfig(lg *zap.Logger, ms *metrics.Set) (cfg forward.Config, ok bool) {
	f := &o.Forward
	if !f.on() {
		return cfg, false
	}
	return forward.Config{
		Upstream:     f.upstream,
		TLS:          f.tls,
		MaxShort:     f.maxShort,
		MaxStreams:   f.maxStreams,
		DialTimeout:  f.dialTimeout,
		WriteTimeout: o.Serving.writeTimeout,
		Logger:       lg,
		Metrics:      ms,
	}, true
}

// Log fields that name a Config field, and the flag that sets it. A
// library's log line carries the Config field it speaks of (the cache's
// "resource not cached: it does not fit the budget" carries MemoryBytes,
// proxy's "stream aborted" its writeTimeout or requestTimeout); the
// loggers handed to the libraries add the flag, as "flag", so that the
// operator reads which flag to change.
var (
	cacheFlags = map[string]string{"MemoryBytes": "--watch-cache-memory"}
	proxyFlags = map[string]string{"writeTimeout": "--write-timeout", "requestTimeout": "--request-timeout"}
)

// namingFlags returns lg adding to each entry that carries a field of
// flags (its first) a "flag" field naming the flag. A nil lg stays nil:
// the libraries read a nil Logger as zap.NewNop.
func namingFlags(lg *zap.Logger, flags map[string]string) *zap.Logger {
	if lg == nil {
		return nil
	}
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return flagNamer{c, flags} }))
}

// flagNamer is the zapcore.Core of namingFlags.
type flagNamer struct {
	zapcore.Core
	flags map[string]string
}

func (c flagNamer) With(fields []zapcore.Field) zapcore.Core {
	return flagNamer{c.Core.With(fields), c.flags}
}

func (c flagNamer) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c flagNamer) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	for _, f := range fields {
		if flag, ok := c.flags[f.Key]; ok {
			fields = append(fields[:len(fields):len(fields)], zap.String("flag", flag))
			break
		}
	}
	return c.Core.Write(ent, fields)
}
