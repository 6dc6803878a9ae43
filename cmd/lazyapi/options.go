package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	"k8s.io/apiserver/pkg/audit/policy"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/lazyapi/lazyapi/internal/certfile"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// Options is lazyapi's command line: the one place where flags become the
// packages' configurations. parseFlags binds every flag to a field of a
// section, complete fills what the flags leave to derive, validate checks
// every section in one pass (each problem an error "--flag: problem"),
// and the *Config methods, all in configs.go, build each package's
// Config: storeConfig, etcdClientConfig, failoverConfig, limiterConfig,
// cacheConfig, encryptionConfig, rbacConfig, authzWebhookConfig,
// tokenReviewConfig, authnConfig, auditConfig, forwardConfig,
// proxyConfig. The packages take those configurations and never see a
// flag.
//
// Adding a flag section (for example forwarding's --upstream-kubeconfig):
//  1. write a type with addFlags(*cliflag.NamedFlagSets), registering its
//     flags in fss.FlagSet("its section name"), and validate(*Options)
//     []error, returning flagError(...)s;
//  2. add it as a field of Options and to the list in
//     (*Options).sections;
//  3. add the *Config method that builds its package's Config to
//     configs.go.
//
// --help then prints the section (in the order of sections), parseFlags
// binds it and validate checks it; nothing else changes.
type Options struct {
	Etcd       etcdOptions       // etcd: servers, TLS, prefix, pages, embedded etcd
	Serving    servingOptions    // serving, authentication, authorization (serving.go)
	Encryption encryptionOptions // encryption at rest (decrypt.go)
	Admission  admissionOptions  // admission and memory
	WatchCache watchCacheOptions // watch cache
	Audit      auditOptions      // auditing
	Forward    forwardOptions    // forwarding to kube-apiserver (forward.go)
	Logging    loggingOptions    // logging
	Misc       miscOptions       // profiling, demo, version, help

	fss     cliflag.NamedFlagSets  // the sections' flags, for --help
	changed func(name string) bool // the parsed flag set's Changed; see given
}

// section is one group of flags of Options.
type section interface {
	addFlags(fss *cliflag.NamedFlagSets)
	validate(o *Options) []error
}

// sections lists Options' sections in --help order: the one list a new
// section is added to.
func (o *Options) sections() []section {
	return []section{&o.Etcd, &o.Serving, &o.Encryption, &o.Admission, &o.WatchCache, &o.Audit, &o.Forward, &o.Logging, &o.Misc}
}

// complete normalizes the parsed values and applies the defaults that
// depend on other flags. It runs before validate.
func (o *Options) complete() {
	e := &o.Etcd
	e.servers = trimEmpty(e.servers)
	e.preferred = strings.TrimSpace(e.preferred)
	if strings.TrimSpace(e.prefix) != "" {
		e.prefix = store.NormalizePrefix(e.prefix)
	}
	w := &o.WatchCache
	w.preload = trimEmpty(w.preload)
	for i, n := range w.preload {
		w.preload[i] = strings.ToLower(n)
	}
	// With an authenticator the plain port is off unless given:
	// credentials sent to it travel in clear text (kube-apiserver has no
	// insecure port).
	if o.Serving.authenticated() && !o.given("port") {
		o.Serving.port = 0
	}
}

// validate checks every section and returns one usage error listing each
// problem ("--flag: problem; --other-flag: problem"), nil when there is
// none. It loads the files the flags name (certificates, token files,
// policies) so that a bad file is a command-line error.
func (o *Options) validate() error {
	var msgs []string
	for _, s := range o.sections() {
		for _, err := range s.validate(o) {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return usageErrorf("%s", strings.Join(msgs, "; "))
}

// given reports whether flag was on the command line (false for Options
// not made by parseFlags).
func (o *Options) given(flag string) bool { return o.changed != nil && o.changed(flag) }

// flagError is a problem with the value of flag: "--flag: problem".
func flagError(flag, format string, args ...any) error {
	return fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...))
}

