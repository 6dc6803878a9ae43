// Package proxy is lazyapi's HTTP server: it routes Kubernetes API read
// requests, negotiates the response format, and streams objects from etcd
// (through store and codec) to the socket; it also serves discovery,
// health and metrics.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/pprofhandler"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/audit"
	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/openapi"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/estimate"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/ratelimit"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// Config configures a Server. Every field has a comment; zero values get
// defaults in New.
type Config struct {
	// Store reads etcd (pages, revisions, the prefix). Nil means a store
	// with store's defaults on Client; callers with settings (cmd/lazyapi's
	// --etcd-prefix, --list-page-size, ...) build it and pass it here.
	Store *store.Store
	// Client watches etcd (watches not served by Cache); nil means Store's
	// client. One of Client and Store is required.
	Client *clientv3.Client
	// RequestTimeout bounds non-watch requests (--request-timeout); 0 means
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// ReadTimeout bounds reading a request's header, from its first byte
	// (conn.Gate); 0 means 30s. A body is read by the handler that
	// needs it, after authentication and authorization, within
	// RequestTimeout.
	ReadTimeout time.Duration
	// HeaderBufferBytes bounds the bytes of request headers that all
	// connections hold at once beyond each connection's first 4 KiB,
	// before the header is complete (before authentication); a header
	// that cannot grow within it is answered 429 (conn.Budget). 0
	// means DefaultHeaderBufferBytes.
	HeaderBufferBytes int64
	// WriteTimeout bounds each write of a response (--write-timeout): a
	// flush that a client does not take within it ends the response and
	// releases its admission (proxy/conn/writeguard.go). 0 means 10s.
	WriteTimeout time.Duration
	// EtcdWatchLagBytes bounds the bytes of etcd's events (keys, values
	// and previous values) a watch served from etcd holds for a client
	// that does not take them: past it the watch ends and the client
	// re-watches (etcdFeed); with a Limiter they are charged to the
	// watch's admission too, and a watch they do not fit is ended the
	// same way. 0 means DefaultEtcdWatchLagBytes, the watch cache's bound
	// on a watcher's lag (cache.Config.WatcherLagBytes).
	EtcdWatchLagBytes int64
	// Resources is the resource table. Required.
	Resources *resource.Table
	// ServesWrites says that what lazyapi does not serve from etcd is
	// forwarded to kube-apiserver (forwarding mode sets it). Then
	// discovery and OpenAPI advertise what kube-apiserver advertises
	// (every verb, subresource and resource, the reviews, create-only
	// resources) and self reviews allow every verb RBAC allows; otherwise
	// they advertise the read verbs only, and self reviews say no to the
	// rest (Resources.SetServesWrites is set from it in New).
	ServesWrites bool
	// Logger logs failures; nil discards.
	Logger *zap.Logger
	// Metrics receives the server's metrics and is served at /metrics with
	// process metrics; nil creates a private set.
	Metrics *metrics.Set
	// Schema decodes built-in types; nil means codec.DefaultSchema().
	Schema *codec.Schema
	// Cache, when set, serves GETs, LISTs and watches of cached, ready
	// resources; others are read and watched in etcd directly. The caller
	// closes it.
	Cache *cache.Cache
	// Limiter, when set, admits every GET and LIST after routing and before
	// any etcd read, with an estimate of its working set (one page + write
	// buffers); a refusal is answered 429 with Retry-After. Watches are
	// admitted too, with a small estimate held for their lifetime.
	Limiter *ratelimit.Limiter
	// Admit, when set, is an extra admission step (e.g. authorization)
	// called for every GET and LIST after routing and Limiter, before any
	// etcd read. It returns a release function called when the response is
	// complete (after the last byte of a stream), or an error answered as a
	// Status (a *StatusError keeps its code; others become 429).
	// ri is the resolved request (Entry set); the hook must not keep it.
	Admit func(rc *fasthttp.RequestCtx, ri *RequestInfo) (release func(), err error)
	// Profiling serves Go's profiles at /debug/pprof/ (--profiling),
	// authenticated like /metrics. Off by default: a CPU profile or trace
	// costs CPU while it runs and a heap profile shows object contents'
	// sizes.
	Profiling bool
	// OpenAPI serves /openapi/v2 and /openapi/v3; nil makes one from
	// Resources with NewOpenAPI (then CRDs loaded before New have no
	// OpenAPI documents until they change: call NewOpenAPI before
	// Resources.StartCRDSync and pass it here).
	OpenAPI *openapi.Service
	// DisableCompression turns gzip of large GET and LIST responses off
	// (--enable-response-compression=false); by default they are
	// compressed as kube-apiserver's (proxy/conn/gzip.go).
	DisableCompression bool
	// Authenticator, when enabled, authenticates every request except the
	// health endpoints and /version (authn.go); a request it refuses gets
	// 401 Unauthorized. The user's name becomes the rate limiter's
	// fairness key. Nil (or not Enabled) serves everyone, keyed by IP.
	Authenticator *authn.Authenticator
	// Authorizer, when set, authorizes every request that is
	// authenticated (all but the health endpoints and /version) with
	// kube-apiserver's request attributes (authz.go); a refusal is 403
	// Forbidden. Nil allows every authenticated request.
	Authorizer *authz.Chain
	// Encryption, when set, decrypts values encrypted at rest
	// (--encryption-provider-config) where they leave etcd or the watch
	// cache (decrypt.go); its KMS plugins' health is part of /readyz.
	Encryption *encryption.Transformers
	// CacheDecrypted says Cache holds decrypted values
	// (cache.Config.HoldDecrypted, --watch-cache-decrypted).
	CacheDecrypted bool
	// Audit, when set, receives an audit.k8s.io/v1 Event for every request
	// its policy logs (audit.go, --audit-log-path).
	Audit *audit.Log
	// Forward, when set, forwards to kube-apiserver, as the caller, every
	// authenticated request lazyapi does not serve itself (forward.go,
	// --upstream-kubeconfig): writes, connect subresources, groups it
	// does not store. /readyz/kube-apiserver reports it (not counted in
	// /readyz: reads are served without it).
	Forward *forward.Forwarder
	// EtcdFailover, when set, says where the etcd client reads
	// (store.Failover): /readyz?verbose says when etcd members are left
	// out (etcd-members degraded).
	EtcdFailover func() store.FailoverStatus
}

