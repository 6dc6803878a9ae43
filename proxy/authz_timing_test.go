package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/keyutil"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authn/tokenreview"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/rbacetcd"
	authzwebhook "github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
	"github.com/lazyapi/lazyapi/proxy"
)

type etcdGetter struct{ cfg *proxy.Config }

func (g etcdGetter) Get(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := g.cfg.Client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false, err
	}
	return resp.Kvs[0].Value, true, nil
}

// authzBench is the RBAC fixture, the service account of
// ../authn/testdata/sa-tokens.json bound to read ConfigMaps in ns1, and
// the authenticator and chain lazyapi would build.
type authzBench struct {
	e     *env
	a     *authn.Authenticator
	slow  *authn.Authenticator // its clock moves 2 s per call: every token is verified anew
	chain *authz.Chain
	token string
}

func newAuthzBench(b *testing.B, mode string) *authzBench {
	ab := &authzBench{}
	ms := metrics.NewSet()
	e := startEnv(b, func(cfg *proxy.Config) {
		putRBACFixture(b, etcdPutter{cfg})
		p := etcdPutter{cfg}
		meta := func(ns, name, uid string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}
		}
		p.putObj(b, "serviceaccounts", &corev1.ServiceAccount{ObjectMeta: meta("apps", "reader", "sa-uid-1")})
		p.putObj(b, "pods", &corev1.Pod{ObjectMeta: meta("apps", "reader-pod", "pod-uid-1")})
		p.putObj(b, "minions", &corev1.Node{ObjectMeta: meta("", "node-1", "node-uid-1")})
		p.putObj(b, "rolebindings", &rbacv1RoleBinding)
		keys, err := keyutil.PublicKeysFromFile("../authn/testdata/sa.key")
		if err != nil {
			b.Fatal(err)
		}
		mk := func(now func() time.Time) *authn.Authenticator {
			v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{Keys: keys, Issuers: []string{"https://kubernetes.default.svc.cluster.local"},
				LookupLegacy: true, Lookup: etcdGetter{cfg}}, now)
			if err != nil {
				b.Fatal(err)
			}
			tokens, err := authn.LoadTokenFile("testdata/rbac-users.csv")
			if err != nil {
				b.Fatal(err)
			}
			return authn.New(authn.Config{Tokens: tokens, ServiceAccounts: v})
		}
		ab.a = mk(nil)
		var clock atomic.Int64
		clock.Store(time.Now().UnixNano())
		ab.slow = mk(func() time.Time { return time.Unix(0, clock.Add(int64(2*time.Second))) })
		if mode != "" {
			cfg.Authenticator = ab.a
		}
		var m authz.Mode
		switch mode {
		case "RBAC":
			rbac := authz.NewRBAC()
			src, err := rbacetcd.Start(context.Background(), rbacetcd.Config{Client: cfg.Client, RBAC: rbac, Metrics: ms})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(src.Close)
			m = authz.Mode{Name: authz.ModeRBAC, Authorizer: rbac}
		case "AlwaysAllow":
			m = authz.Mode{Name: authz.ModeAlwaysAllow, Authorizer: authz.AlwaysAllow{}}
		}
		if mode != "" {
			chain, err := authz.NewChain([]authz.Mode{m}, ms)
			if err != nil {
				b.Fatal(err)
			}
			cfg.Authorizer = chain
			ab.chain = chain
		}
	})
	ab.e = e
	var toks map[string]string
	raw, err := os.ReadFile("../authn/testdata/sa-tokens.json")
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, &toks); err != nil {
		b.Fatal(err)
	}
	ab.token = toks["pod"]
	e.put(b, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cm"}, Data: map[string]string{"k": "v"}})
	return ab
}

var rbacv1RoleBinding = rbacv1RoleBindingFor("ns1")

