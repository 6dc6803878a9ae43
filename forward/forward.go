package forward

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// Forwarder forwards requests to kube-apiserver as their callers. Create
// it with New; it is safe for concurrent use.
type Forwarder struct {
	cfg      Config
	upstream string // scheme://host[/prefix], no trailing slash
	tr       *http.Transport
	short    *seats
	streams  *seats
	log      *zap.Logger
	ms       *metrics.Set

	// downAt is when kube-apiserver last failed to answer (unix ns):
	// requests within downHold of it get 503 at once.
	downAt atomic.Int64
	// health caches Check's result for healthTTL; probe is closed when
	// the probe in flight ends (nil: none). All protected by healthMu.
	healthMu  sync.Mutex
	healthAt  time.Time
	healthErr error
	probe     chan struct{}

	upBytes, downBytes, upstreamErrs *metrics.Counter
}

// downHold is how long after kube-apiserver failed to answer forwarded
// requests are answered 503 without dialing it (etcdDownHold's twin).
const downHold = time.Second

// healthTTL is how long Check's result is reused.
const healthTTL = time.Second

// healthWait is how long Check waits for kube-apiserver's /readyz: a
// kubelet probe of lazyapi's /readyz (1 s by default) must not wait for a
// kube-apiserver that does not answer.
const healthWait = 500 * time.Millisecond

// New validates cfg and returns a Forwarder. Nothing is sent.
func New(cfg Config) (*Forwarder, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	var tc *tls.Config
	if cfg.Upstream.Scheme == "https" {
		if cfg.TLS == nil {
			return nil, errors.New("cannot forward: Config.TLS is nil for an https Upstream")
		}
		if len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetClientCertificate == nil {
			return nil, errors.New("cannot forward: Config.TLS has no client certificate (the front-proxy credential)")
		}
		tc = cfg.TLS.Clone()
		// HTTP/1.1 only: an upgrade (exec, port-forward) is an HTTP/1.1
		// request, and one connection per request keeps a stream's cost
		// its own (ReservedBytes).
		tc.NextProtos = []string{"http/1.1"}
	}
	d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	f := &Forwarder{
		cfg:      cfg,
		upstream: strings.TrimSuffix(cfg.Upstream.Scheme+"://"+cfg.Upstream.Host+cfg.Upstream.EscapedPath(), "/"),
		tr: &http.Transport{
			DialContext:         d.DialContext,
			TLSClientConfig:     tc,
			TLSHandshakeTimeout: cfg.DialTimeout,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
			MaxIdleConns:        cfg.MaxShort,
			MaxIdleConnsPerHost: cfg.MaxShort,
			IdleConnTimeout:     90 * time.Second,
			// Accept-Encoding is the caller's, and the body is passed
			// on as it comes (gzip included).
			DisableCompression: true,
		},
		log: cfg.Logger,
		ms:  cfg.Metrics,
	}
	f.short = newSeats(f.ms, "short", cfg.MaxShort, cfg.ClientShare)
	f.streams = newSeats(f.ms, "stream", cfg.MaxStreams, cfg.ClientShare)
	f.upBytes = f.ms.GetOrCreateCounter(`lazyapi_forwarded_bytes_total{direction="upstream"}`)
	f.downBytes = f.ms.GetOrCreateCounter(`lazyapi_forwarded_bytes_total{direction="downstream"}`)
	f.upstreamErrs = f.ms.GetOrCreateCounter(`lazyapi_forward_upstream_errors_total`)
	f.ms.GetOrCreateGauge(`lazyapi_forward_reserved_bytes`, func() float64 { return float64(f.ReservedBytes()) })
	return f, nil
}

// DialTimeout is Config.DialTimeout: the connect bound.
func (f *Forwarder) DialTimeout() time.Duration { return f.cfg.DialTimeout }

// Upstream is kube-apiserver's URL, for logs and Status messages.
func (f *Forwarder) Upstream() string { return f.upstream }

// ReservedBytes is what the forwarded requests in flight hold (their
// seats times Config.ReservedBytes).
func (f *Forwarder) ReservedBytes() int64 {
	return int64(f.short.inUse()+f.streams.inUse()) * f.cfg.ReservedBytes
}

// MaxReservedBytes is the most ReservedBytes can be: what the memory
// budget sets aside for forwarding.
func (f *Forwarder) MaxReservedBytes() int64 {
	return int64(f.cfg.MaxShort+f.cfg.MaxStreams) * f.cfg.ReservedBytes
}

