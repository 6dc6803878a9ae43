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
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	authorizationcel "k8s.io/apiserver/pkg/authorization/cel"
	sarwebhook "k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	webhookmetrics "k8s.io/apiserver/plugin/pkg/authorizer/webhook/metrics"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
)

// Defaults: kube-apiserver's --authorization-webhook-cache-authorized-ttl
// and --authorization-webhook-cache-unauthorized-ttl.
const (
	DefaultAuthorizedTTL   = 5 * time.Minute
	DefaultUnauthorizedTTL = 30 * time.Second
)

// Config configures the Webhook mode.
type Config struct {
	// Webhook reaches the service: its Kubeconfig
	// (--authorization-kubeconfig) a kube-apiserver, where
	// SubjectAccessReviews (authorization.k8s.io/v1) are created at
	// /apis/authorization.k8s.io/v1/subjectaccessreviews, as aggregated
	// API servers delegate; or its ConfigFile
	// (--authorization-webhook-config-file, Version:
	// --authorization-webhook-version) kube-apiserver's webhook
	// configuration.
	Webhook webhookclient.Config
	// AuthorizedTTL and UnauthorizedTTL are how long an allowed and a
	// not allowed answer are reused (0: not cached).
	AuthorizedTTL, UnauthorizedTTL time.Duration
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
	wc, err := cfg.Webhook.Load()
	if err != nil {
		return nil, err
	}
	am := &vmMetrics{Metrics: webhookclient.NewMetrics(cfg.Metrics, "lazyapi_authorization_webhook")}
	compiler := authorizationcel.NewDefaultCompiler()
	var w *sarwebhook.WebhookAuthorizer
	if wc.Delegated {
		// As DelegatingAuthorizationOptions: the timeout is the
		// client's.
		wc.REST.Timeout = wc.Timeout
		client, err := authorizationv1client.NewForConfig(wc.REST)
		if err != nil {
			return nil, err
		}
		if w, err = sarwebhook.NewFromInterface(client, cfg.AuthorizedTTL, cfg.UnauthorizedTTL, wc.Backoff,
			authorizer.DecisionNoOpinion, am, compiler); err != nil {
			return nil, err
		}
	} else {
		// kube-apiserver's failure policy for the flag-configured
		// webhook: NoOpinion (the next mode decides; never allow).
		if w, err = sarwebhook.New(wc.REST, wc.Version, cfg.AuthorizedTTL, cfg.UnauthorizedTTL, wc.Backoff,
			authorizer.DecisionNoOpinion, nil, "webhook", am, compiler); err != nil {
			return nil, err
		}
	}
	return &Authorizer{w: w}, nil
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
// lazyapi's metrics set (the request ones; the others are not kept).
type vmMetrics struct {
	webhookmetrics.NoopWebhookMetrics
	authorizationcel.NoopMatcherMetrics
	*webhookclient.Metrics
}