// etcdOptions are the flags that say where etcd is and how to read it.
type etcdOptions struct {
	servers       []string      // empty: start an embedded etcd in dataDir
	preferred     string        // --etcd-preferred-server: one of servers, or ""
	slowMargin    time.Duration // --etcd-slow-member-margin; 0: off
	prefix        string        // normalized like kube-apiserver: leading "/", no trailing "/"
	caFile        string
	certFile      string
	keyFile       string
	listPageSize  int
	listPageBytes byteSize
	dataDir       string

	tls     *tls.Config       // non-nil when any TLS file is given (validate)
	keyPair *certfile.KeyPair // --etcd-certfile/--etcd-keyfile, reloaded on change
	cas     *certfile.CAs     // --etcd-cafile, reloaded on change
}

func (e *etcdOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("etcd")
	fs.StringSliceVar(&e.servers, "etcd-servers", nil,
		"List of etcd servers to connect with (scheme://ip:port), comma separated. Empty: start an embedded etcd in --data-dir.")
	fs.StringVar(&e.preferred, "etcd-preferred-server", "",
		"The --etcd-servers entry to read from alone while it answers linearizable reads (the local member); the other members that answer serve while it does not. Empty: spread reads over every member that answers.")
	fs.DurationVar(&e.slowMargin, "etcd-slow-member-margin", store.DefaultSlowMargin,
		"With several --etcd-servers: leave out a member whose linearizable reads (median of 5 probes) take this much longer than, and twice as long as, the fastest member's; 0 turns this off.")
	fs.StringVar(&e.prefix, "etcd-prefix", store.DefaultPrefix,
		"The prefix under which kube-apiserver stores Kubernetes resources in etcd.")
	fs.StringVar(&e.caFile, "etcd-cafile", "", "SSL Certificate Authority file used to secure etcd communication.")
	fs.StringVar(&e.certFile, "etcd-certfile", "", "SSL certification file used to secure etcd communication.")
	fs.StringVar(&e.keyFile, "etcd-keyfile", "", "SSL key file used to secure etcd communication.")
	e.listPageSize = store.DefaultPageSize
	fs.IntVar(&e.listPageSize, "list-page-size", e.listPageSize,
		"Maximum number of items read from etcd in one range request of a LIST.")
	// The store's default, 1 MiB, keeps a page of typical objects (1-2
	// KiB) at the item limit while a LIST of large objects holds about one
	// MiB page at a time (bench/RESULTS.md, proxy section: larger caps
	// raised a LIST's heap rise).
	e.listPageBytes = store.DefaultPageBytes
	fs.Var(&e.listPageBytes, "list-page-bytes",
		"Target bytes of stored values per etcd range request of a LIST; the next page's item count is chosen from the sizes seen (e.g. 1Mi, 4Mi).")
	fs.StringVar(&e.dataDir, "data-dir", defaultDataDir(),
		"Data directory of the embedded etcd (used only without --etcd-servers).")
}

