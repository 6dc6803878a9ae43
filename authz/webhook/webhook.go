// Package webhook is the Webhook mode of --authorization-mode: the
// decision is asked of a remote service with a SubjectAccessReview, as
// kube-apiserver and aggregated API servers ask it. It wraps
// k8s.io/apiserver's webhook authorizer (plugin/pkg/authorizer/webhook:
// the request, its retries, the answer cache by SubjectAccessReview spec
// with separate TTLs for allowed and unauthorized answers) and only
// translates lazyapi's authz.Attributes into its attributes.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lazyapi/lazyapi/authz"
)

// Defaults: kube-apiserver's --authorization-webhook-cache-authorized-ttl
// and --authorization-webhook-cache-unauthorized-ttl, and the client
// timeouts of the two ways to reach the webhook (aggregated servers'
// --authorization-kubeconfig client: 10 s; kube-apiserver's webhook
// configuration: 30 s).
const (
	DefaultAuthorizedTTL     = 5 * time.Minute
	DefaultUnauthorizedTTL   = 30 * time.Second
	DefaultKubeconfigTimeout = 10 * time.Second
	DefaultConfigFileTimeout = 30 * time.Second
)

// Config configures the Webhook mode. Exactly one of Kubeconfig and
// ConfigFile is set.
type Config struct {
	// Kubeconfig (--authorization-kubeconfig) reaches a kube-apiserver:
	// SubjectAccessReviews (authorization.k8s.io/v1) are created at its
	// /apis/authorization.k8s.io/v1/subjectaccessreviews, as aggregated
	// API servers delegate.
	Kubeconfig string
	// ConfigFile (--authorization-webhook-config-file) is kube-apiserver's
	// webhook configuration: a kubeconfig whose cluster's server URL is
	// the exact URL the SubjectAccessReview is POSTed to, in Version.
	ConfigFile string
	// Version is the SubjectAccessReview version sent to ConfigFile's
	// webhook: v1 or v1beta1 (--authorization-webhook-version).
	Version string
	// AuthorizedTTL and UnauthorizedTTL are how long an allowed and a
	// not allowed answer are reused (0: not cached).
	AuthorizedTTL, UnauthorizedTTL time.Duration
	// Timeout bounds one request to the webhook; 0: the defaults above.
	Timeout time.Duration
	// Backoff is the retry of transient failures (connection reset,
	// 429, 5xx, timeouts); nil: k8s.io/apiserver's default (5 tries
	// from 500 ms, factor 1.5).
	Backoff *wait.Backoff
	// Metrics receives lazyapi_authorization_webhook_requests_total{code}
	// (one per HTTP request to the webhook, retries included) and
	// lazyapi_authorization_webhook_request_duration_seconds.
	Metrics *metrics.Set
}

// Authorizer is the Webhook mode. It is safe for concurrent use.
type Authorizer struct {
	w *sarwebhook.WebhookAuthorizer
}

var _ authz.Authorizer = (*Authorizer)(nil)

