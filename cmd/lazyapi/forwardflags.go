package main

import (
	"crypto/tls"
	"net/url"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/forward"
)

// forwardFlags say whether and how lazyapi forwards what it does not
// serve to kube-apiserver (package forward).
type forwardFlags struct {
	kubeconfig  string        // --upstream-kubeconfig; "": read-only, nothing forwarded
	maxShort    int           // --max-forwarded-requests-inflight
	maxStreams  int           // --max-forwarded-streams-inflight
	dialTimeout time.Duration // --upstream-connect-timeout

	// Loaded by validate from kubeconfig.
	upstream *url.URL
	tls      *tls.Config
}

func (f *forwardFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "upstream-kubeconfig", "",
		"kubeconfig naming kube-apiserver (server URL and CA) and lazyapi's front-proxy client certificate (one of kube-apiserver's --requestheader-client-ca-file CA, its name in --requestheader-allowed-names). When set, every request lazyapi does not serve from etcd (writes, log, exec, attach, port-forward, proxy, aggregated and unknown groups, self reviews) is forwarded to kube-apiserver as the caller (X-Remote-User, X-Remote-Group, X-Remote-Extra-*), streamed; reads are still served from etcd while kube-apiserver is down. Empty: read-only (writes 405).")
	fs.IntVar(&f.maxShort, "max-forwarded-requests-inflight", forward.DefaultMaxShort,
		"With --upstream-kubeconfig: forwarded requests that are not long-running (writes, reads of aggregated groups) held at once; beyond it 429. Each client (user, or address) holds at most a quarter.")
	fs.IntVar(&f.maxStreams, "max-forwarded-streams-inflight", forward.DefaultMaxStreams,
		"With --upstream-kubeconfig: forwarded long-running requests (watches of forwarded groups, logs -f, exec, attach, port-forward, proxy) held open at once; beyond it 429. Each client holds at most a quarter. Each forwarded request reserves 96 KiB of the in-flight memory budget.")
	fs.DurationVar(&f.dialTimeout, "upstream-connect-timeout", forward.DefaultDialTimeout,
		"With --upstream-kubeconfig: longest wait to connect to kube-apiserver (TCP and TLS); when it does not answer, forwarded requests get 503 with Retry-After.")
}

// on reports whether forwarding is configured.
func (f *forwardFlags) on() bool { return f.kubeconfig != "" }

// validate checks the values and loads the kubeconfig, so that a bad one
// is a command-line error.
func (f *forwardFlags) validate() error {
	if f.maxShort <= 0 {
		return usageErrorf("invalid --max-forwarded-requests-inflight %d: must be greater than 0", f.maxShort)
	}
	if f.maxStreams <= 0 {
		return usageErrorf("invalid --max-forwarded-streams-inflight %d: must be greater than 0", f.maxStreams)
	}
	if f.dialTimeout <= 0 {
		return usageErrorf("invalid --upstream-connect-timeout %s: must be greater than 0", f.dialTimeout)
	}
	if !f.on() {
		return nil
	}
	u, tc, err := forward.LoadKubeconfig(f.kubeconfig)
	if err != nil {
		return usageErrorf("invalid --upstream-kubeconfig: %v", err)
	}
	f.upstream, f.tls = u, tc
	return nil
}

// reservedBytes is what forwarding takes from the in-flight memory
// budget: every seat's reserve.
func (f *forwardFlags) reservedBytes() int64 {
	if !f.on() {
		return 0
	}
	return int64(f.maxShort+f.maxStreams) * forward.DefaultReservedBytes
}

// open creates the forwarder, or nil when forwarding is off.
func (f *forwardFlags) open(lg *zap.Logger, ms *metrics.Set, writeTimeout time.Duration) (*forward.Forwarder, error) {
	if !f.on() {
		return nil, nil
	}
	return forward.New(forward.Config{
		Upstream:     f.upstream,
		TLS:          f.tls,
		MaxShort:     f.maxShort,
		MaxStreams:   f.maxStreams,
		DialTimeout:  f.dialTimeout,
		WriteTimeout: writeTimeout,
		Logger:       lg,
		Metrics:      ms,
	})
}