func (e *etcdOptions) validate(o *Options) []error {
	var errs []error
	for _, s := range e.servers {
		if !strings.Contains(s, "://") {
			errs = append(errs, flagError("etcd-servers", "entry %q: want scheme://host:port, e.g. http://127.0.0.1:2379", s))
		}
	}
	if e.preferred != "" && !slices.Contains(e.servers, e.preferred) {
		errs = append(errs, flagError("etcd-preferred-server", "%q is not one of --etcd-servers (%s)", e.preferred, strings.Join(e.servers, ",")))
	}
	if e.slowMargin < 0 {
		errs = append(errs, flagError("etcd-slow-member-margin", "%s is negative (0 turns it off)", e.slowMargin))
	}
	if strings.TrimSpace(e.prefix) == "" {
		errs = append(errs, flagError("etcd-prefix", "must not be empty"))
	}
	if e.listPageSize <= 0 {
		errs = append(errs, flagError("list-page-size", "%d: must be greater than 0", e.listPageSize))
	}
	if e.listPageBytes <= 0 {
		errs = append(errs, flagError("list-page-bytes", "%d: must be greater than 0", e.listPageBytes))
	}
	if o.Misc.demo && len(e.servers) > 0 {
		errs = append(errs, flagError("demo", "seeds only the embedded etcd: drop --etcd-servers or --demo"))
	}
	if len(e.servers) == 0 && strings.TrimSpace(e.dataDir) == "" {
		errs = append(errs, flagError("data-dir", "must not be empty when --etcd-servers is not set"))
	}
	if err := e.loadTLS(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// loadTLS loads the --etcd-* TLS files into e.tls; nil when none is given.
func (e *etcdOptions) loadTLS() error {
	if e.caFile == "" && e.certFile == "" && e.keyFile == "" {
		return nil
	}
	if len(e.servers) == 0 {
		flag := "etcd-cafile"
		switch {
		case e.caFile != "":
		case e.certFile != "":
			flag = "etcd-certfile"
		default:
			flag = "etcd-keyfile"
		}
		return flagError(flag, "needs --etcd-servers (the embedded etcd is plain HTTP on loopback)")
	}
	if err := pairedFlags("etcd-certfile", e.certFile, "etcd-keyfile", e.keyFile); err != nil {
		return err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if e.caFile != "" {
		if _, err := os.Stat(e.caFile); err != nil {
			return flagError("etcd-cafile", "cannot read: %v", err)
		}
		cas, err := certfile.LoadCAs(e.caFile)
		if err != nil {
			return flagError("etcd-cafile", "cannot use %q: %v", e.caFile, err)
		}
		e.cas = cas
		// The CA is reloaded on change: Go's TLS client cannot swap
		// RootCAs, so the chain and name are verified by VerifyConnection
		// against the pool in force.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = cas.VerifyServer()
	}
	if e.certFile != "" {
		kp, err := loadKeyPair("etcd-certfile", e.certFile, "etcd-keyfile", e.keyFile)
		if err != nil {
			return err
		}
		e.keyPair = kp
		// New connections (reconnects) present the certificate in force.
		cfg.GetClientCertificate = kp.GetClientCertificate
	}
	e.tls = cfg
	return nil
}

// pairedFlags requires flags a and b (values va, vb) to be given together:
// the missing one is at fault.
func pairedFlags(a, va, b, vb string) error {
	switch {
	case va != "" && vb == "":
		return flagError(b, "needed with --%s (give both)", a)
	case va == "" && vb != "":
		return flagError(a, "needed with --%s (give both)", b)
	}
	return nil
}

// loadKeyPair loads the certificate and key files of flags certFlag and
// keyFlag, reloaded on change; its errors name the flags.
func loadKeyPair(certFlag, certFile, keyFlag, keyFile string) (*certfile.KeyPair, error) {
	for _, f := range []struct{ flag, path string }{{certFlag, certFile}, {keyFlag, keyFile}} {
		if _, err := os.Stat(f.path); err != nil {
			return nil, flagError(f.flag, "cannot read: %v", err)
		}
	}
	kp, err := certfile.LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, flagError(certFlag, "cannot load --%s/--%s: %v", certFlag, keyFlag, err)
	}
	return kp, nil
}

// etcdProbeTimeout bounds the first request to etcd at start.
const etcdProbeTimeout = 5 * time.Second

// The etcd client's fixed flow-control windows (etcdWindows): of a
// stream and of the connection.
const (
	etcdStreamWindow = 4 << 20
	etcdConnWindow   = 16 << 20
)

// admissionOptions are the memory limit and the limiter's flags.
type admissionOptions struct {
	memoryLimit           byteSize // 0: no limit set (a GOMEMLIMIT env var stays in force)
	maxRequestsInflight   int
	maxWatchesInflight    int
	maxInflightBytes      byteSize // 0: derived from --memory-limit
	maxWatchBytes         byteSize
	maxSingleRequestBytes byteSize
	maxQueued             int
	maxQueueWait          time.Duration
	maxBulkInflight       int
	bulkListBytes         byteSize
	shortReservedBytes    byteSize
	bulkYield             time.Duration
	clientShare           float64
	perClientQPS          float64
	perClientBurst        int
}

func (a *admissionOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("admission and memory")
	d := ratelimit.DefaultConfig()
	fs.Var(&a.memoryLimit, "memory-limit",
		"Memory limit of the process's resident set, e.g. 512Mi or 2Gi: sets GOMEMLIMIT an eighth below it (96Mi to a quarter: the rest of the RSS is the binary's code and data, and the collector's overshoot) and derives the cache and in-flight budgets. 0: leave the Go default or the GOMEMLIMIT environment variable.")
	fs.IntVar(&a.maxRequestsInflight, "max-requests-inflight", d.MaxRequestsInflight,
		"Maximum number of non-watch requests served at once.")
	fs.IntVar(&a.maxWatchesInflight, "max-watches-inflight", d.MaxWatchesInflight,
		"Maximum number of open watches; 0 = no count limit (watches are bounded by --max-watch-bytes and their clients' fair shares of it).")
	fs.Var(&a.maxInflightBytes, "max-inflight-bytes",
		"Byte budget for the working sets of in-flight requests (quantity, e.g. 256Mi). 0 = half of --memory-limit minus the cache budget.")
	fs.Var(&a.maxWatchBytes, "max-watch-bytes",
		"Byte budget of open watches: what each holds idle (25Ki, 49Ki over TLS), its initial events from the watch cache while it sends them, and its queued frames (quantity). Any watch is admitted while watches reserve at most 7/8 of it; the last 1/8 is for clients' first watches and for clients holding less than 7/8 of it divided among the clients holding watches. 0 = --max-inflight-bytes.")
	fs.Var(&a.maxSingleRequestBytes, "max-single-request-bytes",
		"Largest working-set estimate admitted, alone, when above --max-inflight-bytes (quantity). 0 = twice --max-inflight-bytes.")
	fs.IntVar(&a.maxQueued, "max-queued-requests", d.MaxQueued,
		"Maximum number of requests waiting for admission over all clients; 0 rejects at once.")
	fs.DurationVar(&a.maxQueueWait, "max-queue-wait", d.MaxQueueWait,
		"Maximum time a request waits for admission before a 429 with Retry-After. Default: 15s, at most a quarter of --request-timeout (as kube-apiserver's API Priority and Fairness).")
	fs.IntVar(&a.maxBulkInflight, "max-bulk-lists-inflight", d.MaxBulkInflight,
		"Maximum number of bulk LISTs (estimated response above --bulk-list-threshold) served at once; others queue per client, then get a 429. 0 = half of GOMAXPROCS, at least 1.")
	a.bulkListBytes = byteSize(d.BulkListBytes)
	fs.Var(&a.bulkListBytes, "bulk-list-threshold",
		"Estimated LIST response size (items x average stored size) above which a LIST is bulk (quantity, e.g. 16Mi).")
	fs.Var(&a.shortReservedBytes, "short-reserved-inflight-bytes",
		"Part of --max-inflight-bytes that bulk LISTs cannot reserve, kept for GETs and small LISTs (quantity). 0 = a quarter of --max-inflight-bytes.")
	fs.DurationVar(&a.bulkYield, "bulk-list-yield", d.BulkYield,
		"Longest pause of a bulk LIST stream per flush while GETs or small LISTs are in flight; 0 = never pause.")
	fs.Float64Var(&a.clientShare, "per-client-share", d.ClientShare,
		"Fraction (0-1] of the short and bulk seats, and of the byte budget, one client (user, or remote IP when anonymous) may hold at once; its further requests queue behind its own. 1 = no cap.")
	fs.Float64Var(&a.perClientQPS, "per-client-qps", d.PerClientQPS,
		"Sustained requests per second admitted per client (user or remote IP); 0 = unlimited.")
	fs.IntVar(&a.perClientBurst, "per-client-burst", d.PerClientBurst,
		"Burst of --per-client-qps.")
}

// validate checks the limiter's flags with ratelimit.Config's rules,
// naming the flags, before ratelimit.New checks the Config again.
func (a *admissionOptions) validate(o *Options) []error {
	var errs []error
	check := func(bad bool, flag, format string, args ...any) {
		if bad {
			errs = append(errs, flagError(flag, format, args...))
		}
	}
	check(a.maxRequestsInflight <= 0, "max-requests-inflight", "%d: must be greater than 0", a.maxRequestsInflight)
	check(a.maxWatchesInflight < 0, "max-watches-inflight", "%d: must not be negative (0: no count limit)", a.maxWatchesInflight)
	check(a.maxQueued < 0, "max-queued-requests", "%d: must not be negative", a.maxQueued)
	check(a.maxQueueWait <= 0, "max-queue-wait", "%s: must be greater than 0", a.maxQueueWait)
	check(a.maxBulkInflight < 0, "max-bulk-lists-inflight", "%d: must not be negative", a.maxBulkInflight)
	check(a.bulkListBytes <= 0, "bulk-list-threshold", "%d: must be greater than 0", a.bulkListBytes)
	check(a.bulkYield < 0, "bulk-list-yield", "%s: must not be negative", a.bulkYield)
	check(a.clientShare <= 0 || a.clientShare > 1, "per-client-share", "%g: must be in (0, 1]", a.clientShare)
	check(a.perClientQPS < 0, "per-client-qps", "%g: must not be negative", a.perClientQPS)
	check(a.perClientQPS > 0 && a.perClientBurst < 1, "per-client-burst", "%d: must be at least 1 with --per-client-qps", a.perClientBurst)
	inflight, err := o.inflightBytes()
	if err != nil {
		return append(errs, err)
	}
	check(a.maxSingleRequestBytes != 0 && int64(a.maxSingleRequestBytes) < inflight,
		"max-single-request-bytes", "%d: must be 0 or at least --max-inflight-bytes (%d)", a.maxSingleRequestBytes, inflight)
	check(int64(a.shortReservedBytes) >= inflight, "short-reserved-inflight-bytes",
		"%d: must be below --max-inflight-bytes (%d)", a.shortReservedBytes, inflight)
	return errs
}

// inflightBytes is --max-inflight-bytes, or when 0 half of --memory-limit
// minus the watch cache's budget (none when the cache is off).
func (o *Options) inflightBytes() (int64, error) {
	if v := o.Admission.maxInflightBytes; v > 0 {
		return int64(v), nil
	}
	cacheBytes := o.cacheBytes()
	if !o.WatchCache.enabled {
		cacheBytes = 0
	}
	v, err := ratelimit.DefaultInflightBytes(int64(o.Admission.memoryLimit), cacheBytes)
	if err != nil {
		return 0, flagError("max-inflight-bytes", "0 derives it from --memory-limit, but half of it (%s) minus --watch-cache-memory (%s) leaves less than 1Mi: raise --memory-limit, lower --watch-cache-memory or set --max-inflight-bytes",
			quantity(max(int64(o.Admission.memoryLimit), ratelimit.DefaultMemoryLimit)/2), quantity(cacheBytes))
	}
	if r := o.Forward.fitSeats(v, o.changed); r > 0 {
		// Forwarded requests count in --memory-limit: their reserve
		// comes out of the derived in-flight budget.
		if r > v/2 {
			return 0, flagError("max-inflight-bytes", "0 derives it from --memory-limit (%s), but the forwarded requests' reserve (%s: --max-forwarded-requests-inflight + --max-forwarded-streams-inflight, 96Ki each) is more than half of it: raise --memory-limit, lower them or set --max-inflight-bytes",
				quantity(v), quantity(r))
		}
		v -= r
	}
	return v, nil
}

// queueWait is --max-queue-wait; unset, at most a quarter of
// --request-timeout, as kube-apiserver's APF (getRequestWaitContext): once
// admitted a request has the rest of its deadline to be served (the
// request timeout counts from before admission).
func (o *Options) queueWait() time.Duration {
	if o.given("max-queue-wait") {
		return o.Admission.maxQueueWait
	}
	return min(o.Admission.maxQueueWait, o.Serving.requestTimeout/4)
}

// watchCacheOptions are the watch cache's flags.
type watchCacheOptions struct {
	enabled   bool           // --watch-cache
	sizeFlags []string       // --watch-cache-sizes as given
	sizes     map[string]int // --watch-cache-sizes, by resource[.group] (validate)
	preload   []string       // --watch-cache-preload: "resource[.group]" names, "*" for all; empty: none
	memory    byteSize       // --watch-cache-memory; 0: derived from --memory-limit
	// progress is --watch-cache-progress-interval (hidden): how often an
	// idle cached resource asks etcd for a progress notification.
	progress time.Duration
}

func (w *watchCacheOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("watch cache")
	fs.BoolVar(&w.enabled, "watch-cache", true,
		"Serve watches from an in-memory cache of stored bytes (one etcd watch per resource); false: every watch watches etcd.")
	fs.StringSliceVar(&w.sizeFlags, "watch-cache-sizes", nil,
		"Watch cache history sizes in events, comma separated resource[.group]#size (e.g. configmaps#1000,deployments.apps#0); 0 disables caching of that resource.")
	fs.StringSliceVar(&w.preload, "watch-cache-preload", []string{"*"},
		"Resources whose watch cache fills at start, before clients ask, comma separated resource[.group] (e.g. configmaps,deployments.apps); * = every resource (those that do not fit --watch-cache-memory are served from etcd); empty = fill on first use.")
	fs.Var(&w.memory, "watch-cache-memory",
		"Byte budget of the watch cache: values, index and history of all cached resources (quantity). 0 = a quarter of --memory-limit (of 1Gi when unset).")
	fs.DurationVar(&w.progress, "watch-cache-progress-interval", 5*time.Second,
		"How often each idle cached resource asks etcd for a progress notification on its watch's stream (its revision, for bookmarks and consistent reads). For tests: the robustness suite's reopen profile asks every millisecond, as many consistent reads at once would.")
	_ = fs.MarkHidden("watch-cache-progress-interval")
}

func (w *watchCacheOptions) validate(*Options) []error {
	var errs []error
	for _, n := range w.preload {
		if strings.ContainsAny(n, "#/ ") {
			errs = append(errs, flagError("watch-cache-preload", "entry %q: want resource[.group] or *", n))
		}
	}
	sizes, err := parseWatchCacheSizes(w.sizeFlags)
	if err != nil {
		return append(errs, err)
	}
	w.sizes = sizes
	if w.progress <= 0 {
		errs = append(errs, flagError("watch-cache-progress-interval", "must be > 0, got %s", w.progress))
	}
	return errs
}

// cacheBytes is --watch-cache-memory, or a quarter of --memory-limit.
func (o *Options) cacheBytes() int64 {
	if o.WatchCache.memory > 0 {
		return int64(o.WatchCache.memory)
	}
	return ratelimit.DefaultCacheBytes(int64(o.Admission.memoryLimit))
}

// preloadFilter returns the PreloadCache filter of --watch-cache-preload:
// nil (all) for "*", else membership in the list.
func (w *watchCacheOptions) preloadFilter() func(string) bool {
	set := make(map[string]bool, len(w.preload))
	for _, n := range w.preload {
		if n == "*" {
			return nil
		}
		set[n] = true
	}
	return func(name string) bool { return set[name] }
}

// auditOptions are kube-apiserver's audit log flags.
type auditOptions struct {
	path                       string // --audit-log-path; "": no audit log
	policyFile                 string // --audit-policy-file; "": audit.DefaultPolicy
	maxAge, maxBackup, maxSize int
	compress                   bool
	format, version            string // --audit-log-format, --audit-log-version: json and audit.k8s.io/v1 only
}

func (a *auditOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("auditing")
	fs.StringVar(&a.path, "audit-log-path", "",
		"If set, every request (allowed, or refused 401/403) is logged to this file as an audit.k8s.io/v1 Event at level Metadata, one JSON object a line (kube-apiserver's --audit-log-format=json); '-' means standard out. Written in the background: a slow disk drops events (lazyapi_audit_events_dropped_total) instead of holding requests.")
	fs.StringVar(&a.policyFile, "audit-policy-file", "",
		"Path to kube-apiserver's audit Policy (audit.k8s.io/v1) deciding which requests are logged and which stages omitted; levels above Metadata are logged at Metadata (lazyapi logs no bodies). Default: Metadata for every request but the health endpoints.")
	fs.IntVar(&a.maxAge, "audit-log-maxage", 366,
		"The maximum number of days to retain old audit log files based on the timestamp encoded in their filename. 0: not removed by age.")
	fs.IntVar(&a.maxBackup, "audit-log-maxbackup", 100,
		"The maximum number of old audit log files to retain. 0: no limit.")
	fs.IntVar(&a.maxSize, "audit-log-maxsize", 100,
		"The maximum size in megabytes of the audit log file before it gets rotated. 0 disables rotation.")
	fs.BoolVar(&a.compress, "audit-log-compress", false, "If set, the rotated log files will be compressed using gzip.")
	fs.StringVar(&a.format, "audit-log-format", "json",
		"Format of saved audits: json (kube-apiserver's default; its legacy format is not supported). Accepted so that kube-apiserver's flags can be copied.")
	fs.StringVar(&a.version, "audit-log-version", "audit.k8s.io/v1",
		"API group and version of the events written: audit.k8s.io/v1 only.")
}

// validate checks the values; the policy file is loaded (and loaded again
// at start) so that a bad one is a command-line error.
func (a *auditOptions) validate(*Options) []error {
	var errs []error
	for _, v := range []struct {
		flag  string
		value int
	}{{"audit-log-maxage", a.maxAge}, {"audit-log-maxbackup", a.maxBackup}, {"audit-log-maxsize", a.maxSize}} {
		if v.value < 0 {
			errs = append(errs, flagError(v.flag, "%d: must not be negative", v.value))
		}
	}
	if a.format != "json" {
		errs = append(errs, flagError("audit-log-format", "%q: lazyapi writes json only", a.format))
	}
	if a.version != "audit.k8s.io/v1" {
		errs = append(errs, flagError("audit-log-version", "%q: lazyapi writes audit.k8s.io/v1 only", a.version))
	}
	if a.policyFile != "" {
		if a.path == "" {
			return append(errs, flagError("audit-policy-file", "needs --audit-log-path"))
		}
		if _, err := policy.LoadPolicyFromFile(a.policyFile); err != nil {
			errs = append(errs, flagError("audit-policy-file", "%v", err))
		}
	}
	return errs
}

// loggingOptions are the log's flags.
type loggingOptions struct {
	levelName string
	level     zapcore.Level // parsed by validate
	format    string        // --logging-format: "text" or "json"
}

func (l *loggingOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("logging")
	fs.StringVar(&l.levelName, "log-level", "info", "Log level: debug, info, warn or error. Logs go to stderr.")
	fs.StringVar(&l.format, "logging-format", "text", "Log format of stderr: text (one readable line per entry) or json (one JSON object per line, for log pipelines).")
}

func (l *loggingOptions) validate(*Options) []error {
	var errs []error
	if err := l.level.Set(l.levelName); err != nil || l.level < zapcore.DebugLevel || l.level > zapcore.ErrorLevel {
		errs = append(errs, flagError("log-level", "%q: want debug, info, warn or error", l.levelName))
	}
	if l.format != "text" && l.format != "json" {
		errs = append(errs, flagError("logging-format", "%q: want text or json", l.format))
	}
	return errs
}

// miscOptions are the flags of no other section.
type miscOptions struct {
	profiling bool // --profiling: serve /debug/pprof/
	demo      bool
	demoChurn bool // --demo-churn: keep changing a few demo objects
	version   bool
	help      bool
}

func (m *miscOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("misc")
	fs.BoolVar(&m.profiling, "profiling", false,
		"Serve Go profiles at /debug/pprof/ (authenticated like /metrics). Default false (kube-apiserver's is true).")
	fs.BoolVar(&m.demo, "demo", false,
		"Seed an empty embedded etcd with demo objects (namespaces, ~1,000 ConfigMaps, a Deployment, a CRD, ...).")
	fs.BoolVar(&m.demoChurn, "demo-churn", true,
		"With --demo: keep the demo cluster alive: every 2s a ConfigMap in demo-app changes; Events, the Deployment's status and the node Lease follow (kubectl get -w shows them). false: static data.")
	fs.BoolVar(&m.version, "version", false, "Print the version and exit.")
	fs.BoolVarP(&m.help, "help", "h", false, "Print this help and exit.")
}

func (m *miscOptions) validate(*Options) []error { return nil }

// listenAddress is --bind-address with port.
func (o *Options) listenAddress(port int) string {
	return net.JoinHostPort(o.Serving.bindAddress.String(), fmt.Sprint(port))
}