// StatusError is an error answered with a specific Status.
type StatusError struct {
	Status     codec.Status
	RetryAfter int // seconds; 0: no Retry-After header
}

func (e *StatusError) Error() string { return e.Status.Message }

// Server serves the Kubernetes read API from etcd. Create it with New; it is
// safe for concurrent use.
type Server struct {
	// impModes is the impersonation mode that last allowed each
	// requestor (impersonate.go).
	impModes impModeCache
	// compactRev is the revision kube-apiserver last compacted etcd to
	// (compaction.go); bg runs trackCompaction.
	compactRev atomic.Int64
	bg         sync.WaitGroup
	// hang notices the hang-ups of watches' clients (hangups), started
	// by the first watch, closed by Shutdown.
	hangOnce sync.Once
	hang     atomic.Pointer[conn.Hangups]

	cfg    Config
	store  *store.Store
	schema *codec.Schema
	log    *zap.Logger
	ms     *metrics.Set
	srv    *fasthttp.Server
	prefix string

	// health caches the etcd readiness check.
	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
	// etcdDownAt is when etcd last failed to answer (unix ns); requests
	// within etcdDownHold of it get 503 at once instead of waiting.
	etcdDownAt atomic.Int64
	decodeErrs *metrics.Counter
	passthru   *metrics.Counter
	transcoded *metrics.Counter
	panics     *metrics.Counter
	// listRestarts counts LISTs read again at etcd's current revision
	// after a compaction of the one they chose (prepareList).
	listRestarts *metrics.Counter
	// sizes, with Config.Encryption, remembers the plaintext sizes of
	// values a protobuf LIST from etcd decrypted (estimate.SizeMemo).
	sizes *estimate.SizeMemo

	// stats are the collection statistics (estimate.Stats): average value
	// sizes, collection sizes, response sizes.
	stats *estimate.Stats
	// frames shares encoded watch frames among watchers (watchframes.go).
	frames *frameCache
	// scans shares the etcd reads of concurrent watches' initial states
	// (sharedscan.go); nil: every watch reads its own.
	scans *scanGroups
	// lists shares the etcd reads of concurrent identical LISTs
	// (sharedlist.go); nil: every LIST reads its own.
	lists *listGroups
	// headers bounds the header buffers of connections not yet
	// authenticated (conn.Budget).
	headers *conn.Budget
	// initialRun bounds the watches encoding initial events at once
	// (watchWriter.run): a reconnect storm's encoders leave the other
	// cores' run queues to short requests.
	initialRun chan struct{}
	// render keeps JSON renderings of hot objects (rendercache.go); nil
	// without a watch cache budget.
	render *renderCache
	// authn counts authentication results (authn.go).
	authn authnMetrics
	// openapi holds the OpenAPI documents (openapi.go).
	openapi *openapi.Service
	// fillWaits and fillTimeouts count requests that waited for a watch
	// cache fill and those that got 429 (fill.go); aborted counts streams
	// ended for making no write progress or overrunning
	// the request timeout (progress.go); rateLog rate-limits their logs.
	fillWaits, fillTimeouts *metrics.Counter
	aborted                 *aborts
	rateLog                 rateLog

	baseCtx    context.Context
	baseCancel context.CancelFunc
	// watchCtx is the parent of every watch's context, cancelled when
	// Shutdown starts (fasthttp's RequestCtx.Done): one context for all
	// watches rather than a goroutine per watch waiting for RequestCtx.Done
	// (~4 KiB of stack of each idle watch's ~25 KiB).
	watchCtx    context.Context
	watchCancel context.CancelFunc
}

