// Package tokenreview authenticates bearer tokens lazyapi cannot verify
// itself by asking a remote service with a TokenReview, as aggregated API
// servers delegate authentication (--authentication-kubeconfig) and as
// kube-apiserver's token webhook does
// (--authentication-token-webhook-config-file). It is k8s.io/apiserver's
// webhook token authenticator (plugin/pkg/authenticator/token/webhook:
// the request, its retries, the audience check) behind its token cache
// (pkg/authentication/token/cache: positive and negative answers kept for
// the TTL, keyed by an HMAC of the token, concurrent requests for one
// token folded into one review), composed as
// authenticatorfactory.DelegatingAuthenticatorConfig composes them.
package tokenreview

import (
	"context"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
)

// DefaultCacheTTL is the answer cache TTL of k8s.io/apiserver's delegating
// authentication (--authentication-token-webhook-cache-ttl; kube-apiserver's
// own flag defaults to 2m).
const DefaultCacheTTL = 10 * time.Second

// Config configures the TokenReview authenticator.
type Config struct {
	// Webhook reaches the service: its Kubeconfig
	// (--authentication-kubeconfig) a kube-apiserver, where TokenReviews
	// (authentication.k8s.io/v1) are created at
	// /apis/authentication.k8s.io/v1/tokenreviews; or its ConfigFile
	// (--authentication-token-webhook-config-file, Version:
	// --authentication-token-webhook-version) kube-apiserver's token
	// webhook configuration.
	Webhook webhookclient.Config
	// CacheTTL is how long an answer, positive or negative, is reused
	// (0: not cached). Failures to ask are not cached.
	CacheTTL time.Duration
	// Audiences are the API's audiences (--api-audiences): sent in the
	// review, and the answer's must share one; none: no audience check.
	Audiences []string
	// Metrics receives lazyapi_authentication_webhook_requests_total{code}
	// (one per HTTP request, retries included) and
	// lazyapi_authentication_webhook_request_duration_seconds.
	Metrics *metrics.Set
}

// Authenticator asks TokenReviews. It is safe for concurrent use.
type Authenticator struct {
	tok       authenticator.Token // cached
	audiences authenticator.Audiences
}

var _ authn.TokenAuthenticator = (*Authenticator)(nil)

// New returns the authenticator for cfg. Nothing is sent before the first
// token.
func New(cfg Config) (*Authenticator, error) {
	wc, err := cfg.Webhook.Load()
	if err != nil {
		return nil, err
	}
	m := webhookclient.NewMetrics(cfg.Metrics, "lazyapi_authentication_webhook")
	am := tokenwebhook.AuthenticatorMetrics{RecordRequestTotal: m.RecordRequestTotal, RecordRequestLatency: m.RecordRequestLatency}
	auds := authenticator.Audiences(cfg.Audiences)
	var w authenticator.Token
	if wc.Delegated {
		// As DelegatingAuthenticatorConfig: the timeout bounds the
		// review (all its tries), the client has none of its own.
		client, err := authenticationv1client.NewForConfig(wc.REST)
		if err != nil {
			return nil, err
		}
		if w, err = tokenwebhook.NewFromInterface(client, auds, wc.Backoff, wc.Timeout, am); err != nil {
			return nil, err
		}
	} else {
		wa, err := tokenwebhook.New(wc.REST, wc.Version, auds, wc.Backoff)
		if err != nil {
			return nil, err
		}
		// tokenwebhook.New records no metrics: count the reviews here.
		w = countingToken{wa, am}
	}
	// kube-apiserver and authenticatorfactory: errors are not cached,
	// answers are for the TTL either way.
	return &Authenticator{tok: cache.New(w, false, cfg.CacheTTL, cfg.CacheTTL), audiences: auds}, nil
}

// AuthenticateToken returns the user the webhook says token belongs to;
// (nil, nil) when it says the token is not valid, an error when it could
// not be asked or gave a reason. The token is never part of an error.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (*authn.User, error) {
	if len(a.audiences) > 0 {
		// As kube-apiserver's authentication filter: the review is
		// limited to the API's audiences.
		ctx = authenticator.WithAudiences(ctx, a.audiences)
	}
	resp, ok, err := a.tok.AuthenticateToken(ctx, token)
	if err != nil {
		return nil, err
	}
	if !ok || resp == nil || resp.User == nil {
		return nil, nil
	}
	u := resp.User
	return &authn.User{Name: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra(), Method: "webhook"}, nil
}

// countingToken counts the reviews of an authenticator built by
// tokenwebhook.New (one per call: its retries are not seen).
type countingToken struct {
	authenticator.Token
	m tokenwebhook.AuthenticatorMetrics
}

func (c countingToken) AuthenticateToken(ctx context.Context, token string) (*authenticator.Response, bool, error) {
	start := time.Now()
	resp, ok, err := c.Token.AuthenticateToken(ctx, token)
	code := "200"
	if err != nil {
		code = "<error>"
	}
	c.m.RecordRequestTotal(ctx, code)
	c.m.RecordRequestLatency(ctx, code, time.Since(start).Seconds())
	return resp, ok, err
}
