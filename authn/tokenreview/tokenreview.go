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
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/token/cache"
	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	tokenwebhook "k8s.io/apiserver/plugin/pkg/authenticator/token/webhook"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lazyapi/lazyapi/authn"
)

// Defaults: the answer cache TTL of k8s.io/apiserver's delegating
// authentication (--authentication-token-webhook-cache-ttl; kube-apiserver's
// own flag defaults to 2m), and the timeouts of its TokenReview client
// (aggregated servers: 10 s) and of kube-apiserver's webhook (30 s).
const (
	DefaultCacheTTL          = 10 * time.Second
	DefaultKubeconfigTimeout = 10 * time.Second
	DefaultConfigFileTimeout = 30 * time.Second
)

// Config configures the TokenReview authenticator. Exactly one of
// Kubeconfig and ConfigFile is set.
type Config struct {
	// Kubeconfig (--authentication-kubeconfig) reaches a kube-apiserver:
	// TokenReviews (authentication.k8s.io/v1) are created at its
	// /apis/authentication.k8s.io/v1/tokenreviews.
	Kubeconfig string
	// ConfigFile (--authentication-token-webhook-config-file) is
	// kube-apiserver's token webhook configuration: a kubeconfig whose
	// cluster's server URL is the exact URL the TokenReview is POSTed to,
	// in Version.
	ConfigFile string
	// Version: v1 or v1beta1 (--authentication-token-webhook-version) for
	// ConfigFile.
	Version string
	// CacheTTL is how long an answer, positive or negative, is reused
	// (0: not cached). Failures to ask are not cached.
	CacheTTL time.Duration
	// Audiences are the API's audiences (--api-audiences): sent in the
	// review, and the answer's must share one; none: no audience check.
	Audiences []string
	// Timeout bounds one review; 0: the defaults above.
	Timeout time.Duration
	// Backoff retries transient failures; nil: k8s.io/apiserver's default.
	Backoff *wait.Backoff
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
	if (cfg.Kubeconfig == "") == (cfg.ConfigFile == "") {
		return nil, errors.New("authn/tokenreview: exactly one of Kubeconfig and ConfigFile is needed")
	}
	backoff := cfg.Backoff
	if backoff == nil {
		backoff = tokenwebhook.DefaultRetryBackoff()
	}
	ms := cfg.Metrics
	if ms == nil {
		ms = metrics.NewSet()
	}
	latency := ms.GetOrCreateHistogram(`lazyapi_authentication_webhook_request_duration_seconds`)
	am := tokenwebhook.AuthenticatorMetrics{
		RecordRequestTotal: func(_ context.Context, code string) {
			ms.GetOrCreateCounter(`lazyapi_authentication_webhook_requests_total{code=` + strconv.Quote(code) + `}`).Inc()
		},
		RecordRequestLatency: func(_ context.Context, _ string, s float64) { latency.Update(s) },
	}
	auds := authenticator.Audiences(cfg.Audiences)
	var w authenticator.Token
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: cfg.Kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("cannot load the kubeconfig: %w", err)
		}
		// As DelegatingAuthenticationOptions' client.
		rc.QPS, rc.Burst = 200, 400
		client, err := authenticationv1client.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		if w, err = tokenwebhook.NewFromInterface(client, auds, *backoff, orDefault(cfg.Timeout, DefaultKubeconfigTimeout), am); err != nil {
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
		wa, err := tokenwebhook.New(rc, version, auds, *backoff)
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

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
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
