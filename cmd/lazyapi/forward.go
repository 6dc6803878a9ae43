package main

import (
	"crypto/tls"
	"net/url"
	"time"

	cliflag "k8s.io/component-base/cli/flag"

	"github.com/lazyapi/lazyapi/forward"
)

// forwardOptions say whether and how lazyapi forwards what it does not
// serve to kube-apiserver (package forward).
type forwardOptions struct {
	kubeconfig  string        // --upstream-kubeconfig; "": read-only, nothing forwarded
	maxShort    int           // --max-forwarded-requests-inflight
	maxStreams  int           // --max-forwarded-streams-inflight
	dialTimeout time.Duration // --upstream-connect-timeout

	// Loaded by validate from kubeconfig.
	upstream *url.URL
	tls      *tls.Config
}

func (f *forwardOptions) addFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("forwarding to kube-apiserver")
	fs.StringVar(&f.kubeconfig, "upstream-kubeconfig", "",
		"kubeconfig naming kube-apiserver (server URL and CA) and lazyapi's front-proxy client certificate (one of kube-apiserver's --requestheader-client-ca-file CA, its name in --requestheader-allowed-names). When set, every request lazyapi does not serve from etcd (writes, log, exec, attach, port-forward, proxy, aggregated and unknown groups, self reviews) is forwarded to kube-apiserver as the caller (X-Remote-User, X-Remote-Group, X-Remote-Extra-*), streamed; reads are still served from etcd while kube-apiserver is down. Empty: read-only (writes 405).")
	fs.IntVar(&f.maxShort, "max-forwarded-requests-inflight", forward.DefaultMaxShort,
		"With --upstream-kubeconfig: forwarded requests that are not long-running (writes, reads of aggregated groups) held at once; beyond it 429. Each client (user, or address) holds at most a quarter.")
	fs.IntVar(&f.maxStreams, "max-forwarded-streams-inflight", forward.DefaultMaxStreams,
		"With --upstream-kubeconfig: forwarded long-running requests (watches of forwarded groups, logs -f, exec, attach, port-forward, proxy) held open at once; beyond it 429. Each client holds at most a quarter. Each forwarded request reserves 96Ki of the derived --max-inflight-bytes.")
	fs.DurationVar(&f.dialTimeout, "upstream-connect-timeout", forward.DefaultDialTimeout,
		"With --upstream-kubeconfig: longest wait to connect to kube-apiserver (TCP and TLS); when it does not answer, forwarded requests get 503 with Retry-After.")
}

// on reports whether forwarding is configured.
func (f *forwardOptions) on() bool { return f.kubeconfig != "" }

// validate checks the values and loads the kubeconfig, so that a bad one
// is a command-line error.
func (f *forwardOptions) validate(*Options) []error {
	var errs []error
	if f.maxShort <= 0 {
		errs = append(errs, flagError("max-forwarded-requests-inflight", "%d: must be greater than 0", f.maxShort))
	}
	if f.maxStreams <= 0 {
		errs = append(errs, flagError("max-forwarded-streams-inflight", "%d: must be greater than 0", f.maxStreams))
	}
	if f.dialTimeout <= 0 {
		errs = append(errs, flagError("upstream-connect-timeout", "%s: must be greater than 0", f.dialTimeout))
	}
	if !f.on() {
		return errs
	}
	u, tc, err := forward.LoadKubeconfig(f.kubeconfig)
	if err != nil {
		return append(errs, flagError("upstream-kubeconfig", "%v", err))
	}
	f.upstream, f.tls = u, tc
	return errs
}

// fitSeats returns what forwarding takes from a derived in-flight memory
// budget v: every seat's reserve. Seats left at their defaults are scaled
// down (to no fewer than 16 short and 64 streams) so that their reserve
// is at most a quarter of v: a small --memory-limit gets fewer forwarded
// requests, not an unbounded reserve. Seats given on the command line are
// kept (inflightBytes refuses a reserve over half of v).
func (f *forwardOptions) fitSeats(v int64, changed func(string) bool) int64 {
	if !f.on() {
		return 0
	}
	seat := int64(forward.DefaultReservedBytes)
	r := int64(max(f.maxShort, 0)+max(f.maxStreams, 0)) * seat
	if r > v/4 && !changed("max-forwarded-requests-inflight") && !changed("max-forwarded-streams-inflight") {
		scale := float64(v/4) / float64(r)
		f.maxShort = max(16, int(float64(f.maxShort)*scale))
		f.maxStreams = max(64, int(float64(f.maxStreams)*scale))
		r = int64(f.maxShort+f.maxStreams) * seat
	}
	return r
}