// Close closes idle upstream connections.
func (f *Forwarder) Close() { f.tr.CloseIdleConnections() }

// Request is what the server knows of a request it forwards, beyond the
// request itself (method, request URI, headers: the RequestCtx).
type Request struct {
	// Identity is the caller, authenticated by lazyapi (its
	// Impersonate-* headers go with it, for kube-apiserver to check).
	Identity Identity
	// Client is the caller's fairness key (its user or its address).
	Client string
	// ClientIP is the caller's address, appended to X-Forwarded-For.
	ClientIP string
	// Verb is the request's verb (kube-apiserver's RequestInfo), for
	// metrics.
	Verb string
	// LongRunning: a watch, a connect subresource (log, exec, attach,
	// portforward, proxy) or a proxy path: kube-apiserver's long-running
	// requests, which take a stream seat and have no time bound.
	LongRunning bool
	// Body reads the request's body as the caller sends it (decoded from
	// chunked framing; io.EOF at its end); nil: no body. It is read only
	// while the request is forwarded.
	Body io.Reader
	// ContentLength is Body's length; -1: unknown (sent chunked).
	ContentLength int64
	// Hangup, when set, is called for a long-running response with a
	// function it calls when the caller closes its connection (the
	// response then has Connection: close, and the caller sends nothing
	// more): a quiet stream (logs -f of a silent container) ends then,
	// not at its next write.
	Hangup func(cancel func())
	// HeaderTimeout, when set, bounds the wait for kube-apiserver's
	// response header instead of Config.ResponseHeaderTimeout: 503 after
	// it (for requests the caller can answer otherwise, such as
	// discovery).
	HeaderTimeout time.Duration
	// Conn, for an upgrade, returns the caller's connection under the
	// server: reads return the bytes after the request's header, writes
	// go to the socket. Nil: fasthttp's hijacked connection.
	Conn func() net.Conn
}

// Error is a request Forward could not forward, to be answered as a
// Status: nothing was written.
type Error struct {
	Code       int
	Reason     string
	Message    string
	RetryAfter int // seconds; 0: none
}

func (e *Error) Error() string { return e.Message }

// tooMany is kube-apiserver's 429 of its max-in-flight filter.
var tooMany = &Error{Code: 429, Reason: "TooManyRequests", Message: "Too many requests, please try again later.", RetryAfter: 1}

