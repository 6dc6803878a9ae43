package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/store"
)

var (
	errNotReady     = errors.New("resource table not loaded")
	errShuttingDown = errors.New("shutting down")
)

// Buffers: one request holds one of these while it encodes.
const (
	flushSize  = 64 << 10
	bufPoolCap = 4 * flushSize // larger buffers are not pooled
)

// A TLS connection's coalescing buffer holds a chunk of a stream: flushSize
// plus the item that passed it, and the records' framing.
const _ = uint(conn.CoalesceBytes-2*flushSize) + uint(2*flushSize-conn.CoalesceBytes) // equal, or this does not compile

var bufPool sync.Pool

// Large buffers: a frame or item larger than a pooled flush buffer (a
// 1 MiB Secret's watch event, a LIST's large item) is encoded into a
// buffer of its size. Allocated per event, those buffers are garbage at
// the rate the server writes large objects (16 watchers of 100 Secrets of
// 1 MiB: 1.6 GB in 7 s), and the Go heap, collected concurrently on a
// loaded machine, grew to 6 times its live size between collections
// (bench/RESULTS.md, ## storm: large objects). They are reused instead,
// from pools of power-of-two size classes (256 KiB to 32 MiB; larger ones
// are allocated and dropped). A pooled buffer lives until its second
// garbage collection unused, so the pools hold about what the streams
// used at once, which admission counts (a watch's 3 frames, a LIST's
// item).
const (
	bigBufMinShift = 18 // 256 KiB
	bigBufMaxShift = 25 // 32 MiB
)

var bigBufPools [bigBufMaxShift - bigBufMinShift + 1]sync.Pool

// getBigBuf returns an empty buffer whose capacity is at least n.
func getBigBuf(n int) *[]byte {
	c := max(bits.Len(uint(n-1)), bigBufMinShift) // 1<<c >= n
	if c > bigBufMaxShift {
		b := make([]byte, 0, n)
		return &b
	}
	if v := bigBufPools[c-bigBufMinShift].Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 0, 1<<c)
	return &b
}

// putBigBuf pools b in the size class its capacity fills (buffers of
// class c hold at least 1<<c bytes); smaller and larger ones are dropped.
func putBigBuf(b *[]byte) {
	c := bits.Len(uint(cap(*b))) - 1 // 1<<c <= cap
	if c < bigBufMinShift || c > bigBufMaxShift {
		return
	}
	*b = (*b)[:0]
	bigBufPools[c-bigBufMinShift].Put(b)
}

func getBuf() *[]byte {
	if v := bufPool.Get(); v != nil {
		return v.(*[]byte)
	}
	b := make([]byte, 0, flushSize+flushSize/4)
	return &b
}

