package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"

	"github.com/lazyapi/lazyapi/internal/certfile"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/store"
)

// config is the validated command line.
type config struct {
	etcdServers   []string      // empty: start an embedded etcd in dataDir
	etcdPreferred string        // --etcd-preferred-server: one of etcdServers, or ""
	etcdSlow      time.Duration // --etcd-slow-member-margin; 0: off
	etcdPrefix    string        // normalized like kube-apiserver: leading "/", no trailing "/"
	etcdCAFile    string
	etcdCertFile  string
	etcdKeyFile   string
	etcdTLS       *tls.Config       // non-nil when any TLS file is given
	etcdKeyPair   *certfile.KeyPair // --etcd-certfile/--etcd-keyfile, reloaded on change
	etcdCAs       *certfile.CAs     // --etcd-cafile, reloaded on change

	bindAddress    net.IP
	port           int  // --port: plain HTTP; 0: off (the default with an authenticator)
	plainTokens    bool // --plain-port-tokens: accept bearer tokens on --port
	listPageSize   int
	listPageBytes  int
	requestTimeout time.Duration
	compression    bool  // --enable-response-compression
	memoryLimit    int64 // bytes; 0: no limit set (a GOMEMLIMIT env var stays in force)
	logLevel       zapcore.Level
	logFormat      string           // --logging-format: "text" or "json"
	profiling      bool             // --profiling: serve /debug/pprof/
	limits         ratelimit.Config // --max-requests-inflight, --max-inflight-bytes, ...; MaxInflightBytes derived when 0
	watchCache     bool             // --watch-cache
	cacheSizes     map[string]int   // --watch-cache-sizes, by resource[.group]
	cacheBytes     int64            // --watch-cache-memory; derived from --memory-limit when 0
	encryption     encryptionFlags  // --encryption-provider-config[-automatic-reload], --watch-cache-decrypted
	cachePreload   []string         // --watch-cache-preload: "resource[.group]" names, "*" for all; empty: none
	writeTimeout   time.Duration    // --write-timeout
	dataDir        string
	demo           bool
	demoChurn      bool         // --demo-churn: keep changing a few demo objects
	serving        servingFlags // --secure-port, --tls-*, --client-ca-file, --token-auth-file, --anonymous-auth
	audit          auditFlags   // --audit-log-path, --audit-policy-file, --audit-log-max*
	forward        forwardFlags // --upstream-kubeconfig, --max-forwarded-*
	version        bool
	help           bool
	usage          string // flag usage text, printed for --help
}

// Defaults. --list-page-bytes caps the values of one etcd page: the store's
// default, 1 MiB, keeps a page of typical objects (1-2 KiB) at the item limit
// while a LIST of large objects holds about one MiB page at a time (see
// bench/RESULTS.md, proxy section: larger caps raised a LIST's heap rise).
const (
	defaultEtcdPrefix     = store.DefaultPrefix
	defaultBindAddress    = "127.0.0.1"
	defaultPort           = 8080
	defaultListPageSize   = store.DefaultPageSize
	defaultListPageBytes  = store.DefaultPageBytes
	defaultRequestTimeout = proxy.DefaultRequestTimeout
)

// usageError is a bad command line; main exits with status 2 for it.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// defaultDataDir is where the embedded etcd keeps its data when --data-dir is
// not given: <user cache dir>/lazyapi/etcd (e.g. ~/.cache/lazyapi/etcd), or
// ./lazyapi-data when the user has no cache directory.
func defaultDataDir() string {
	if dir, err := os.UserCacheDir(); err == nil && dir != "" {
		return filepath.Join(dir, "lazyapi", "etcd")
	}
	return "lazyapi-data"
}

