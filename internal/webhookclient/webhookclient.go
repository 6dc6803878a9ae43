// Package webhookclient loads the client through which authn/tokenreview
// and authz/webhook reach a remote review service, in kube-apiserver's two
// ways: a kubeconfig of a kube-apiserver whose review API is used, as
// aggregated API servers delegate (--authentication-kubeconfig,
// --authorization-kubeconfig), or kube-apiserver's own webhook
// configuration, a kubeconfig whose cluster's server URL is the exact URL
// reviews are POSTed to (--authentication-token-webhook-config-file,
// --authorization-webhook-config-file). It also records the metrics
// k8s.io/apiserver's webhooks report in a lazyapi metrics set.
package webhookclient

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apimachinery/pkg/util/wait"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Defaults: the client timeouts of the two ways to reach the webhook
// (aggregated servers' delegating clients: 10 s; kube-apiserver's webhook
// configuration: 30 s), and the review version kube-apiserver sends to a
// configured webhook.
const (
	DefaultKubeconfigTimeout = 10 * time.Second
	DefaultConfigFileTimeout = 30 * time.Second
	DefaultVersion           = "v1beta1"
)

// Config says how to reach the review service. Exactly one of Kubeconfig
// and ConfigFile is set.
type Config struct {
	// Kubeconfig reaches a kube-apiserver: reviews are created through
	// its API (/apis/<group>/v1/<reviews>), as aggregated API servers
	// delegate.
	Kubeconfig string
	// ConfigFile is kube-apiserver's webhook configuration: a kubeconfig
	// whose cluster's server URL is the exact URL the review is POSTed
	// to, in Version.
	ConfigFile string
	// Version is the review version sent to ConfigFile's webhook: v1 or
	// v1beta1; "": DefaultVersion.
	Version string
	// Timeout bounds one review; 0: the defaults above.
	Timeout time.Duration
	// Backoff retries transient failures (connection reset, 429, 5xx,
	// timeouts); nil: k8s.io/apiserver's default (5 tries from 500 ms,
	// factor 1.5).
	Backoff *wait.Backoff
}

// Client is a loaded Config.
type Client struct {
	// REST reaches the service. For a Kubeconfig it has the high
	// client-side limits of k8s.io/apiserver's delegating options (QPS
	// 200, burst 400: lazyapi's own admission is the limit) and no
	// Timeout of its own (callers set it, or hand Timeout to the
	// authenticator, as k8s.io/apiserver's do); for a ConfigFile, the
	// Timeout.
	REST *rest.Config
	// Delegated: REST is a kube-apiserver's (Kubeconfig), not the
	// webhook's exact URL (ConfigFile).
	Delegated bool
	// Version is ConfigFile's review version (DefaultVersion if unset).
	Version string
	// Timeout is Config.Timeout or the default of the way chosen.
	Timeout time.Duration
	// Backoff is Config.Backoff or k8s.io/apiserver's default.
	Backoff wait.Backoff
}

// Load reads the kubeconfig c names. Nothing is sent.
func (c Config) Load() (*Client, error) {
	if (c.Kubeconfig == "") == (c.ConfigFile == "") {
		return nil, errors.New("webhookclient: exactly one of Kubeconfig and ConfigFile is needed")
	}
	// The default of both k8s.io/apiserver webhooks (token and
	// SubjectAccessReview): DefaultRetryBackoff of each is this.
	cl := &Client{Backoff: webhookutil.DefaultRetryBackoffWithInitialDelay(500 * time.Millisecond)}
	if c.Backoff != nil {
		cl.Backoff = *c.Backoff
	}
	var err error
	if c.Kubeconfig != "" {
		// As DelegatingAuthenticationOptions and
		// DelegatingAuthorizationOptions load --authentication-kubeconfig
		// and --authorization-kubeconfig.
		cl.REST, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
		}
		cl.REST.QPS, cl.REST.Burst = 200, 400
		cl.Delegated, cl.Timeout = true, orDefault(c.Timeout, DefaultKubeconfigTimeout)
		return cl, nil
	}
	if cl.REST, err = webhookutil.LoadKubeconfig(c.ConfigFile, nil); err != nil {
		return nil, fmt.Errorf("cannot load the webhook configuration: %w", err)
	}
	cl.Timeout = orDefault(c.Timeout, DefaultConfigFileTimeout)
	cl.REST.Timeout = cl.Timeout
	cl.Version = c.Version
	if cl.Version == "" {
		cl.Version = DefaultVersion
	}
	return cl, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Metrics records the request metrics k8s.io/apiserver's webhooks report
// (RecordRequestTotal, RecordRequestLatency) as <prefix>_requests_total{code}
// (one per HTTP request, retries included) and
// <prefix>_request_duration_seconds. It is safe for concurrent use.
type Metrics struct {
	ms      *metrics.Set
	total   string // the counter's name up to its code label's value
	latency *metrics.PrometheusHistogram
}

// NewMetrics returns the metrics named from prefix in ms (nil: a set of
// their own, not exported).
func NewMetrics(ms *metrics.Set, prefix string) *Metrics {
	if ms == nil {
		ms = metrics.NewSet()
	}
	return &Metrics{ms: ms, total: prefix + `_requests_total{code=`, latency: ms.GetOrCreatePrometheusHistogram(prefix + `_request_duration_seconds`)}
}

// RecordRequestTotal counts one request answered with code.
func (m *Metrics) RecordRequestTotal(_ context.Context, code string) {
	m.ms.GetOrCreateCounter(m.total + strconv.Quote(code) + `}`).Inc()
}

// RecordRequestLatency records one request's duration in seconds.
func (m *Metrics) RecordRequestLatency(_ context.Context, _ string, seconds float64) {
	m.latency.Update(seconds)
}
