package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// auditView is what of an audit event both servers must agree on for
// the same request: everything at level Metadata but the IDs, timestamps,
// source addresses and authorization reason's wording.
type auditView struct {
	Stage, Verb, RequestURI string
	User                    any
	ImpersonatedUser        any
	ObjectRef               *auditv1.ObjectReference
	Code                    int32
	Decision                string
}

// readAuditLog returns the events of the audit log at path whose user
// agent starts with agentPrefix, by user agent, in order.
func readAuditLog(t *testing.T, path, agentPrefix string) map[string][]auditView {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]auditView{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log %s: %v: %s", path, err, sc.Bytes())
		}
		if !strings.HasPrefix(ev.UserAgent, agentPrefix) {
			continue
		}
		v := auditView{Stage: string(ev.Stage), Verb: ev.Verb, RequestURI: ev.RequestURI, User: ev.User, ObjectRef: ev.ObjectRef,
			Decision: ev.Annotations["authorization.k8s.io/decision"]}
		if ev.ImpersonatedUser != nil {
			v.ImpersonatedUser = *ev.ImpersonatedUser
		}
		if ev.ResponseStatus != nil {
			v.Code = ev.ResponseStatus.Code
		}
		out[ev.UserAgent] = append(out[ev.UserAgent], v)
	}
	return out
}

// TestFrontAuditImpersonationAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1):
// the audit events lazyapi (--audit-log-path) writes for the reads it
// serves itself on behalf of an impersonated user have the fields
// kube-apiserver v1.37.2's events have for the same requests sent to it
// directly: user the real (authenticated) user, impersonatedUser the
// identity impersonated (its groups as kube-apiserver completes them),
// verb, request URI, objectRef, code, stage and authorization decision;
// a refused impersonation has no impersonatedUser in either; each
// authenticated request has a RequestReceived event (kube-apiserver.sh's
// policy is Metadata for all stages) without impersonatedUser, and a
// watch, even refused, ResponseStarted and ResponseComplete.
func TestFrontAuditImpersonationAgainstKubeAPIServer(t *testing.T) {
	auditLog := filepath.Join(t.TempDir(), "lazyapi-audit.log")
	f := startFront(t, "--audit-log-path="+auditLog)
	c := newCtlClients(f.k.url)
	ctx := context.Background()
	// view is aggregated by kube-controller-manager, which does not run:
	// a role of its own.
	if _, err := c.cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, rb := range []*rbacv1.RoleBinding{
		{ObjectMeta: metav1.ObjectMeta{Name: "dev-view", Namespace: "default"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cm-reader"},
			Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: "rbac.authorization.k8s.io", Name: "dev"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "sa-view", Namespace: "kube-public"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cm-reader"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "kube-public"}}},
	} {
		if _, err := c.cs.RbacV1().RoleBindings(rb.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Both servers' RBAC caches have the bindings.
	for _, srv := range []string{f.k.url, f.lazyURL} {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			a := f.rawAnswer(t, srv, "audit-wait", "GET", "/api/v1/namespaces/default/configmaps", frontBob, nil, "")
			b := f.rawAnswer(t, srv, "audit-wait", "GET", "/api/v1/namespaces/kube-public/configmaps", frontAlice,
				http.Header{"Impersonate-User": {"system:serviceaccount:kube-public:default"}}, "")
			if strings.HasPrefix(a, "200 ") && strings.HasPrefix(b, "200 ") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the role bindings do not apply: %.200s / %.200s", srv, a, b)
			}
		}
	}
	cases := []struct {
		name, path, token string
		header            http.Header
	}{
		{"alice as bob, list, refused", "/api/v1/namespaces/kube-system/configmaps", frontAlice, http.Header{"Impersonate-User": {"bob"}}},
		{"alice as bob in dev, list", "/api/v1/namespaces/default/configmaps", frontAlice,
			http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"dev"}}},
		{"alice as bob in dev with extra and uid, get", "/api/v1/namespaces/default/configmaps/kube-root-ca.crt", frontAlice,
			http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"dev"}, "Impersonate-Uid": {"uid-bob"}, "Impersonate-Extra-Scopes": {"a", "b"}}},
		{"alice as a service account, get", "/api/v1/namespaces/kube-public/configmaps/kube-root-ca.crt", frontAlice,
			http.Header{"Impersonate-User": {"system:serviceaccount:kube-public:default"}}},
		{"alice as a node, list", "/api/v1/nodes", frontAlice, http.Header{"Impersonate-User": {"system:node:n1"}}},
		{"alice as bob, watch", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1", frontAlice,
			http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"dev"}}},
		{"bob as alice, refused impersonation", "/api/v1/namespaces/default/configmaps", frontBob, http.Header{"Impersonate-User": {"alice"}}},
		{"bob, no impersonation", "/api/v1/namespaces/default/configmaps", frontBob, nil},
	}
	for i, cs := range cases {
		want := f.rawAnswer(t, f.k.url, fmt.Sprintf("audit-imp/direct/%d", i), "GET", cs.path, cs.token, cs.header, "")
		got := f.rawAnswer(t, f.lazyURL, fmt.Sprintf("audit-imp/lazyapi/%d", i), "GET", cs.path, cs.token, cs.header, "")
		if want[:3] != got[:3] {
			t.Errorf("%s: lazyapi answered %.200s, kube-apiserver %.200s", cs.name, got, want)
		}
	}
	// Both logs are written in the background: wait for the last events.
	var direct, lazy map[string][]auditView
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		direct, lazy = readAuditLog(t, f.k.dir+"/audit.log", "audit-imp/direct/"), readAuditLog(t, auditLog, "audit-imp/lazyapi/")
		last := fmt.Sprint(len(cases) - 1)
		if len(direct["audit-imp/direct/"+last]) > 0 && len(lazy["audit-imp/lazyapi/"+last]) > 0 || time.Now().After(deadline) {
			break
		}
	}
	for i, cs := range cases {
		want, got := direct[fmt.Sprintf("audit-imp/direct/%d", i)], lazy[fmt.Sprintf("audit-imp/lazyapi/%d", i)]
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if len(want) == 0 || string(wj) != string(gj) {
			t.Errorf("%s: lazyapi's audit events\n%s\nkube-apiserver's\n%s", cs.name, gj, wj)
		}
	}
}
