package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