// DefaultHeaderBufferBytes is Config.HeaderBufferBytes's default: 64
// headers of kube-apiserver's largest (1 MiB) arriving at once.
const DefaultHeaderBufferBytes = conn.DefaultHeaderBufferBytes

// DefaultRequestTimeout is Config.RequestTimeout's default, kube-apiserver's
// --request-timeout.
const DefaultRequestTimeout = time.Minute

// New validates cfg and returns a Server. It does not listen.
func New(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		schema: cfg.Schema,
		log:    cfg.Logger,
		ms:     cfg.Metrics,
		prefix: cfg.Store.Config().Prefix,
		store:  cfg.Store,
		stats:  estimate.NewStats(estimate.MaxCollections),
	}
	s.baseCtx, s.baseCancel = context.WithCancel(context.Background())
	s.watchCtx, s.watchCancel = context.WithCancel(s.baseCtx)
	s.decodeErrs = s.ms.GetOrCreateCounter("lazyapi_decode_errors_total")
	s.passthru = s.ms.GetOrCreateCounter(`lazyapi_objects_served_total{path="passthrough"}`)
	s.transcoded = s.ms.GetOrCreateCounter(`lazyapi_objects_served_total{path="transcoded"}`)
	s.panics = s.ms.GetOrCreateCounter("lazyapi_handler_panics_total")
	s.listRestarts = s.ms.GetOrCreateCounter("lazyapi_list_restarts_total")
	s.frames = newFrameCache(s.ms, frameCacheBytes)
	s.scans = newScanGroups(s.ms)
	s.lists = newListGroups(s.ms)
	if cfg.Encryption != nil {
		s.sizes = estimate.NewSizeMemo(s.ms)
	}
	s.initialRun = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))
	// Renderings of objects encrypted at rest would keep plaintext beyond
	// the request: they are not kept unless --watch-cache-decrypted
	// (renderOf).
	s.render = newRenderCache(s.ms, cfg.Cache)
	if cfg.Cache != nil {
		cfg.Resources.OnChange(s.dropUnserved)
	}
	s.fillWaits = s.ms.GetOrCreateCounter(`lazyapi_cache_fill_waits_total{result="served"}`)
	s.fillTimeouts = s.ms.GetOrCreateCounter(`lazyapi_cache_fill_waits_total{result="timeout"}`)
	s.aborted = newAborts(s.ms, &s.rateLog, &s.cfg)
	s.ms.GetOrCreateGauge("lazyapi_write_coalesce_buffer_bytes", func() float64 { return float64(conn.CoalesceInUse()) })
	s.rateLog.log = cfg.Logger
	s.headers = conn.NewBudget(s.ms, cfg.HeaderBufferBytes)
	s.initAuthn()
	// Before the OpenAPI documents are first built: they follow the
	// table's mode.
	if cfg.Forward != nil {
		cfg.ServesWrites = true // what is not served here is forwarded
		s.cfg.ServesWrites = true
	}
	cfg.Resources.SetServesWrites(cfg.ServesWrites)
	s.openapi = cfg.OpenAPI
	if s.openapi == nil {
		s.openapi = NewOpenAPI(cfg.Resources)
	}
	s.srv = s.newHTTPServer()
	return s, nil
}

