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
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/keyutil"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/rbacetcd"
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