// Forward forwards the request of rc to kube-apiserver as r.Identity and
// sets rc's response to kube-apiserver's answer, streamed: the response
// body is copied as fasthttp writes it, after Forward returns. For an
// upgrade answered 101, rc's connection is hijacked and spliced to
// kube-apiserver's until either side closes. An *Error says nothing was
// written; the caller answers it.
func (f *Forwarder) Forward(rc *fasthttp.RequestCtx, r *Request) *Error {
	upgrade := isUpgrade(&rc.Request.Header)
	long := r.LongRunning || upgrade
	class := f.short
	if long {
		class = f.streams
	}
	if !class.take(r.Client) {
		return tooMany
	}
	release := func() { class.give(r.Client) }
	if at := f.downAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < downHold {
		release()
		return f.unavailable(errors.New("it did not answer within the last second"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := f.newRequest(ctx, rc, r, upgrade)
	if err != nil {
		cancel()
		release()
		return &Error{Code: 400, Reason: "BadRequest", Message: err.Error()}
	}
	var body *guardedBody
	if req.Body != nil {
		body = req.Body.(*guardedBody)
	}
	start := time.Now()
	resp, err := f.roundTrip(req, r, cancel)
	if err != nil {
		cancel()
		body.stop(rc.Conn())
		release()
		f.upstreamErrs.Inc()
		f.downAt.Store(time.Now().UnixNano())
		f.log.Warn("cannot forward request to kube-apiserver", zap.String("upstream", f.upstream),
			zap.String("verb", r.Verb), zap.Error(err))
		if e, ok := err.(*Error); ok {
			f.record(r.Verb, e.Code, start)
			return e
		}
		f.record(r.Verb, 503, start)
		return f.unavailable(err)
	}
	f.record(r.Verb, resp.StatusCode, start)
	if !body.done() {
		// kube-apiserver answered before the whole body was sent (a
		// refusal): the rest cannot be skipped safely.
		rc.SetConnectionClose()
	}
	// Go's transport may still be reading the body: no read of the
	// caller's connection may remain once Forward returns.
	body.stop(rc.Conn())
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return f.switchProtocols(rc, r, resp, cancel, release)
	}
	copyResponseHeader(&rc.Response.Header, resp.Header)
	rc.SetStatusCode(resp.StatusCode)
	rb := &responseBody{f: f, resp: resp, cancel: cancel, conn: rc.Conn(), release: release}
	if long {
		// Each write of the stream gets its own deadline (Read), not
		// fasthttp's one deadline for the whole response; the header
		// goes out at once, as kube-apiserver's: a stream may stay
		// quiet, and its client waits for the header.
		rb.deadline = f.cfg.WriteTimeout
		_ = rc.SetWriteDeadline(time.Now().Add(f.cfg.WriteTimeout))
		rc.Response.ImmediateHeaderFlush = true
		rc.SetConnectionClose()
		if r.Hangup != nil {
			r.Hangup(cancel)
		}
	}
	rc.Response.SetBodyStream(rb, int(resp.ContentLength))
	return nil
}

// switchProtocols answers an upgrade kube-apiserver accepted (101): rc's
// connection is hijacked and spliced to kube-apiserver's until either side
// closes; then the request's context ends and its seat is given back.
func (f *Forwarder) switchProtocols(rc *fasthttp.RequestCtx, r *Request, resp *http.Response, cancel, release func()) *Error {
	rw, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		cancel()
		release()
		return &Error{Code: 502, Reason: "InternalError", Message: "kube-apiserver switched protocols on a request that cannot be upgraded"}
	}
	rc.HijackSetNoResponse(true)
	rc.Hijack(func(c net.Conn) {
		defer release()
		defer cancel()
		if r.Conn != nil {
			c = r.Conn()
		}
		f.splice(c, resp, rw)
	})
	return nil
}

// roundTrip sends req and returns kube-apiserver's response header, or an
// error when it did not come within the request's header bound
// (Request.HeaderTimeout, else Config.ResponseHeaderTimeout): a
// connection lazyapi holds to a kube-apiserver that stopped answering
// stays open, and without the bound the request would wait for ever.
// cancel ends req (its context).
func (f *Forwarder) roundTrip(req *http.Request, r *Request, cancel context.CancelFunc) (*http.Response, error) {
	bound := r.HeaderTimeout
	if bound <= 0 {
		bound = f.cfg.ResponseHeaderTimeout
	}
	var late atomic.Bool
	timer := time.AfterFunc(bound, func() { late.Store(true); cancel() })
	resp, err := f.tr.RoundTrip(req)
	if timer.Stop() || !late.Load() {
		return resp, err
	}
	if err == nil {
		resp.Body.Close()
	}
	if r.HeaderTimeout > 0 {
		return nil, f.unavailable(fmt.Errorf("no answer within %v", bound))
	}
	// kube-apiserver's own timeout (504): the request may have been done.
	return nil, &Error{Code: 504, Reason: "Timeout", RetryAfter: 1,
		Message: fmt.Sprintf("kube-apiserver at %s did not answer within %v; the request may still complete", f.upstream, bound)}
}

// unavailable is the 503 of an upstream that did not answer.
func (f *Forwarder) unavailable(err error) *Error {
	return &Error{Code: 503, Reason: "ServiceUnavailable", RetryAfter: 1,
		Message: fmt.Sprintf("kube-apiserver at %s is unavailable: %v", f.upstream, err)}
}

// record counts a forwarded request's answer and its time to the
// response's header.
func (f *Forwarder) record(verb string, code int, start time.Time) {
	f.ms.GetOrCreateCounter(`lazyapi_forwarded_requests_total{verb="` + verb + `",code="` + strconv.Itoa(code) + `"}`).Inc()
	f.ms.GetOrCreateHistogram(`lazyapi_forward_duration_seconds{verb="` + verb + `"}`).UpdateDuration(start)
}

// isUpgrade reports whether the request asks for an upgrade (Connection:
// Upgrade and an Upgrade header).
func isUpgrade(h *fasthttp.RequestHeader) bool {
	if len(h.Peek("Upgrade")) == 0 {
		return false
	}
	for _, t := range connectionTokens([]string{string(h.Peek("Connection"))}) {
		if strings.EqualFold(t, "upgrade") {
			return true
		}
	}
	return false
}

// newRequest is the upstream request of rc: its method and request URI
// unchanged, its headers but the dropped ones (upstreamHeader), r's
// identity, and its body streamed from r.Body.
func (f *Forwarder) newRequest(ctx context.Context, rc *fasthttp.RequestCtx, r *Request, upgrade bool) (*http.Request, error) {
	uri := string(rc.RequestURI())
	if !strings.HasPrefix(uri, "/") {
		return nil, fmt.Errorf("cannot forward request URI %q", uri)
	}
	u, err := url.Parse(f.upstream + uri)
	if err != nil {
		return nil, fmt.Errorf("cannot forward request URI %q: %v", uri, err)
	}
	req := &http.Request{
		Method:     string(rc.Method()),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Host:       u.Host,
	}
	var pairs [][2]string
	rc.Request.Header.VisitAll(func(k, v []byte) {
		pairs = append(pairs, [2]string{string(k), string(v)})
	})
	// fasthttp keeps Content-Type and User-Agent apart from the others.
	req.Header = upstreamHeader(pairs, &r.Identity, r.ClientIP, upgrade)
	req = req.WithContext(ctx)
	if r.Body != nil && r.ContentLength != 0 && !upgrade {
		req.Body = &guardedBody{r: r.Body, up: f.upBytes}
		req.ContentLength = r.ContentLength
		if r.ContentLength < 0 {
			req.ContentLength = -1
		}
	}
	return req, nil
}

// upstreamHeader is the header kube-apiserver gets for a caller's header
// pairs (name, value, in order): without the hop-by-hop headers, the
// headers the Connection header names, the caller's identity headers and
// credentials (dropped); with id's front-proxy headers and the caller's
// address appended to X-Forwarded-For, as Go's ReverseProxy and the
// aggregator do (kube-apiserver's audit sourceIPs). An upgrade keeps
// Connection: Upgrade and its Upgrade header.
func upstreamHeader(pairs [][2]string, id *Identity, clientIP string, upgrade bool) http.Header {
	var connTokens, forwarded []string
	var upgradeTo string
	for _, p := range pairs {
		switch {
		case strings.EqualFold(p[0], "Connection"):
			connTokens = append(connTokens, connectionTokens([]string{p[1]})...)
		case strings.EqualFold(p[0], "X-Forwarded-For"):
			forwarded = append(forwarded, p[1])
		case strings.EqualFold(p[0], "Upgrade") && upgradeTo == "":
			upgradeTo = p[1]
		}
	}
	h := make(http.Header, len(pairs)+4)
	for _, p := range pairs {
		if dropped(p[0]) {
			continue
		}
		named := false
		for _, t := range connTokens {
			if strings.EqualFold(t, p[0]) {
				named = true
				break
			}
		}
		if named {
			continue
		}
		k := http.CanonicalHeaderKey(p[0])
		h[k] = append(h[k], p[1])
	}
	if upgrade && upgradeTo != "" {
		h["Connection"] = []string{"Upgrade"}
		h["Upgrade"] = []string{upgradeTo}
	}
	if clientIP != "" {
		forwarded = append(forwarded, clientIP)
	}
	if len(forwarded) > 0 {
		h["X-Forwarded-For"] = []string{strings.Join(forwarded, ", ")}
	}
	setIdentity(h, id)
	return h
}

// copyResponseHeader copies kube-apiserver's response header to the
// caller's, without hop-by-hop headers and those fasthttp writes itself
// (Content-Length from the body stream, Date).
func copyResponseHeader(dst *fasthttp.ResponseHeader, src http.Header) {
	tokens := connectionTokens(src["Connection"])
	for k, vs := range src {
		if strings.EqualFold(k, "Content-Length") || strings.EqualFold(k, "Date") {
			continue
		}
		hop := false
		for _, n := range hopHeaders {
			if strings.EqualFold(k, n) {
				hop = true
				break
			}
		}
		for _, t := range tokens {
			if strings.EqualFold(k, t) {
				hop = true
				break
			}
		}
		if hop {
			continue
		}
		if strings.EqualFold(k, "Content-Type") {
			dst.SetContentType(vs[0])
			continue
		}
		for _, v := range vs {
			dst.Add(k, v)
		}
	}
}

// guardedBody is an upstream request's body read from the caller's
// connection. Go's transport may still read it after the response came
// (RoundTrip's contract); stop ends that before fasthttp reads the
// connection again.
type guardedBody struct {
	r  io.Reader
	up *metrics.Counter

	mu      sync.Mutex
	stopped bool // protected by mu
	eof     atomic.Bool
}

var errStopped = errors.New("forward: request body no longer read")

func (b *guardedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return 0, errStopped
	}
	n, err := b.r.Read(p)
	b.up.Add(n)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *guardedBody) Close() error { return nil }