// parseFlags parses and validates args. Every error names the flag at fault
// and fits on one line.
func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := pflag.NewFlagSet("lazyapi", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false

	var (
		listPageBytes = byteSize(defaultListPageBytes)
		logLevel      string
	)
	fs.StringSliceVar(&c.etcdServers, "etcd-servers", nil,
		"List of etcd servers to connect with (scheme://ip:port), comma separated. Empty: start an embedded etcd in --data-dir.")
	fs.StringVar(&c.etcdPreferred, "etcd-preferred-server", "",
		"The --etcd-servers entry to read from alone while it answers linearizable reads (the local member); the other members that answer serve while it does not. Empty: spread reads over every member that answers.")
	fs.DurationVar(&c.etcdSlow, "etcd-slow-member-margin", store.DefaultSlowMargin,
		"With several --etcd-servers: leave out a member whose linearizable reads (median of 5 probes) take this much longer than, and twice as long as, the fastest member's; 0 turns this off.")
	fs.StringVar(&c.etcdPrefix, "etcd-prefix", defaultEtcdPrefix,
		"The prefix under which kube-apiserver stores Kubernetes resources in etcd.")
	fs.StringVar(&c.etcdCAFile, "etcd-cafile", "", "SSL Certificate Authority file used to secure etcd communication.")
	fs.StringVar(&c.etcdCertFile, "etcd-certfile", "", "SSL certification file used to secure etcd communication.")
	fs.StringVar(&c.etcdKeyFile, "etcd-keyfile", "", "SSL key file used to secure etcd communication.")
	fs.IPVar(&c.bindAddress, "bind-address", net.ParseIP(defaultBindAddress),
		"The IP address on which to listen for --port and --secure-port. Use 0.0.0.0 or :: for all interfaces.")
	fs.IntVar(&c.port, "port", defaultPort,
		"The port on which to serve plain HTTP (no TLS), bound to --bind-address. 0 turns it off. Default 8080 without authentication; off when an authenticator is configured (--client-ca-file, --token-auth-file, --service-account-key-file, --authentication-kubeconfig, --authentication-token-webhook-config-file) unless --port is given.")
	fs.BoolVar(&c.plainTokens, "plain-port-tokens", false,
		"With an authenticator: accept bearer tokens on --port, where they travel in clear text. Default false: a request with an Authorization header on --port is answered 401, and /debug/pprof/ is served on --secure-port only.")
	c.serving.addFlags(fs)
	c.audit.addFlags(fs)
	c.forward.addFlags(fs)
	fs.IntVar(&c.listPageSize, "list-page-size", defaultListPageSize,
		"Maximum number of items read from etcd in one range request of a LIST.")
	fs.Var(&listPageBytes, "list-page-bytes",
		"Target bytes of stored values per etcd range request of a LIST; the next page's item count is chosen from the sizes seen (e.g. 1Mi, 4Mi).")
	fs.DurationVar(&c.requestTimeout, "request-timeout", defaultRequestTimeout,
		"Upper bound on a non-watch request, and on draining in-flight requests at shutdown.")
	fs.BoolVar(&c.compression, "enable-response-compression", true,
		"Compress GET and LIST responses larger than 128 KiB with gzip when the client accepts it (never watches), as kube-apiserver's APIResponseCompression.")
	fs.Var((*byteSize)(&c.memoryLimit), "memory-limit",
		"Memory limit of the process's resident set, e.g. 512Mi or 2Gi: sets GOMEMLIMIT an eighth below it (96Mi to a quarter: the rest of the RSS is the binary's code and data, and the collector's overshoot) and derives the cache and in-flight budgets. 0: leave the Go default or the GOMEMLIMIT environment variable.")
	c.limits = ratelimit.DefaultConfig()
	addLimitFlags(fs, &c.limits)
	var cacheSizes []string
	fs.BoolVar(&c.watchCache, "watch-cache", true,
		"Serve watches from an in-memory cache of stored bytes (one etcd watch per resource); false: every watch watches etcd.")
	fs.StringSliceVar(&cacheSizes, "watch-cache-sizes", nil,
		"Watch cache history sizes in events, comma separated resource[.group]#size (e.g. configmaps#1000,deployments.apps#0); 0 disables caching of that resource.")
	fs.StringSliceVar(&c.cachePreload, "watch-cache-preload", []string{"*"},
		"Resources whose watch cache fills at start, before clients ask, comma separated resource[.group] (e.g. configmaps,deployments.apps); * = every resource (those that do not fit --watch-cache-memory are served from etcd); empty = fill on first use.")
	fs.DurationVar(&c.writeTimeout, "write-timeout", proxy.DefaultWriteTimeout,
		"Longest a streamed response (LIST, watch) may make no write progress (its client takes none of its bytes) before it is aborted and its admission released.")
	fs.Var((*byteSize)(&c.cacheBytes), "watch-cache-memory",
		"Byte budget of the watch cache: values, index and history of all cached resources (quantity). 0 = a quarter of --memory-limit (of 1Gi when unset).")
	fs.BoolVar(&c.profiling, "profiling", false,
		"Serve Go profiles at /debug/pprof/ (authenticated like /metrics). Default false (kube-apiserver's is true).")
	c.encryption.addFlags(fs)
	fs.StringVar(&logLevel, "log-level", "info", "Log level: debug, info, warn or error. Logs go to stderr.")
	fs.StringVar(&c.logFormat, "logging-format", "text", "Log format of stderr: text (one readable line per entry) or json (one JSON object per line, for log pipelines).")
	fs.StringVar(&c.dataDir, "data-dir", defaultDataDir(),
		"Data directory of the embedded etcd (used only without --etcd-servers).")
	fs.BoolVar(&c.demo, "demo", false,
		"Seed an empty embedded etcd with demo objects (namespaces, ~1,000 ConfigMaps, a Deployment, a CRD, ...).")
	fs.BoolVar(&c.demoChurn, "demo-churn", true,
		"With --demo: keep the demo cluster alive: every 2s a ConfigMap in demo-app changes; Events, the Deployment's status and the node Lease follow (kubectl get -w shows them). false: static data.")
	fs.BoolVar(&c.version, "version", false, "Print the version and exit.")
	fs.BoolVarP(&c.help, "help", "h", false, "Print this help and exit.")
	c.usage = "Usage: lazyapi [flags]\n\nlazyapi serves the Kubernetes read API (GET, LIST, WATCH) from the bytes kube-apiserver stored in etcd.\n\nFlags:\n" + fs.FlagUsages()

	if err := fs.Parse(args); err != nil {
		return nil, usageErrorf("%v (see --help)", err)
	}
	if fs.NArg() > 0 {
		return nil, usageErrorf("unexpected argument %q: lazyapi takes only flags (see --help)", fs.Arg(0))
	}
	if c.help || c.version {
		return c, nil
	}

	c.etcdServers = trimEmpty(c.etcdServers)
	for _, s := range c.etcdServers {
		if !strings.Contains(s, "://") {
			return nil, usageErrorf("invalid --etcd-servers entry %q: want scheme://host:port, e.g. http://127.0.0.1:2379", s)
		}
	}
	if c.etcdPreferred = strings.TrimSpace(c.etcdPreferred); c.etcdPreferred != "" && !slices.Contains(c.etcdServers, c.etcdPreferred) {
		return nil, usageErrorf("invalid --etcd-preferred-server %q: must be one of --etcd-servers (%s)", c.etcdPreferred, strings.Join(c.etcdServers, ","))
	}
	if c.etcdSlow < 0 {
		return nil, usageErrorf("invalid --etcd-slow-member-margin %s: must not be negative (0 turns it off)", c.etcdSlow)
	}
	if strings.TrimSpace(c.etcdPrefix) == "" {
		return nil, usageErrorf("invalid --etcd-prefix: must not be empty")
	}
	c.etcdPrefix = store.NormalizePrefix(c.etcdPrefix)
	if c.port < 0 || c.port > 65535 {
		return nil, usageErrorf("invalid --port %d: must be between 0 and 65535", c.port)
	}
	if c.listPageSize <= 0 {
		return nil, usageErrorf("invalid --list-page-size %d: must be greater than 0", c.listPageSize)
	}
	c.listPageBytes = int(listPageBytes)
	if c.listPageBytes <= 0 {
		return nil, usageErrorf("invalid --list-page-bytes %d: must be greater than 0", c.listPageBytes)
	}
	if c.requestTimeout <= 0 {
		return nil, usageErrorf("invalid --request-timeout %s: must be greater than 0", c.requestTimeout)
	}
	if !fs.Changed("max-queue-wait") {
		// As kube-apiserver's APF (getRequestWaitContext): a request
		// waits for admission at most a quarter of its deadline, so that
		// once admitted it has the rest to be served (the request timeout
		// counts from before admission).
		c.limits.MaxQueueWait = min(c.limits.MaxQueueWait, c.requestTimeout/4)
	}
	if err := c.logLevel.Set(logLevel); err != nil || c.logLevel < zapcore.DebugLevel || c.logLevel > zapcore.ErrorLevel {
		return nil, usageErrorf("invalid --log-level %q: want debug, info, warn or error", logLevel)
	}
	if c.logFormat != "text" && c.logFormat != "json" {
		return nil, usageErrorf("invalid --logging-format %q: want text or json", c.logFormat)
	}
	if c.writeTimeout <= 0 {
		return nil, usageErrorf("invalid --write-timeout %s: must be greater than 0", c.writeTimeout)
	}
	c.cachePreload = trimEmpty(c.cachePreload)
	for i, n := range c.cachePreload {
		c.cachePreload[i] = strings.ToLower(n)
		if strings.ContainsAny(n, "#/ ") {
			return nil, usageErrorf("invalid --watch-cache-preload entry %q: want resource[.group] or *", n)
		}
	}
	sizes, err := parseWatchCacheSizes(cacheSizes)
	if err != nil {
		return nil, usageError{err}
	}
	c.cacheSizes = sizes
	if c.cacheBytes == 0 {
		c.cacheBytes = ratelimit.DefaultCacheBytes(c.memoryLimit)
	}
	if c.limits.MaxInflightBytes == 0 {
		// Half the memory limit minus the cache's budget (none when off).
		cacheBytes := c.cacheBytes
		if !c.watchCache {
			cacheBytes = 0
		}
		v, err := ratelimit.DefaultInflightBytes(c.memoryLimit, cacheBytes)
		if err != nil {
			return nil, usageErrorf("%v; raise --memory-limit, lower --watch-cache-memory or set --max-inflight-bytes", limitError(err))
		}
		if r := c.forward.reservedBytes(); r > 0 {
			// Forwarded requests count in --memory-limit: their
			// reserve comes out of the in-flight budget.
			if r > v/2 {
				return nil, usageErrorf("--upstream-kubeconfig: the forwarded requests' reserve (%s: --max-forwarded-requests-inflight + --max-forwarded-streams-inflight, 96 KiB each) is more than half the in-flight budget (%s); raise --memory-limit or lower them", quantity(r), quantity(v))
			}
			v -= r
		}
		c.limits.MaxInflightBytes = v
	}
	if c.demo && len(c.etcdServers) > 0 {
		return nil, usageErrorf("--demo seeds only the embedded etcd: drop --etcd-servers or --demo")
	}
	if len(c.etcdServers) == 0 && strings.TrimSpace(c.dataDir) == "" {
		return nil, usageErrorf("invalid --data-dir: must not be empty when --etcd-servers is not set")
	}
	if err := c.encryption.validate(); err != nil {
		return nil, err
	}
	if err := c.serving.validate(); err != nil {
		return nil, err
	}
	if err := c.validatePlainPort(fs.Changed("port")); err != nil {
		return nil, err
	}
	if err := c.audit.validate(); err != nil {
		return nil, err
	}
	if err := c.forward.validate(); err != nil {
		return nil, err
	}
	tlsCfg, err := etcdTLS(c)
	if err != nil {
		return nil, err
	}
	c.etcdTLS = tlsCfg
	return c, nil
}