// setDefaults checks c and fills what it leaves unset: the store or its
// client (one from the other), the timeouts, the header buffer, the
// logger, the metrics set and the schema.
func (c *Config) setDefaults() error {
	if c.Store == nil && c.Client == nil {
		return errors.New("cannot create proxy: Config.Store and Config.Client are nil")
	}
	exposeMetadata() // /metrics carries # HELP and # TYPE (process-wide)
	if c.Store == nil {
		c.Store = store.New(c.Client, store.Config{Metrics: c.Metrics})
	}
	if c.Client == nil {
		c.Client = c.Store.Client()
	}
	if c.Resources == nil {
		return errors.New("cannot create proxy: Config.Resources is nil")
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.EtcdWatchLagBytes <= 0 {
		c.EtcdWatchLagBytes = DefaultEtcdWatchLagBytes
	}
	if c.HeaderBufferBytes <= 0 {
		c.HeaderBufferBytes = DefaultHeaderBufferBytes
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Schema == nil {
		c.Schema = codec.DefaultSchema()
	}
	return nil
}

// newHTTPServer is the fasthttp server that serves s's connections.
func (s *Server) newHTTPServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                       s.handle,
		Name:                          "lazyapi",
		NoDefaultServerHeader:         true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		// Bodies never reach fasthttp: the conn.Gate withholds them
		// for the handlers that read them (requestBody).
		MaxRequestBodySize: maxRequestBody,
		// Request headers up to what Go's server accepts for
		// kube-apiserver (MaxHeaderBytes 1 MiB, plus the 4 KiB Go adds):
		// long label selectors, large OIDC tokens. fasthttp needs the
		// whole header in its read buffer, so the buffer is that large;
		// ReduceMemoryUsage takes it only while a request is being read
		// (not while a connection is idle or its response is written),
		// so idle connections cost no more than before (bench/RESULTS.md
		// ## request headers).
		ReadBufferSize:    conn.MaxHeaderBytes,
		ReduceMemoryUsage: true,
		ErrorHandler:      goErrorHandler,
		ReadTimeout:       s.cfg.ReadTimeout,  // reading a request; --request-timeout bounds serving it
		WriteTimeout:      s.cfg.WriteTimeout, // per response fasthttp writes; streams re-arm it per flush
		IdleTimeout:       90 * time.Second,
		Logger:            fasthttpLogger{s.cfg.Logger},
		CloseOnShutdown:   true,
	}
}