// done reports whether the whole body was read.
func (b *guardedBody) done() bool { return b == nil || b.eof.Load() }

// pastDeadline is a deadline that has passed: a blocked read fails at
// once.
var pastDeadline = time.Unix(1, 0)

// stop waits for a read in flight to end (moving the read deadline of
// conn, the caller's, into the past when the body was not read to its
// end) and makes later reads fail.
func (b *guardedBody) stop(conn net.Conn) {
	if b == nil {
		return
	}
	if !b.eof.Load() && conn != nil {
		_ = conn.SetReadDeadline(pastDeadline)
	}
	b.mu.Lock()
	b.stopped = true
	b.mu.Unlock()
}

// responseBody streams kube-apiserver's response body to the caller as
// fasthttp writes it; Close (fasthttp's, after the response) releases the
// request's seat and upstream connection.
type responseBody struct {
	f        *Forwarder
	resp     *http.Response
	cancel   context.CancelFunc
	conn     net.Conn
	release  func()
	deadline time.Duration // a long-running stream's write bound; 0: none
	closed   bool
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.resp.Body.Read(p)
	if n > 0 {
		b.f.downBytes.Add(n)
		if b.deadline > 0 {
			_ = b.conn.SetWriteDeadline(time.Now().Add(b.deadline))
		}
	}
	return n, err
}