// validatePlainPort applies the plain port's rule: with an authenticator
// configured, --port is off unless given (credentials sent to it travel in
// clear text; kube-apiserver has no insecure port), and takes no bearer
// tokens unless --plain-port-tokens. portGiven says --port was on the
// command line.
func (c *config) validatePlainPort(portGiven bool) error {
	authenticated := c.serving.authenticated()
	if authenticated && !portGiven {
		c.port = 0
	}
	if c.port == 0 && c.serving.securePort == 0 {
		if authenticated && !portGiven {
			return usageErrorf("nothing to serve on: with an authenticator --port is off unless given; add --secure-port with --tls-cert-file and --tls-private-key-file (or give --port, plain HTTP)")
		}
		return usageErrorf("nothing to serve on: --port and --secure-port are both 0 (off)")
	}
	if c.port != 0 && c.serving.securePort == c.port {
		return usageErrorf("invalid --secure-port %d: --port is the same port", c.port)
	}
	if c.plainTokens && c.port == 0 {
		return usageErrorf("--plain-port-tokens needs --port")
	}
	return nil
}

// etcdTLS loads the --etcd-* TLS files. It returns nil when none is given.
func etcdTLS(c *config) (*tls.Config, error) {
	if c.etcdCAFile == "" && c.etcdCertFile == "" && c.etcdKeyFile == "" {
		return nil, nil
	}
	if len(c.etcdServers) == 0 {
		return nil, usageErrorf("--etcd-cafile, --etcd-certfile and --etcd-keyfile need --etcd-servers (the embedded etcd is plain HTTP on loopback)")
	}
	if (c.etcdCertFile == "") != (c.etcdKeyFile == "") {
		return nil, usageErrorf("--etcd-certfile and --etcd-keyfile must be given together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.etcdCAFile != "" {
		if _, err := os.Stat(c.etcdCAFile); err != nil {
			return nil, usageErrorf("cannot read --etcd-cafile: %v", err)
		}
		cas, err := certfile.LoadCAs(c.etcdCAFile)
		if err != nil {
			return nil, usageErrorf("cannot use --etcd-cafile %q: %v", c.etcdCAFile, err)
		}
		c.etcdCAs = cas
		// The CA is reloaded on change: Go's TLS client cannot swap
		// RootCAs, so the chain and name are verified by VerifyConnection
		// against the pool in force.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = cas.VerifyServer()
	}
	if c.etcdCertFile != "" {
		for _, f := range []struct{ flag, path string }{{"--etcd-certfile", c.etcdCertFile}, {"--etcd-keyfile", c.etcdKeyFile}} {
			if _, err := os.Stat(f.path); err != nil {
				return nil, usageErrorf("cannot read %s: %v", f.flag, err)
			}
		}
		kp, err := certfile.LoadKeyPair(c.etcdCertFile, c.etcdKeyFile)
		if err != nil {
			return nil, usageErrorf("cannot load --etcd-certfile/--etcd-keyfile: %v", err)
		}
		c.etcdKeyPair = kp
		// New connections (reconnects) present the certificate in force.
		cfg.GetClientCertificate = kp.GetClientCertificate
	}
	return cfg, nil
}

func trimEmpty(ss []string) []string {
	out := ss[:0]
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseWatchCacheSizes parses kube-apiserver's --watch-cache-sizes values,
// each "resource[.group]#size" (e.g. "configmaps#1000",
// "deployments.apps#0"; 0 disables caching of that resource). The result
// goes to Config.Sizes.
func parseWatchCacheSizes(values []string) (map[string]int, error) {
	out := make(map[string]int, len(values))
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		name, size, ok := strings.Cut(v, "#")
		if !ok || name == "" {
			return nil, fmt.Errorf("cannot parse --watch-cache-sizes %q: want resource[.group]#size", v)
		}
		n, err := strconv.Atoi(size)
		if err != nil {
			return nil, fmt.Errorf("cannot parse --watch-cache-sizes %q: size: %w", v, err)
		}
		if n < 0 {
			return nil, fmt.Errorf("cannot parse --watch-cache-sizes %q: size must be >= 0", v)
		}
		out[strings.ToLower(name)] = n
	}
	return out, nil
}

// preloadFilter returns the PreloadCache filter of --watch-cache-preload:
// nil (all) for "*", else membership in the list.
func (c *config) preloadFilter() func(string) bool {
	set := make(map[string]bool, len(c.cachePreload))
	for _, n := range c.cachePreload {
		if n == "*" {
			return nil
		}
		set[n] = true
	}
	return func(name string) bool { return set[name] }
}