// Serve accepts connections on ln until Shutdown. It returns nil after
// Shutdown, else the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.Cache != nil {
		s.ms.GetOrCreateGauge("lazyapi_etcd_compaction_revision", func() float64 { return float64(s.compactRev.Load()) })
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.trackCompaction(s.baseCtx)
		}()
	}
	// Shutdown closes the listeners fasthttp registered; one whose Serve
	// had not registered it yet (a shutdown right after start) is closed
	// here, or Serve would accept forever.
	stop := context.AfterFunc(s.baseCtx, func() { ln.Close() })
	defer stop()
	inner, clear := conn.UnwrapClearText(ln)
	err := s.srv.Serve(conn.Listener{Listener: inner, Clear: clear, HeaderTimeout: s.cfg.ReadTimeout, Budget: s.headers})
	if s.baseCtx.Err() != nil {
		return nil
	}
	return err
}

// Shutdown stops accepting connections and waits for in-flight requests to
// finish or ctx to end; then it cancels the requests still running.
func (s *Server) Shutdown(ctx context.Context) error {
	// Mark shutdown first so that Serve returns nil.
	done := make(chan error, 1)
	go func() { done <- s.srv.ShutdownWithContext(ctx) }()
	// Watches end as shutdown starts (they would keep their connections
	// open until ctx ends).
	s.watchCancel()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.baseCancel()
	s.bg.Wait()
	s.render.close()
	// Called once the watches are over (a later one reads its
	// connection): Hangups.Close is idempotent, and after it Notify says
	// no.
	s.hangups().Close()
	return err
}

// maxRequestBody is the largest request body a handler reads (a self
// review's is under a kilobyte). kube-apiserver's is 3 MiB
// (MaxRequestBodyBytes), for writes lazyapi does not serve.
const maxRequestBody = 1 << 20

// finishBody ends the connection with the response when the request's
// body was not read and cannot be skipped before the next request (a
// chunked body, more than 256 KiB left, or a client waiting for 100
// Continue: conn.Gate.BodyEndsConn), as Go's server does.
func finishBody(rc *fasthttp.RequestCtx) {
	if g := conn.GateOf(rc.Conn()); g != nil && g.BodyEndsConn() {
		rc.SetConnectionClose()
		g.EndWithUnreadBody()
	}
}

// requestBody reads the body of an authorized request, in chunks as it
// arrives, up to maxRequestBody: a larger one is refused 413 as
// kube-apiserver does (RequestEntityTooLarge), without reading it.
func requestBody(rc *fasthttp.RequestCtx) ([]byte, *StatusError) {
	g := conn.GateOf(rc.Conn())
	if g == nil {
		return rc.Request.Body(), nil // not served through Serve (tests)
	}
	length, chunked := g.Withheld()
	tooLarge := statusErr(fasthttp.StatusRequestEntityTooLarge, "RequestEntityTooLarge",
		fmt.Sprintf("Request entity too large: limit is %d", maxRequestBody))
	if length > maxRequestBody {
		return nil, tooLarge
	}
	r := g.Body()
	if chunked {
		r = httputil.NewChunkedReader(bufio.NewReaderSize(r, 4<<10))
	}
	var out []byte
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		out = append(out, chunk[:n]...)
		if len(out) > maxRequestBody {
			return nil, tooLarge
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, badRequestErr(fmt.Sprintf("cannot read the request body: %v", err))
		}
	}
}

// goErrorHandler answers requests fasthttp cannot parse as Go's server
// (kube-apiserver's) does: a plain-text status line as body.
func goErrorHandler(rc *fasthttp.RequestCtx, err error) {
	code := fasthttp.StatusBadRequest
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.As(err, &small):
		code = fasthttp.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		code = fasthttp.StatusRequestEntityTooLarge
	case errors.As(err, &ne) && ne.Timeout():
		code = fasthttp.StatusRequestTimeout
	}
	rc.Response.Reset()
	rc.SetStatusCode(code)
	rc.SetContentType("text/plain; charset=utf-8")
	rc.SetBodyString(strconv.Itoa(code) + " " + fasthttp.StatusMessage(code))
}