// BenchmarkAuthorizeLocal is what lazyapi spends to decide a request of a
// pod's bound service account token: authentication (the verified-token
// cache hit lazyapi takes for every request but one per token and
// second; and the full verification: signature, claims, 3 etcd reads)
// plus RBAC authorization of "get configmaps cm in ns1".
func BenchmarkAuthorizeLocal(b *testing.B) {
	ab := newAuthzBench(b, "RBAC")
	header := []byte("Bearer " + ab.token)
	a := authz.Attributes{Verb: "get", ResourceRequest: true, Namespace: "ns1", APIVersion: "v1", Resource: "configmaps", Name: "cm"}
	run := func(b *testing.B, au *authn.Authenticator) {
		b.ReportAllocs()
		for b.Loop() {
			u, err := au.Authenticate(header, nil)
			if err != nil {
				b.Fatal(err)
			}
			a.User, a.Groups, a.UID, a.Extra = u.Name, u.Groups, u.UID, u.Extra
			if ok, _, _, _ := ab.chain.Authorize(&a); !ok {
				b.Fatal("not allowed")
			}
		}
	}
	b.Run("cached-token", func(b *testing.B) { run(b, ab.a) })
	b.Run("verified-token", func(b *testing.B) { run(b, ab.slow) })
}

// BenchmarkSubjectAccessReview is the same decision asked of a webhook:
// one SubjectAccessReview round trip (JSON over a kept-alive HTTPS
// connection to a loopback server that answers from the same RBAC
// chain), as --authorization-mode=Webhook or a delegating proxy pays per
// uncached request. The server's own work is the local decision.
func BenchmarkSubjectAccessReview(b *testing.B) {
	ab := newAuthzBench(b, "RBAC")
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		ra := sar.Spec.ResourceAttributes
		a := authz.Attributes{User: sar.Spec.User, Groups: sar.Spec.Groups, UID: sar.Spec.UID, Verb: ra.Verb, ResourceRequest: true,
			Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: ra.Version, Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name}
		ok, _, reason, _ := ab.chain.Authorize(&a)
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: ok, Reason: reason}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	defer srv.Close()
	client := srv.Client()
	u, err := ab.a.Authenticate([]byte("Bearer "+ab.token), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		sar := authorizationv1.SubjectAccessReview{TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview"},
			Spec: authorizationv1.SubjectAccessReviewSpec{User: u.Name, Groups: u.Groups, UID: u.UID,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Namespace: "ns1", Version: "v1", Resource: "configmaps", Name: "cm"}}}
		body, _ := json.Marshal(&sar)
		resp, err := client.Post(srv.URL, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var out authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.Status.Allowed {
			b.Fatal(err, out.Status)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkGetAuthz is the latency of a GET of one ConfigMap by a bound
// service account token over HTTP: with --authorization-mode RBAC and
// AlwaysAllow (same authentication), and with no authentication at all.
func BenchmarkGetAuthz(b *testing.B) {
	for _, mode := range []string{"none", "AlwaysAllow", "RBAC"} {
		b.Run(mode, func(b *testing.B) {
			m := mode
			if m == "none" {
				m = ""
			}
			ab := newAuthzBench(b, m)
			client := &http.Client{}
			req, err := http.NewRequest("GET", ab.e.url+"/api/v1/namespaces/ns1/configmaps/cm", nil)
			if err != nil {
				b.Fatal(err)
			}
			if m != "" {
				req.Header.Set("Authorization", "Bearer "+ab.token)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}

// BenchmarkAuthorizeWebhook is the cost of one decision of "get
// configmaps cm in ns1" for the bound token's user: by the local RBAC
// chain, and by the Webhook mode (k8s.io/apiserver's webhook authorizer
// through --authorization-kubeconfig) asking an HTTPS
// SubjectAccessReview server on loopback (internal/testing/reviewtest) that
// answers from the same RBAC chain: with its answer cache (what every
// request but one per TTL pays) and without (TTL 0: one round trip per
// decision).
func BenchmarkAuthorizeWebhook(b *testing.B) {
	ab := newAuthzBench(b, "RBAC")
	rs := reviewtest.Start(b)
	rs.Authorize = func(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		ra := spec.ResourceAttributes
		a := authz.Attributes{User: spec.User, Groups: spec.Groups, UID: spec.UID, Verb: ra.Verb, ResourceRequest: true,
			Namespace: ra.Namespace, APIGroup: ra.Group, APIVersion: ra.Version, Resource: ra.Resource, Subresource: ra.Subresource, Name: ra.Name}
		ok, _, reason, _ := ab.chain.Authorize(&a)
		return authorizationv1.SubjectAccessReviewStatus{Allowed: ok, Reason: reason}
	}
	dir := b.TempDir()
	kc := rs.Kubeconfig(b, dir, "kubeconfig", "")
	wc := rs.Kubeconfig(b, dir, "webhook", reviewtest.SubjectAccessReviewPath)
	u, err := ab.a.Authenticate([]byte("Bearer "+ab.token), nil)
	if err != nil {
		b.Fatal(err)
	}
	a := authz.Attributes{User: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra,
		Verb: "get", ResourceRequest: true, Namespace: "ns1", APIVersion: "v1", Resource: "configmaps", Name: "cm"}
	run := func(b *testing.B, c *authz.Chain) {
		b.ReportAllocs()
		for b.Loop() {
			if ok, _, _, err := c.Authorize(&a); !ok || err != nil {
				b.Fatal("not allowed", err)
			}
		}
	}
	b.Run("rbac", func(b *testing.B) { run(b, ab.chain) })
	for _, tt := range []struct {
		name string
		ttl  time.Duration
		cfg  authzwebhook.Config
	}{
		{"webhook-cached", authzwebhook.DefaultAuthorizedTTL, authzwebhook.Config{Webhook: webhookclient.Config{Kubeconfig: kc}}},
		// --authorization-webhook-config-file: no client-side limit.
		{"webhook-uncached", 0, authzwebhook.Config{Webhook: webhookclient.Config{ConfigFile: wc, Version: "v1"}}},
		// --authorization-kubeconfig: client-go's 200 QPS (burst 400)
		// of aggregated servers' delegation client caps the rate.
		{"webhook-uncached-kubeconfig", 0, authzwebhook.Config{Webhook: webhookclient.Config{Kubeconfig: kc}}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			cfg := tt.cfg
			cfg.AuthorizedTTL, cfg.UnauthorizedTTL = tt.ttl, tt.ttl
			w, err := authzwebhook.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			c, err := authz.NewChain([]authz.Mode{{Name: authz.ModeWebhook, Authorizer: w}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			before := rs.SubjectAccessReviews.Load()
			run(b, c)
			b.ReportMetric(float64(rs.SubjectAccessReviews.Load()-before)/float64(b.N)*1000, "reviews/1000")
		})
	}
}

// BenchmarkAuthenticateTokenReview is the cost of authenticating a
// bearer token lazyapi cannot verify itself through a TokenReview
// (k8s.io/apiserver's webhook token authenticator and token cache,
// --authentication-kubeconfig) against a loopback HTTPS server, with the
// cache and without; compare BenchmarkAuthorizeLocal's local
// service account token.
func BenchmarkAuthenticateTokenReview(b *testing.B) {
	rs := reviewtest.Start(b)
	rs.Authenticate = func(token string) (authenticationv1.UserInfo, bool, string) {
		return authenticationv1.UserInfo{Username: "oidc:alice", Groups: []string{"devs"}}, token == "oidc-token", ""
	}
	dir := b.TempDir()
	kc := rs.Kubeconfig(b, dir, "kubeconfig", "")
	wc := rs.Kubeconfig(b, dir, "webhook", reviewtest.TokenReviewPath)
	header := []byte("Bearer oidc-token")
	for _, tt := range []struct {
		name string
		ttl  time.Duration
		cfg  tokenreview.Config
	}{
		{"cached", tokenreview.DefaultCacheTTL, tokenreview.Config{Webhook: webhookclient.Config{Kubeconfig: kc}}},
		{"uncached", 0, tokenreview.Config{Webhook: webhookclient.Config{ConfigFile: wc, Version: "v1"}}},
		{"uncached-kubeconfig", 0, tokenreview.Config{Webhook: webhookclient.Config{Kubeconfig: kc}}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			cfg := tt.cfg
			cfg.CacheTTL = tt.ttl
			tr, err := tokenreview.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			a := authn.New(authn.Config{TokenReview: tr})
			before := rs.TokenReviews.Load()
			b.ReportAllocs()
			for b.Loop() {
				if u, err := a.Authenticate(header, nil); err != nil || u.Name != "oidc:alice" {
					b.Fatal(u, err)
				}
			}
			b.ReportMetric(float64(rs.TokenReviews.Load()-before)/float64(b.N)*1000, "reviews/1000")
		})
	}
}
