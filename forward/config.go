package forward

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults of Config's bounds.
const (
	// DefaultMaxShort is the short forwarded requests in flight at once
	// (writes, aggregated reads): kube-apiserver's own
	// --max-mutating-requests-inflight is 200 and its
	// --max-requests-inflight 400; lazyapi's seats are only a bound on
	// what it holds for them, the upstream limits its own.
	DefaultMaxShort = 256
	// DefaultMaxStreams is the long-running forwarded requests held at
	// once (watches of forwarded groups, logs -f, exec, attach,
	// port-forward, proxy).
	DefaultMaxStreams = 1024
	// DefaultClientShare is the part of each class one client may hold
	// (a client is lazyapi's fairness key: its user, or its address).
	DefaultClientShare = 0.25
	// DefaultReservedBytes is what a forwarded request holds while it
	// runs: its upstream connection's TLS and HTTP buffers, both
	// directions' copy buffers and goroutines (measured: 800 idle
	// `logs -f`-like streams through lazyapi, RSS per stream;
	// bench/RESULTS.md ## forward). It counts in --memory-limit.
	DefaultReservedBytes = 96 << 10
	// DefaultDialTimeout bounds connecting to kube-apiserver (TCP and
	// TLS): when it does not answer within it, the request gets 503.
	DefaultDialTimeout = 5 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for kube-apiserver's
	// response header: its own request timeout (--request-timeout, 1m),
	// after which it answers 504 itself, and a margin. Past it lazyapi
	// answers 504.
	DefaultResponseHeaderTimeout = 70 * time.Second
	// DefaultWriteTimeout bounds each write to the client of a streamed
	// response (proxy's --write-timeout).
	DefaultWriteTimeout = 10 * time.Second
)

// Config configures a Forwarder. Zero values get the defaults above.
type Config struct {
	// Upstream is kube-apiserver's URL (scheme, host and an optional path
	// prefix); required.
	Upstream *url.URL
	// TLS authenticates lazyapi to kube-apiserver with its front-proxy
	// client certificate and verifies kube-apiserver's; required for an
	// https Upstream. It must present a client certificate.
	TLS *tls.Config
	// MaxShort and MaxStreams bound the short and long-running forwarded
	// requests held at once; ClientShare is the part of each one client
	// may hold (at least one seat).
	MaxShort, MaxStreams int
	ClientShare          float64
	// ReservedBytes is what each forwarded request counts against the
	// memory budget (Reserve); it is reported by ReservedBytesTotal.
	ReservedBytes int64
	// DialTimeout bounds connecting to Upstream.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for kube-apiserver's response
	// header of a forwarded request (unless Request.HeaderTimeout sets
	// another bound).
	ResponseHeaderTimeout time.Duration
	// WriteTimeout bounds each write of a streamed response to the client.
	WriteTimeout time.Duration
	// Logger logs upstream failures; nil discards.
	Logger *zap.Logger
	// Metrics receives the forwarder's metrics; nil: a private set.
	Metrics *metrics.Set
}

func (c *Config) setDefaults() error {
	if c.Upstream == nil || c.Upstream.Host == "" {
		return errors.New("cannot forward: Config.Upstream is not set")
	}
	if c.Upstream.Scheme != "https" && c.Upstream.Scheme != "http" {
		return fmt.Errorf("cannot forward: Config.Upstream %q: scheme must be https", c.Upstream.String())
	}
	if c.MaxShort == 0 {
		c.MaxShort = DefaultMaxShort
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.MaxShort < 0 || c.MaxStreams < 0 {
		return fmt.Errorf("cannot forward: Config.MaxShort (%d) and Config.MaxStreams (%d) must not be negative", c.MaxShort, c.MaxStreams)
	}
	if c.ClientShare == 0 {
		c.ClientShare = DefaultClientShare
	}
	if c.ClientShare < 0 || c.ClientShare > 1 {
		return fmt.Errorf("cannot forward: Config.ClientShare %v must be in (0, 1]", c.ClientShare)
	}
	if c.ReservedBytes == 0 {
		c.ReservedBytes = DefaultReservedBytes
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ResponseHeaderTimeout <= 0 {
		c.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return nil
}

// LoadKubeconfig reads a kubeconfig naming kube-apiserver (its current
// context's cluster: server URL and CA) and lazyapi's front-proxy client
// certificate (its user: client-certificate and client-key, as files or
// data), and returns the Upstream and TLS of a Config. A user with a
// token, a password, an exec plugin or an auth provider is refused: the
// front-proxy convention is the client certificate alone, and lazyapi
// never sends credentials of its own with a caller's request. Nothing is
// sent.
func LoadKubeconfig(path string) (*url.URL, *tls.Config, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot load %s: %w", path, err)
	}
	if rc.BearerToken != "" || rc.BearerTokenFile != "" || rc.Username != "" || rc.Password != "" ||
		rc.ExecProvider != nil || rc.AuthProvider != nil {
		return nil, nil, fmt.Errorf("%s: its user has a token, a password or a credential plugin: forwarding needs a front-proxy client certificate only (client-certificate and client-key)", path)
	}
	if len(rc.CertData) == 0 && rc.CertFile == "" {
		return nil, nil, fmt.Errorf("%s: its user has no client certificate: forwarding needs lazyapi's front-proxy client certificate (signed by a CA of kube-apiserver's --requestheader-client-ca-file, its name in kube-apiserver's --requestheader-allowed-names)", path)
	}
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("%s: server %q is not a URL", path, rc.Host)
	}
	if u.Scheme != "https" {
		return nil, nil, fmt.Errorf("%s: server %q: kube-apiserver must be reached over https (the client certificate is the front-proxy credential)", path, rc.Host)
	}
	tc, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	if tc == nil {
		return nil, nil, fmt.Errorf("%s: no TLS configuration", path)
	}
	return u, tc, nil
}
