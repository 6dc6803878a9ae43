package webhook_test

import (
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
)

// answer allows alice's configmaps, denies mallory outright, and has no
// opinion on anything else (with a reason).
func answer(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	switch {
	case spec.User == "alice" && spec.ResourceAttributes != nil && spec.ResourceAttributes.Resource == "configmaps":
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "alice reads configmaps"}
	case spec.User == "alice" && spec.NonResourceAttributes != nil && spec.NonResourceAttributes.Path == "/metrics":
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true}
	case spec.User == "mallory":
		return authorizationv1.SubjectAccessReviewStatus{Denied: true, Reason: "mallory is banned"}
	}
	return authorizationv1.SubjectAccessReviewStatus{Reason: "no rule for " + spec.User}
}

func newServer(t *testing.T) *reviewtest.Server {
	s := reviewtest.Start(t)
	s.Authorize = answer
	return s
}

// noRetry keeps a test of the webhook down short: one try.
var noRetry = &wait.Backoff{Steps: 1}

func TestWebhookDecisions(t *testing.T) {
	s := newServer(t)
	dir := t.TempDir()
	for name, cfg := range map[string]webhook.Config{
		// As aggregated servers: a kubeconfig of kube-apiserver, v1 at its path.
		"kubeconfig": {Webhook: webhookclient.Config{Kubeconfig: s.Kubeconfig(t, dir, "kubeconfig", "")}},
		// As kube-apiserver: the webhook's exact URL, version v1.
		"config-file": {Webhook: webhookclient.Config{ConfigFile: s.Kubeconfig(t, dir, "webhook", reviewtest.SubjectAccessReviewPath), Version: "v1"}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.AuthorizedTTL, cfg.UnauthorizedTTL = webhook.DefaultAuthorizedTTL, webhook.DefaultUnauthorizedTTL
			w, err := webhook.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, tt := range []struct {
				a      authz.Attributes
				want   authz.Decision
				reason string
			}{
				{authz.Attributes{User: "alice", Verb: "list", ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "ns"}, authz.Allow, "alice reads configmaps"},
				{authz.Attributes{User: "alice", Verb: "get", Path: "/metrics"}, authz.Allow, ""},
				{authz.Attributes{User: "alice", Verb: "list", ResourceRequest: true, APIVersion: "v1", Resource: "secrets", Namespace: "ns"}, authz.NoOpinion, "no rule for alice"},
				{authz.Attributes{User: "mallory", Verb: "get", ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "ns", Name: "x"}, authz.Deny, "mallory is banned"},
			} {
				d, reason, err := w.Authorize(&tt.a)
				if d != tt.want || reason != tt.reason || err != nil {
					t.Errorf("Authorize(%+v) = %v, %q, %v; want %v, %q", tt.a, d, reason, err, tt.want, tt.reason)
				}
			}
		})
	}
}