func (b *responseBody) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	b.resp.Body.Close()
	b.cancel()
	b.release()
	return nil
}

// splice writes the 101 response to the caller's connection c and copies
// bytes both ways between c and kube-apiserver's connection up until
// either side closes or fails; then both are closed (SPDY and WebSocket
// end their streams inside the protocol, not with a half-close).
func (f *Forwarder) splice(c net.Conn, resp *http.Response, up io.ReadWriteCloser) {
	defer up.Close()
	defer c.Close()
	_ = c.SetDeadline(time.Time{})
	bw := bufio.NewWriterSize(c, 1<<10)
	bw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(bw)
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		n, _ := io.Copy(up, c)
		f.upBytes.Add(int(n))
		done <- struct{}{}
	}()
	go func() {
		n, _ := io.Copy(c, up)
		f.downBytes.Add(int(n))
		done <- struct{}{}
	}()
	<-done
	up.Close()
	c.Close()
	<-done
}

// Check reports whether kube-apiserver answers /readyz (as lazyapi's own
// identity: X-Remote-User system:lazyapi:forward, group
// system:authenticated, which kube-apiserver's system:public-info-viewer
// role lets read it). The result is reused for a second. Check waits at
// most healthWait: a kube-apiserver that does not answer within it, or
// that left a forwarded request unanswered within the last second, is
// reported down at once while the probe goes on in the background.
func (f *Forwarder) Check(ctx context.Context) error {
	f.healthMu.Lock()
	if time.Since(f.healthAt) < healthTTL {
		err := f.healthErr
		f.healthMu.Unlock()
		return err
	}
	if at := f.downAt.Load(); at != 0 && time.Since(time.Unix(0, at)) < downHold {
		f.healthMu.Unlock()
		return fmt.Errorf("kube-apiserver at %s: a forwarded request got no answer within the last second", f.upstream)
	}
	if f.probe == nil {
		done := make(chan struct{})
		f.probe = done
		go func() {
			err := f.check(context.Background())
			f.healthMu.Lock()
			f.healthErr, f.healthAt, f.probe = err, time.Now(), nil
			f.healthMu.Unlock()
			close(done)
		}()
	}
	done := f.probe
	f.healthMu.Unlock()
	t := time.NewTimer(healthWait)
	defer t.Stop()
	select {
	case <-done:
		f.healthMu.Lock()
		defer f.healthMu.Unlock()
		return f.healthErr
	case <-t.C:
	case <-ctx.Done():
	}
	return fmt.Errorf("kube-apiserver at %s: no answer to /readyz within %v", f.upstream, healthWait)
}

func (f *Forwarder) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.DialTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.upstream+"/readyz", nil)
	if err != nil {
		return err
	}
	setIdentity(req.Header, &Identity{Name: "system:lazyapi:forward", Groups: []string{"system:authenticated"}})
	resp, err := f.tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("kube-apiserver at %s: %w", f.upstream, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver at %s: /readyz answered %s", f.upstream, resp.Status)
	}
	return nil
}