type fasthttpLogger struct{ l *zap.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.l.Debug(fmt.Sprintf(format, args...))
}

// handle is the fasthttp handler: it dispatches on the path.
func (s *Server) handle(rc *fasthttp.RequestCtx) {
	defer s.recoverPanic(rc)
	// Set last: writeStatus resets the response's headers.
	defer finishBody(rc)
	path, rawQuery, ok := request.DecodePath(rc.RequestURI())
	if !ok {
		// What Go's server (kube-apiserver's) answers a request line it
		// cannot parse; the handler never sees it.
		rc.Response.Reset()
		rc.SetStatusCode(fasthttp.StatusBadRequest)
		rc.SetContentType("text/plain; charset=utf-8")
		rc.SetBodyString("400 Bad Request")
		rc.SetConnectionClose()
		return
	}
	defer s.auditRequest(rc, path, rawQuery)()
	// The request is resolved once, after authentication: authorization
	// and serving read ri only (requestinfo.go). Public paths (health,
	// /version) are not resource paths: the zero ri.
	var ri RequestInfo
	if !publicPath(path) {
		if !s.authenticate(rc) {
			return
		}
		request.Resolve(&ri, bytesutil.ToUnsafeString(rc.Method()), path, rawQuery)
		if ri.Err != nil {
			// kube-apiserver's WithRequestInfo filter answers 500 (before
			// authentication there; after it here, so that nothing is
			// resolved for an unauthenticated client).
			internalErrorText(rc, fmt.Errorf("failed to create RequestInfo: %w, %s", ri.Err, rc.RequestURI()))
			return
		}
		if s.forwardsFirst(rc, path) && s.serveUpstreamFirst(rc, &ri) {
			return
		}
		if s.forwards(rc, &ri, path) {
			// kube-apiserver authorizes what it is sent as the caller.
			s.forward(rc, &ri)
			return
		}
		if !publicInfoPath(path) && !s.authorize(rc, &ri) {
			return
		}
	}
	switch {
	case selfReviewPath(path):
		if !rc.IsPost() {
			// Create-only: kube-apiserver registers no other method and
			// answers this Status.
			s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), &StatusError{Status: codec.Status{Code: 405,
				Reason: "MethodNotAllowed", Message: "the server does not allow this method on the requested resource",
				Details: &codec.StatusDetails{}}})
			return
		}
		s.serveSelfReview(rc, path)
		return
	case healthPath(path):
		s.serveHealth(rc, path)
		return
	case path == "/metrics":
		s.serveMetrics(rc)
		return
	case s.cfg.Profiling && (path == "/debug/pprof" || strings.HasPrefix(path, "/debug/pprof/")) && connClearMode(rc) == conn.Trusted:
		if path == "/debug/pprof" {
			rc.Redirect("/debug/pprof/", fasthttp.StatusMovedPermanently)
			return
		}
		pprofhandler.PprofHandler(rc)
		return
	case path == "/openapi/v2" || path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/"):
		s.serveOpenAPI(rc, &ri)
		return
	}
	if ri.RouteOK {
		s.serveResource(rc, &ri)
		return
	}
	s.serveDiscovery(rc, path)
}

// recoverPanic turns a panic in a handler (a bug, e.g. in codec on odd
// input) into a 500 Status and a log line instead of a crashed process.
func (s *Server) recoverPanic(rc *fasthttp.RequestCtx) {
	if v := recover(); v != nil {
		s.panics.Inc()
		s.log.Error("panic serving request", zap.ByteString("uri", rc.RequestURI()), zap.Any("panic", v), zap.Stack("stack"))
		s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), internalErr(fmt.Sprintf("panic: %v", v)))
	}
}