// TestWebhookAttributes: the SubjectAccessReview carries kube-apiserver's
// attributes: the user with UID, groups and extra; a LIST's field and
// label selectors as requirements (the metadata.name one also as name);
// a non-resource path and verb.
func TestWebhookAttributes(t *testing.T) {
	s := newServer(t)
	w, err := webhook.New(webhook.Config{Webhook: webhookclient.Config{Kubeconfig: s.Kubeconfig(t, t.TempDir(), "kubeconfig", "")}})
	if err != nil {
		t.Fatal(err)
	}
	a := authz.Attributes{User: "alice", UID: "u-1", Groups: []string{"g1", "system:authenticated"},
		Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"p"}},
		Verb:  "watch", ResourceRequest: true, APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Namespace: "ns",
		Name: "web", FieldSelector: "metadata.name=web,status.phase!=Failed", LabelSelector: "app in (a,b),!gone"}
	if _, _, err := w.Authorize(&a); err != nil {
		t.Fatal(err)
	}
	got, _ := s.LastSubjectAccessReview()
	want := authorizationv1.SubjectAccessReviewSpec{
		User: "alice", UID: "u-1", Groups: []string{"g1", "system:authenticated"},
		Extra: map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"p"}},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "ns", Verb: "watch", Group: "apps", Version: "v1",
			Resource: "deployments", Name: "web",
			FieldSelector: &authorizationv1.FieldSelectorAttributes{Requirements: []metav1.FieldSelectorRequirement{
				{Key: "metadata.name", Operator: metav1.FieldSelectorOpIn, Values: []string{"web"}},
				{Key: "status.phase", Operator: metav1.FieldSelectorOpNotIn, Values: []string{"Failed"}}}},
			LabelSelector: &authorizationv1.LabelSelectorAttributes{Requirements: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
				{Key: "gone", Operator: metav1.LabelSelectorOpDoesNotExist}}}},
	}
	if !equalJSON(t, got, want) {
		t.Errorf("SubjectAccessReview spec\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
	if _, _, err := w.Authorize(&authz.Attributes{User: "bob", Verb: "get", Path: "/openapi/v3"}); err != nil {
		t.Fatal(err)
	}
	got, _ = s.LastSubjectAccessReview()
	if nr := got.NonResourceAttributes; got.ResourceAttributes != nil || nr == nil || nr.Path != "/openapi/v3" || nr.Verb != "get" {
		t.Errorf("non-resource review: %s", mustJSON(t, got))
	}
}

// TestWebhookCache: allowed and unauthorized answers are reused for their
// TTLs (one review for 1,000 decisions each); with TTL 0 every decision
// is a review; the reviews are counted in the metrics.
func TestWebhookCache(t *testing.T) {
	s := newServer(t)
	dir := t.TempDir()
	kc := s.Kubeconfig(t, dir, "kubeconfig", "")
	wc := s.Kubeconfig(t, dir, "webhook", reviewtest.SubjectAccessReviewPath)
	allowed := authz.Attributes{User: "alice", Verb: "get", ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "ns", Name: "x"}
	refused := allowed
	refused.Resource = "secrets"
	for _, tt := range []struct {
		name         string
		authorized   bool // TTLs set
		wantPer1000  int64
		wantRequests string
	}{
		{"cached", true, 1, `lazyapi_authorization_webhook_requests_total{code="200"} 2`},
		{"uncached", false, 1000, `lazyapi_authorization_webhook_requests_total{code="200"} 2000`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ms := metrics.NewSet()
			cfg := webhook.Config{Webhook: webhookclient.Config{Kubeconfig: kc}, Metrics: ms}
			if !tt.authorized {
				// The webhook file: no client-side rate limit (the
				// kubeconfig's client allows 200 reviews per second).
				cfg = webhook.Config{Webhook: webhookclient.Config{ConfigFile: wc, Version: "v1"}, Metrics: ms}
			}
			if tt.authorized {
				cfg.AuthorizedTTL, cfg.UnauthorizedTTL = webhook.DefaultAuthorizedTTL, webhook.DefaultUnauthorizedTTL
			}
			w, err := webhook.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				a    *authz.Attributes
				want authz.Decision
			}{{&allowed, authz.Allow}, {&refused, authz.NoOpinion}} {
				before := s.SubjectAccessReviews.Load()
				for range 1000 {
					if d, _, err := w.Authorize(c.a); d != c.want || err != nil {
						t.Fatalf("Authorize = %v, %v; want %v", d, err, c.want)
					}
				}
				if n := s.SubjectAccessReviews.Load() - before; n != tt.wantPer1000 {
					t.Errorf("%s %s: %d reviews for 1,000 decisions, want %d", tt.name, c.want, n, tt.wantPer1000)
				}
			}
			var b strings.Builder
			ms.WritePrometheus(&b)
			if !strings.Contains(b.String(), tt.wantRequests) {
				t.Errorf("metrics lack %s:\n%s", tt.wantRequests, b.String())
			}
		})
	}
}

// TestWebhookDown: a webhook that cannot be reached is NoOpinion with an
// error (never allow); answers cached before still count; the chain
// reports the error so that the request is not allowed.
func TestWebhookDown(t *testing.T) {
	s := newServer(t)
	w, err := webhook.New(webhook.Config{Webhook: webhookclient.Config{Kubeconfig: s.Kubeconfig(t, t.TempDir(), "kubeconfig", ""), Backoff: noRetry},
		AuthorizedTTL: webhook.DefaultAuthorizedTTL, UnauthorizedTTL: webhook.DefaultUnauthorizedTTL})
	if err != nil {
		t.Fatal(err)
	}
	cached := authz.Attributes{User: "alice", Verb: "get", ResourceRequest: true, APIVersion: "v1", Resource: "configmaps", Namespace: "ns", Name: "x"}
	if d, _, err := w.Authorize(&cached); d != authz.Allow || err != nil {
		t.Fatalf("Authorize = %v, %v", d, err)
	}
	s.Stop()
	fresh := cached
	fresh.Name = "y"
	d, reason, err := w.Authorize(&fresh)
	if d != authz.NoOpinion || err == nil {
		t.Errorf("webhook down: Authorize = %v, %q, %v; want no opinion with an error", d, reason, err)
	}
	if d, _, err := w.Authorize(&cached); d != authz.Allow || err != nil {
		t.Errorf("webhook down, cached answer: Authorize = %v, %v; want allowed", d, err)
	}
	chain, err := authz.NewChain([]authz.Mode{{Name: authz.ModeRBAC, Authorizer: authz.NewRBAC()}, {Name: authz.ModeWebhook, Authorizer: w}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, _, err := chain.Authorize(&fresh); ok || err == nil {
		t.Errorf("chain with the webhook down: allowed %v, err %v; want refused with an error", ok, err)
	}
	// A later mode still decides, as in kube-apiserver's union.
	chain, _ = authz.NewChain([]authz.Mode{{Name: authz.ModeWebhook, Authorizer: w}, {Name: authz.ModeAlwaysAllow, Authorizer: authz.AlwaysAllow{}}}, nil)
	if ok, mode, _, _ := chain.Authorize(&fresh); !ok || mode != authz.ModeAlwaysAllow {
		t.Errorf("Webhook,AlwaysAllow with the webhook down: allowed %v by %q", ok, mode)
	}
	s.Restart(t)
	if d, _, err := w.Authorize(&fresh); d != authz.Allow || err != nil {
		t.Errorf("webhook back: Authorize = %v, %v", d, err)
	}
}
