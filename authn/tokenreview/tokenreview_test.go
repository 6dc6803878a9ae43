package tokenreview_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authn/tokenreview"
	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
)

// review knows one valid token; "expired-token" is refused with a reason.
func review(token string) (authenticationv1.UserInfo, bool, string) {
	switch token {
	case "oidc-alice":
		return authenticationv1.UserInfo{Username: "alice", UID: "a-1", Groups: []string{"devs"},
			Extra: map[string]authenticationv1.ExtraValue{"scopes": {"read"}}}, true, ""
	case "expired-token":
		return authenticationv1.UserInfo{}, false, "token has expired"
	}
	return authenticationv1.UserInfo{}, false, ""
}

func TestTokenReview(t *testing.T) {
	s := reviewtest.Start(t)
	s.Authenticate = review
	dir := t.TempDir()
	for name, cfg := range map[string]tokenreview.Config{
		"kubeconfig":  {Webhook: webhookclient.Config{Kubeconfig: s.Kubeconfig(t, dir, "kubeconfig", "")}},
		"config-file": {Webhook: webhookclient.Config{ConfigFile: s.Kubeconfig(t, dir, "webhook", reviewtest.TokenReviewPath), Version: "v1"}},
		"audiences":   {Webhook: webhookclient.Config{Kubeconfig: s.Kubeconfig(t, dir, "kubeconfig", "")}, Audiences: []string{"https://kubernetes.default.svc"}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.CacheTTL = tokenreview.DefaultCacheTTL
			tr, err := tokenreview.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			u, err := tr.AuthenticateToken(ctx, "oidc-alice")
			if err != nil || u == nil || u.Name != "alice" || u.UID != "a-1" || !slices.Equal(u.Groups, []string{"devs"}) ||
				!slices.Equal(u.Extra["scopes"], []string{"read"}) || u.Method != "webhook" {
				t.Errorf("valid token: %+v, %v", u, err)
			}
			if u, err := tr.AuthenticateToken(ctx, "unknown"); u != nil || err != nil {
				t.Errorf("unknown token: %+v, %v; want nil, nil", u, err)
			}
			if u, err := tr.AuthenticateToken(ctx, "expired-token"); u != nil || err == nil || !strings.Contains(err.Error(), "token has expired") {
				t.Errorf("refused with a reason: %+v, %v", u, err)
			}
		})
	}
}

// TestTokenReviewCache: positive and negative answers are reused for the
// TTL (1 review per 1,000 requests); with TTL 0 each is a review;
// failures to ask are not cached; static tokens never reach the webhook.
func TestTokenReviewCache(t *testing.T) {
	s := reviewtest.Start(t)
	s.Authenticate = review
	dir := t.TempDir()
	kc := s.Kubeconfig(t, dir, "kubeconfig", "")
	wc := s.Kubeconfig(t, dir, "webhook", reviewtest.TokenReviewPath)
	for _, tt := range []struct {
		ttl         bool
		wantPer1000 int64
	}{{true, 1}, {false, 1000}} {
		ms := metrics.NewSet()
		cfg := tokenreview.Config{Webhook: webhookclient.Config{Kubeconfig: kc}, Metrics: ms}
		if tt.ttl {
			cfg.CacheTTL = tokenreview.DefaultCacheTTL
		} else {
			// The webhook file: no client-side rate limit.
			cfg = tokenreview.Config{Webhook: webhookclient.Config{ConfigFile: wc, Version: "v1"}, Metrics: ms}
		}
		tr, err := tokenreview.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		a := authn.New(authn.Config{Tokens: authn.Tokens{"static": {Name: "static-user"}}, TokenReview: tr})
		for _, c := range []struct {
			token, user string
		}{{"oidc-alice", "alice"}, {"unknown", ""}} {
			before := s.TokenReviews.Load()
			for range 1000 {
				u, err := a.Authenticate([]byte("Bearer "+c.token), nil)
				if c.user != "" && (err != nil || u.Name != c.user || !slices.Contains(u.Groups, authn.AllAuthenticated)) {
					t.Fatalf("Authenticate(%s) = %+v, %v", c.token, u, err)
				}
				if c.user == "" && !errors.Is(err, authn.ErrInvalidToken) {
					t.Fatalf("Authenticate(%s) = %+v, %v; want ErrInvalidToken", c.token, u, err)
				}
			}
			if n := s.TokenReviews.Load() - before; n != tt.wantPer1000 {
				t.Errorf("TTL %v, token %s: %d reviews for 1,000 requests, want %d", tt.ttl, c.token, n, tt.wantPer1000)
			}
		}
		before := s.TokenReviews.Load()
		if u, err := a.Authenticate([]byte("Bearer static"), nil); err != nil || u.Name != "static-user" || s.TokenReviews.Load() != before {
			t.Errorf("static token: %+v, %v, %d reviews", u, err, s.TokenReviews.Load()-before)
		}
	}

	// Down: a new token cannot be reviewed (an error, 401 for the
	// request), a cached answer still counts; the error is not cached.
	tr, err := tokenreview.New(tokenreview.Config{Webhook: webhookclient.Config{Kubeconfig: kc, Backoff: &wait.Backoff{Steps: 1}}, CacheTTL: tokenreview.DefaultCacheTTL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if u, err := tr.AuthenticateToken(ctx, "oidc-alice"); u == nil || err != nil {
		t.Fatalf("AuthenticateToken = %+v, %v", u, err)
	}
	s.Stop()
	if u, err := tr.AuthenticateToken(ctx, "oidc-alice"); u == nil || err != nil {
		t.Errorf("webhook down, cached: %+v, %v", u, err)
	}
	s.Authenticate = func(token string) (authenticationv1.UserInfo, bool, string) {
		if token == "new-token" {
			return authenticationv1.UserInfo{Username: "newcomer"}, true, ""
		}
		return review(token)
	}
	if u, err := tr.AuthenticateToken(ctx, "new-token"); u != nil || err == nil {
		t.Errorf("webhook down, new token: %+v, %v; want an error", u, err)
	} else if strings.Contains(err.Error(), "new-token") {
		t.Errorf("the error names the token: %v", err)
	}
	s.Restart(t)
	if u, err := tr.AuthenticateToken(ctx, "new-token"); u == nil || u.Name != "newcomer" {
		t.Errorf("webhook back, new token: %+v, %v (a failure must not be cached)", u, err)
	}
}
