package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/proxy"
)

// TestSelfReviewReadOnlyVerbs: a self access review answers no for the
// verbs lazyapi does not serve, with a reason saying it is read-only, and
// yes for get, list, watch and the self reviews (issue 28: kubectl auth
// can-i create configmaps said yes while every write is refused).
func TestSelfReviewReadOnlyVerbs(t *testing.T) {
	e := startEnv(t) // no authorizer: everything served is allowed
	ssar := func(spec authorizationv1.SelfSubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
		t.Helper()
		body, _ := json.Marshal(&authorizationv1.SelfSubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"}, Spec: spec})
		resp, err := http.Post(e.url+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		var r authorizationv1.SelfSubjectAccessReview
		if resp.StatusCode != 201 || json.Unmarshal(out, &r) != nil {
			t.Fatalf("SelfSubjectAccessReview: %d %s", resp.StatusCode, out)
		}
		return r.Status
	}
	res := func(verb, group, resource string) authorizationv1.SelfSubjectAccessReviewSpec {
		return authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Namespace: "ns1"}}
	}
	for _, verb := range []string{"create", "update", "patch", "delete", "deletecollection", "escalate"} {
		st := ssar(res(verb, "", "configmaps"))
		if st.Allowed || !strings.Contains(st.Reason, "read-only") {
			t.Errorf("can-i %s configmaps = %+v, want not allowed, read-only", verb, st)
		}
	}
	for _, verb := range []string{"get", "list", "watch", "impersonate"} {
		if st := ssar(res(verb, "", "configmaps")); !st.Allowed {
			t.Errorf("can-i %s configmaps = %+v, want allowed", verb, st)
		}
	}
	if st := ssar(res("create", "authorization.k8s.io", "selfsubjectaccessreviews")); !st.Allowed {
		t.Errorf("can-i create selfsubjectaccessreviews = %+v, want allowed (lazyapi answers them)", st)
	}
	nr := func(verb string) authorizationv1.SelfSubjectAccessReviewSpec {
		return authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: "/api"}}
	}
	if st := ssar(nr("get")); !st.Allowed {
		t.Errorf("can-i get /api = %+v, want allowed", st)
	}
	if st := ssar(nr("post")); st.Allowed || !strings.Contains(st.Reason, "read-only") {
		t.Errorf("can-i post /api = %+v, want not allowed, read-only", st)
	}
}

// post POSTs the JSON of obj to url+path and decodes the 201 answer into
// out.
func postReview(t *testing.T, url, path string, obj, out any) {
	t.Helper()
	body, _ := json.Marshal(obj)
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 || json.Unmarshal(b, out) != nil {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
}

// TestSelfRulesReviewVerbs: read-only, a SelfSubjectRulesReview lists the
// read verbs of what the authorizer grants (AlwaysAllow's "*" becomes get,
// list, watch; non-resource "*" GET and HEAD), so kubectl auth can-i
// --list shows what lazyapi answers; and can-i '*' '*' says no. With
// Config.ServesWrites (forwarding), both say what the authorizer says.
func TestSelfRulesReviewVerbs(t *testing.T) {
	for _, writes := range []bool{false, true} {
		e := startEnv(t, func(c *proxy.Config) { c.ServesWrites = writes })
		var rr authorizationv1.SelfSubjectRulesReview
		postReview(t, e.url, "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", &authorizationv1.SelfSubjectRulesReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectRulesReview"},
			Spec:     authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "default"}}, &rr)
		wantRes, wantNonRes := []string{"get", "list", "watch"}, []string{"get", "head"}
		if writes {
			wantRes, wantNonRes = []string{"*"}, []string{"*"}
		}
		if len(rr.Status.ResourceRules) != 1 || !slices.Equal(rr.Status.ResourceRules[0].Verbs, wantRes) ||
			len(rr.Status.NonResourceRules) != 1 || !slices.Equal(rr.Status.NonResourceRules[0].Verbs, wantNonRes) {
			t.Errorf("ServesWrites=%v: rules %+v, want resource verbs %q, non-resource %q", writes, rr.Status, wantRes, wantNonRes)
		}
		var ar authorizationv1.SelfSubjectAccessReview
		postReview(t, e.url, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", &authorizationv1.SelfSubjectAccessReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: "*", Group: "*", Resource: "*"}}}, &ar)
		if ar.Status.Allowed != writes {
			t.Errorf("ServesWrites=%v: can-i '*' '*' = %+v", writes, ar.Status)
		}
		for _, verb := range []string{"create", "delete"} {
			postReview(t, e.url, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", &authorizationv1.SelfSubjectAccessReview{
				TypeMeta: metav1.TypeMeta{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview"},
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
					Verb: verb, Resource: "configmaps", Namespace: "default"}}}, &ar)
			if ar.Status.Allowed != writes {
				t.Errorf("ServesWrites=%v: can-i %s configmaps = %+v", writes, verb, ar.Status)
			}
		}
	}
}

// TestSelfReviewGET: a GET (or PUT, DELETE) of a self review's path is
// 405 MethodNotAllowed with kube-apiserver's Status, not 404.
func TestSelfReviewGET(t *testing.T) {
	e := startEnv(t)
	for _, method := range []string{"GET", "PUT", "DELETE"} {
		for _, path := range []string{"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "/apis/authentication.k8s.io/v1/selfsubjectreviews"} {
			req, _ := http.NewRequest(method, e.url+path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var st metav1.Status
			if resp.StatusCode != 405 || json.Unmarshal(b, &st) != nil || st.Reason != metav1.StatusReasonMethodNotAllowed ||
				st.Message != "the server does not allow this method on the requested resource" {
				t.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
			}
		}
	}
}
