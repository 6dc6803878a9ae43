package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/authz"
	authzwebhook "github.com/lazyapi/lazyapi/authz/webhook"
	"github.com/lazyapi/lazyapi/internal/testing/reviewtest"
	"github.com/lazyapi/lazyapi/internal/webhookclient"
	"github.com/lazyapi/lazyapi/proxy"
)

// TestWebhookModeErrors: with --authorization-mode=Webhook, a request the
// webhook could not be asked about is answered as kube-apiserver's
// authorization filter answers an authorizer error (500, plain text
// `Internal Server Error: "<URI>": <err>`), never served; a
// SelfSubjectAccessReview reports the error as evaluationError.
func TestWebhookModeErrors(t *testing.T) {
	rs := reviewtest.Start(t)
	rs.Authorize = func(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		ra := spec.ResourceAttributes
		if ra != nil && (ra.Resource == "configmaps" || strings.HasPrefix(ra.Resource, "selfsubject")) {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		}
		return authorizationv1.SubjectAccessReviewStatus{Reason: "not configmaps"}
	}
	w, err := authzwebhook.New(authzwebhook.Config{Webhook: webhookclient.Config{Kubeconfig: rs.Kubeconfig(t, t.TempDir(), "kubeconfig", "")},
		AuthorizedTTL: authzwebhook.DefaultAuthorizedTTL, UnauthorizedTTL: authzwebhook.DefaultUnauthorizedTTL})
	if err != nil {
		t.Fatal(err)
	}
	chain, err := authz.NewChain([]authz.Mode{{Name: authz.ModeWebhook, Authorizer: w}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(cfg *proxy.Config) {
		cfg.Authenticator = authn.New(authn.Config{Tokens: authn.Tokens{"tok": {Name: "alice"}}})
		cfg.Authorizer = chain
	})
	e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "cm"}})
	do := func(method, path string, body []byte) (int, string, string) {
		t.Helper()
		req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	if code, _, body := do("GET", "/api/v1/namespaces/ns1/configmaps/cm", nil); code != 200 {
		t.Fatalf("webhook up: %d %s", code, body)
	}
	if code, _, body := do("GET", "/api/v1/namespaces/ns1/secrets", nil); code != 403 ||
		!strings.Contains(body, `secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API group \"\" in the namespace \"ns1\": default: not configmaps`) {
		t.Errorf("webhook up, not allowed: %d %s", code, body)
	}
	ssar := func(name string) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		body, _ := json.Marshal(&authorizationv1.SelfSubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "get", Version: "v1", Resource: "configmaps", Namespace: "ns1", Name: name}}})
		code, _, out := do("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body)
		if code != 201 {
			t.Fatalf("SelfSubjectAccessReview: %d %s", code, out)
		}
		var r authorizationv1.SelfSubjectAccessReview
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	if st := ssar("cm"); !st.Allowed || st.EvaluationError != "" {
		t.Errorf("SelfSubjectAccessReview, webhook up: %+v", st)
	}
	// kubectl auth can-i --list: the webhook cannot list rules.
	code, _, out := do("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
		[]byte(`{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectRulesReview","spec":{"namespace":"ns1"}}`))
	var rules authorizationv1.SelfSubjectRulesReview
	if err := json.Unmarshal([]byte(out), &rules); code != 201 || err != nil || !rules.Status.Incomplete ||
		rules.Status.EvaluationError != "webhook authorizer does not support user rule resolution" {
		t.Errorf("SelfSubjectRulesReview: %d %s", code, out)
	}

	rs.Stop()
	code, ctype, body := do("GET", "/api/v1/namespaces/ns1/configmaps/other?x=1", nil)
	want := `Internal Server Error: "/api/v1/namespaces/ns1/configmaps/other?x=1": Post "` + rs.URL() + reviewtest.SubjectAccessReviewPath
	if code != 500 || ctype != "text/plain; charset=utf-8" || !strings.HasPrefix(body, want) || !strings.HasSuffix(body, "\n") {
		t.Errorf("webhook down: %d %q %q; want 500 text/plain %q...", code, ctype, body, want)
	}
	if code, _, _ := do("GET", "/api/v1/namespaces/ns1/configmaps/cm", nil); code != 200 {
		t.Errorf("webhook down, cached answer: %d", code)
	}
	// The review's own create is cached; the question is new.
	if st := ssar("other"); st.Allowed || st.Denied || !strings.Contains(st.EvaluationError, "connect: connection refused") {
		t.Errorf("SelfSubjectAccessReview, webhook down: %+v; want not allowed with evaluationError", st)
	}
}