func putBuf(b *[]byte) {
	if cap(*b) == 0 { // taken (setBodyOwned)
		return
	}
	if cap(*b) > bufPoolCap {
		putBigBuf(b)
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// serveMetrics writes the metrics set and process metrics (RSS, Go heap),
// each family with its # HELP (metricHelp) and # TYPE.
func (s *Server) serveMetrics(rc *fasthttp.RequestCtx) {
	rc.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	var b bytes.Buffer
	s.ms.WritePrometheus(&b)
	metrics.WriteProcessMetrics(&b)
	rc.SetBody(appendHelp(make([]byte, 0, b.Len()+b.Len()/2), b.Bytes()))
}

// healthTTL is how long an etcd readiness answer is reused.
const healthTTL = time.Second

// etcdHealthy checks etcd with a cheap linearizable read, cached for
// healthTTL so that probes never load etcd.
func (s *Server) etcdHealthy() error {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	if time.Since(s.healthAt) < healthTTL {
		return s.healthErr
	}
	ctx, cancel := context.WithTimeout(s.baseCtx, 2*time.Second)
	defer cancel()
	_, err := s.store.Revision(ctx)
	s.healthAt, s.healthErr = time.Now(), err
	s.noteEtcd(err)
	return err
}

// etcdDegraded says which etcd members lazyapi leaves out.
func etcdDegraded(st store.FailoverStatus) string {
	var msg string
	if len(st.Down) > 0 {
		msg = fmt.Sprintf("%d of %d etcd members do not answer linearizable reads", len(st.Down), st.Members)
	}
	if len(st.Slow) > 0 {
		if msg != "" {
			msg += ", "
		}
		msg += fmt.Sprintf("%d of %d etcd members answer slowly", len(st.Slow), st.Members)
	}
	switch {
	case st.OnPreferred:
		return msg + "; reading from the preferred member"
	case st.Preferred != "" && (slices.Contains(st.Down, st.Preferred) || slices.Contains(st.Slow, st.Preferred)):
		return msg + fmt.Sprintf(", the preferred one among them; reading from the others for %s", time.Since(st.Since).Round(time.Second))
	case len(st.Down) == st.Members:
		return msg + "; trying every member"
	}
	return msg + fmt.Sprintf("; reading from the others for %s", time.Since(st.Since).Round(time.Second))
}

// etcdDownHold is how long after etcd failed to answer requests are
// refused with 503 without asking etcd.
const etcdDownHold = time.Second

// noteEtcd records an etcd failure (ErrUnavailable) for etcdDown.
func (s *Server) noteEtcd(err error) {
	if errors.Is(err, store.ErrUnavailable) {
		s.etcdDownAt.Store(time.Now().UnixNano())
	}
}

// etcdMovedSince reports whether the etcd client's endpoints changed after
// t (store.Failover): a request begun before then failed on members since
// left out, which says nothing about the ones read from now, so it does
// not start the hold (else every move would be followed by a second of
// 503s while the members read from answer).
func (s *Server) etcdMovedSince(t time.Time) bool {
	f := s.cfg.EtcdFailover
	return f != nil && f().Since.After(t)
}

// etcdDown reports whether etcd failed to answer within etcdDownHold.
func (s *Server) etcdDown() bool {
	at := s.etcdDownAt.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < etcdDownHold
}

// serveHealth answers /healthz, /livez, /readyz (and /<x>/<check>) as
// kube-apiserver: "ok", or with ?verbose one "[+]check ok" line per check.
// /readyz checks etcd and that the resource table is loaded; /livez and
// /healthz check only that the process serves (and, for /healthz, etcd).
func (s *Server) serveHealth(rc *fasthttp.RequestCtx, path string) {
	kind, only, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	checks := s.healthChecks(rc, kind)
	if only != "" {
		for _, c := range checks {
			if c.name == only {
				checks = []healthCheck{c}
				goto found
			}
		}
		rc.SetStatusCode(404)
		rc.SetContentType("text/plain; charset=utf-8")
		rc.SetBodyString("404 page not found\n")
		return
	found:
	}
	failed := false
	for _, c := range checks {
		if c.err != nil && (!c.own || only != "") {
			failed = true
		}
	}
	rc.SetContentType("text/plain; charset=utf-8")
	rc.Response.Header.Set("X-Content-Type-Options", "nosniff")
	verbose := rc.QueryArgs().Has("verbose")
	if !failed && !verbose {
		rc.SetBodyString("ok")
		return
	}
	var b strings.Builder
	for _, c := range checks {
		if c.err != nil && c.own && only == "" {
			b.WriteString("[-]" + c.name + " failed (not counted): reason withheld\n")
		} else if c.err != nil {
			b.WriteString("[-]" + c.name + " failed: reason withheld\n")
		} else if c.degraded != "" {
			b.WriteString("[+]" + c.name + " degraded: " + c.degraded + "\n")
		} else {
			b.WriteString("[+]" + c.name + " ok\n")
		}
	}
	if failed {
		for _, c := range checks {
			if c.err != nil {
				s.log.Info("health check failed", zap.String("check", c.name), zap.Error(c.err))
			}
		}
		b.WriteString(kind + " check failed\n")
		rc.SetStatusCode(500)
	} else {
		b.WriteString(kind + " check passed\n")
	}
	rc.SetBodyString(b.String())
}

// healthCheck is one check of a health path.
type healthCheck struct {
	name string
	err  error
	// degraded, on a check that passes, says what works on a
	// fallback (shown with ?verbose).
	degraded string
	// own: a failure fails only the check's own path, not the
	// whole (shown with ?verbose).
	own bool
}

// healthChecks runs the checks of kind (healthz, livez or readyz).
func (s *Server) healthChecks(rc *fasthttp.RequestCtx, kind string) []healthCheck {
	checks := []healthCheck{{name: "ping"}}
	if kind != "livez" {
		checks = append(checks, healthCheck{name: "etcd", err: s.etcdHealthy()})
	}
	if kind == "readyz" {
		var err error
		if !s.cfg.Resources.Ready() {
			err = errNotReady
		}
		checks = append(checks, healthCheck{name: "resources", err: err})
		if f := s.cfg.EtcdFailover; f != nil {
			// lazyapi serves through the members that answer: ready, but
			// degraded (the members are logged, not shown).
			c := healthCheck{name: "etcd-members"}
			if st := f(); st.Degraded() {
				c.degraded = etcdDegraded(st)
			}
			checks = append(checks, c)
		}
		if e := s.cfg.Encryption; e != nil && e.KMS() {
			// kube-apiserver's check: the KMS v2 plugins' Status.
			checks = append(checks, healthCheck{name: "kms-providers", err: e.Check(rc)})
		}
		if s.baseCtx.Err() != nil {
			checks = append(checks, healthCheck{name: "shutdown", err: errShuttingDown})
		}
		if f := s.cfg.Forward; f != nil {
			// Reads are served while kube-apiserver is down: its check
			// fails /readyz/kube-apiserver only.
			checks = append(checks, healthCheck{name: "kube-apiserver", err: f.Check(rc), own: true})
		}
	}
	return checks
}

// serveDiscovery answers /version, /api, /api/v1, /apis, /apis/g, /apis/g/v
// from the resource table's documents; anything else is 404.
func (s *Server) serveDiscovery(rc *fasthttp.RequestCtx, path string) {
	accept := string(rc.Request.Header.Peek("Accept"))
	if !rc.IsGet() && !rc.IsHead() {
		s.writeStatus(rc, encoding.ErrorFormat(accept), methodNotAllowed(string(rc.Method())))
		return
	}
	t := s.cfg.Resources
	path = strings.TrimSuffix(path, "/")
	var (
		body []byte
		ok   = true
	)
	switch {
	case path == "/version":
		body = t.DiscoveryVersion()
	case path == "/api" || path == "/apis":
		if wantsAggregated(accept) {
			rc.SetContentType("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
			rc.Response.Header.Set("Vary", "Accept")
			rc.SetBody(t.DiscoveryAggregated(path == "/api"))
			return
		}
		if path == "/api" {
			body = t.DiscoveryAPIVersions()
		} else {
			body = t.DiscoveryGroups()
		}
	case path == "/api/v1":
		body = t.DiscoveryCore()
	case strings.HasPrefix(path, "/apis/"):
		g, v, hasV := strings.Cut(strings.TrimPrefix(path, "/apis/"), "/")
		if hasV {
			body, ok = t.DiscoveryGroupVersion(g, v)
		} else {
			body, ok = t.DiscoveryGroup(g)
		}
	default:
		ok = false
	}
	if !ok {
		s.writeNotFound(rc, encoding.ErrorFormat(accept), path)
		return
	}
	rc.SetContentType(encoding.MediaJSON)
	rc.Response.Header.Set("Vary", "Accept")
	rc.SetBody(body)
}

// wantsAggregated reports whether the Accept header prefers the
// apidiscovery.k8s.io/v2 APIGroupDiscoveryList to the legacy documents.
func wantsAggregated(accept string) bool {
	var arr [8]encoding.AcceptClause
	for _, c := range encoding.ParseAccept(accept, arr[:0]) {
		if c.Q <= 0 {
			continue
		}
		if c.As == "APIGroupDiscoveryList" && c.G == "apidiscovery.k8s.io" && c.V == "v2" &&
			c.Type == "application" && c.Sub == "json" {
			return true
		}
		if !c.HasParams && (c.Type == "*" || c.Type == "application" && (c.Sub == "json" || c.Sub == "*")) {
			return false
		}
	}
	return false
}