// New returns the Webhook mode for cfg. Nothing is sent before the first
// request.
func New(cfg Config) (*Authorizer, error) {
	if (cfg.Kubeconfig == "") == (cfg.ConfigFile == "") {
		return nil, errors.New("authz/webhook: exactly one of Kubeconfig and ConfigFile is needed")
	}
	backoff := cfg.Backoff
	if backoff == nil {
		backoff = sarwebhook.DefaultRetryBackoff()
	}
	ms := cfg.Metrics
	if ms == nil {
		ms = metrics.NewSet()
	}
	am := &vmMetrics{ms: ms, latency: ms.GetOrCreateHistogram(`lazyapi_authorization_webhook_request_duration_seconds`)}
	compiler := authorizationcel.NewDefaultCompiler()
	var w *sarwebhook.WebhookAuthorizer
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
		}
		// As DelegatingAuthorizationOptions: high client-side limits
		// (the admission of lazyapi's own requests is the limit).
		rc.QPS, rc.Burst, rc.Timeout = 200, 400, orDefault(cfg.Timeout, DefaultKubeconfigTimeout)
		client, err := authorizationv1client.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		if w, err = sarwebhook.NewFromInterface(client, cfg.AuthorizedTTL, cfg.UnauthorizedTTL, *backoff,
			authorizer.DecisionNoOpinion, am, compiler); err != nil {
			return nil, err
		}
	} else {
		rc, err := webhookutil.LoadKubeconfig(cfg.ConfigFile, nil)
		if err != nil {
			return nil, fmt.Errorf("cannot load the webhook configuration: %w", err)
		}
		rc.Timeout = orDefault(cfg.Timeout, DefaultConfigFileTimeout)
		version := cfg.Version
		if version == "" {
			version = "v1beta1"
		}
		// kube-apiserver's failure policy for the flag-configured
		// webhook: NoOpinion (the next mode decides; never allow).
		if w, err = sarwebhook.New(rc, version, cfg.AuthorizedTTL, cfg.UnauthorizedTTL, *backoff,
			authorizer.DecisionNoOpinion, nil, "webhook", am, compiler); err != nil {
			return nil, err
		}
	}
	return &Authorizer{w: w}, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Authorize asks the webhook (or its cache) about a, with the attributes
// kube-apiserver's authorization filter gives it (GetAuthorizerAttributes:
// the selectors parsed, a bad one passed on as its parsing error).
// Failures are NoOpinion with the error, as kube-apiserver's Webhook mode:
// the chain never allows on them.
func (w *Authorizer) Authorize(a *authz.Attributes) (authz.Decision, string, error) {
	rec := authorizer.AttributesRecord{
		User:            &user.DefaultInfo{Name: a.User, UID: a.UID, Groups: a.Groups, Extra: a.Extra},
		Verb:            a.Verb,
		Namespace:       a.Namespace,
		APIGroup:        a.APIGroup,
		APIVersion:      a.APIVersion,
		Resource:        a.Resource,
		Subresource:     a.Subresource,
		Name:            a.Name,
		ResourceRequest: a.ResourceRequest,
		Path:            a.Path,
	}
	if a.FieldSelector != "" {
		if sel, err := fields.ParseSelector(a.FieldSelector); err != nil {
			rec.FieldSelectorParsingErr = err
		} else if reqs := sel.Requirements(); len(reqs) > 0 {
			rec.FieldSelectorRequirements = reqs
		}
	}
	if a.LabelSelector != "" {
		if sel, err := labels.Parse(a.LabelSelector); err != nil {
			rec.LabelSelectorParsingErr = err
		} else if reqs, _ := sel.Requirements(); len(reqs) > 0 {
			rec.LabelSelectorRequirements = reqs
		}
	}
	d, reason, err := w.w.Authorize(context.Background(), rec)
	switch d {
	case authorizer.DecisionAllow:
		return authz.Allow, reason, err
	case authorizer.DecisionDeny:
		return authz.Deny, reason, err
	}
	return authz.NoOpinion, reason, err
}

// RulesUnsupported is the webhook authorizer's RulesFor error: a
// SelfSubjectRulesReview is incomplete with it.
func (w *Authorizer) RulesUnsupported() string {
	_, _, _, err := w.w.RulesFor(context.Background(), &user.DefaultInfo{}, "")
	return err.Error()
}

var _ authz.RulesUnsupported = (*Authorizer)(nil)

// vmMetrics records k8s.io/apiserver's webhook authorizer metrics in
// lazyapi's metrics set.
type vmMetrics struct {
	webhookmetrics.NoopWebhookMetrics
	authorizationcel.NoopMatcherMetrics
	ms      *metrics.Set
	latency *metrics.Histogram
}

func (m *vmMetrics) RecordRequestTotal(_ context.Context, code string) {
	m.ms.GetOrCreateCounter(`lazyapi_authorization_webhook_requests_total{code=` + strconv.Quote(code) + `}`).Inc()
}

func (m *vmMetrics) RecordRequestLatency(_ context.Context, _ string, latency float64) {
	m.latency.Update(latency)
}
