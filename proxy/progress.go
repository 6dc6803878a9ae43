package proxy

import (
	"context"
	"net"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/lazyapi/lazyapi/proxy/conn"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// No progress, no seat: every write of a response runs under a deadline
// (proxy/conn's WriteGuard and HeldBody; its writeguard.go says how).
// Here: the write timeout (Config.WriteTimeout), the guard of a streamed
// response, and what an abort does (aborts).

// DefaultWriteTimeout is Config.WriteTimeout's default.
const DefaultWriteTimeout = 10 * time.Second

// aborts count and log the responses proxy/conn ended by a deadline: at
// most one line per client per minute (rateLog). It is safe for
// concurrent use.
type aborts struct {
	stalled, timeout *metrics.Counter
	log              *rateLog
	// writeTimeout and requestTimeout are the server's, for the log.
	writeTimeout, requestTimeout time.Duration
}

var _ conn.Aborter = (*aborts)(nil)

func newAborts(ms *metrics.Set, log *rateLog, cfg *Config) *aborts {
	return &aborts{
		stalled:        ms.GetOrCreateCounter(`lazyapi_streams_aborted_total{reason="write_stalled"}`),
		timeout:        ms.GetOrCreateCounter(`lazyapi_streams_aborted_total{reason="request_timeout"}`),
		log:            log,
		writeTimeout:   cfg.WriteTimeout,
		requestTimeout: cfg.RequestTimeout,
	}
}

// Aborted counts and logs a response ended by a deadline.
func (a *aborts) Aborted(reason conn.AbortReason, stream, client string) {
	switch {
	case reason == conn.AbortRequestTimeout:
		a.timeout.Inc()
		a.log.warn(client, "abort", "stream aborted: the request overran the request timeout",
			zap.String("stream", stream), zap.Duration("requestTimeout", a.requestTimeout))
	case stream == "body":
		a.stalled.Inc()
		a.log.warn(client, "abort", "response aborted: its client read nothing for the write timeout",
			zap.String("stream", stream), zap.Duration("writeTimeout", a.writeTimeout))
	default:
		a.stalled.Inc()
		a.log.warn(client, "abort", "stream aborted: its client read nothing for the write timeout",
			zap.String("stream", stream), zap.Duration("writeTimeout", a.writeTimeout))
	}
}

// CountWrites wraps ln so that the write guards of streamed responses
// measure their clients' progress (see "No progress, no seat" in
// proxy/conn). Put it under a TLS listener: Serve counts plain
// connections itself. It also coalesces the TLS records of a stream's
// chunk into one write (conn.Progress).
func CountWrites(ln net.Listener) net.Listener { return conn.CountWrites(ln) }

// guardWrites returns the write guard of a response streamed on rc's
// connection; ctx is the request's (its end aborts a blocked write). what
// names the stream in logs ("list", "watch").
func (s *Server) guardWrites(ctx context.Context, rc *fasthttp.RequestCtx, what string) *conn.WriteGuard {
	return conn.GuardWrites(ctx, rc.Conn(), s.cfg.WriteTimeout, s.aborted, what, clientKey(rc))
}
