package proxy_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/proxy"
)

// Users of the resolver tests (issue 23 findings 1-4), each granted one
// thing by a Role or ClusterRole stored in etcd with the RBAC fixture.
const (
	tokReader  = "tok-reader"  // get, list, watch secrets [allowed-secret] in team-a
	tokCoreGet = "tok-coreget" // get on * in the core group, cluster-wide
	tokWatch   = "tok-watch"   // watch secrets in team-a
	tokList    = "tok-list"    // list secrets in team-a
	tokGet     = "tok-get"     // get secrets in team-a
	tokRoot    = "tok-root"    // system:masters
)

// resolverEnv starts a proxy with RBAC from etcd, the users above and
// the Secrets team-a/allowed-secret, team-a/top-secret, team-b/other and
// the Deployment team-b/d.
func resolverEnv(t *testing.T) *env {
	t.Helper()
	rule := func(verbs []string, group string, resources []string, names ...string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{group}, Resources: resources, ResourceNames: names}}
	}
	type grant struct {
		user  string
		rules []rbacv1.PolicyRule
		ns    string // "": a ClusterRole bound cluster-wide
	}
	grants := []grant{
		{"reader", rule([]string{"get", "list", "watch"}, "", []string{"secrets"}, "allowed-secret"), "team-a"},
		{"coreget", rule([]string{"get"}, "", []string{"*"}), ""},
		{"watch-only", rule([]string{"watch"}, "", []string{"secrets"}), "team-a"},
		{"list-only", rule([]string{"list"}, "", []string{"secrets"}), "team-a"},
		{"get-only", rule([]string{"get"}, "", []string{"secrets"}), "team-a"},
		// As kube-apiserver's system:basic-user.
		{"group:system:authenticated", rule([]string{"create"}, "authorization.k8s.io", []string{"selfsubjectaccessreviews"}), ""},
	}
	grantRoles := func(cfg *proxy.Config) {
		p := etcdPutter{cfg}
		for _, g := range grants {
			subj := []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: g.user}}
			if group, ok := strings.CutPrefix(g.user, "group:"); ok {
				subj[0].Kind, subj[0].Name = "Group", group
			}
			name := "resolver-" + strings.ReplaceAll(g.user, ":", "-")
			if g.ns == "" {
				p.putObj(t, "clusterroles", &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: g.rules})
				p.putObj(t, "clusterrolebindings", &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
					RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subj})
				continue
			}
			p.putObj(t, "roles", &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: name}, Rules: g.rules})
			p.putObj(t, "rolebindings", &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: g.ns, Name: name},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subj})
		}
	}
	tokens := func(cfg *proxy.Config) {
		csv := strings.Join([]string{
			tokReader + ",reader,uid-r", tokCoreGet + ",coreget,uid-c", tokWatch + ",watch-only,uid-w",
			tokList + ",list-only,uid-l", tokGet + ",get-only,uid-g", tokRoot + ",root,uid-root,system:masters"}, "\n") + "\n"
		path := filepath.Join(t.TempDir(), "tokens.csv")
		if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
			t.Fatal(err)
		}
		toks, err := authn.LoadTokenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Authenticator = authn.New(authn.Config{Tokens: toks})
	}
	e := startEnv(t, grantRoles, withRBAC(t, metrics.NewSet()), tokens)
	for _, s := range [][2]string{{"team-a", "allowed-secret"}, {"team-a", "top-secret"}, {"team-b", "other"}} {
		e.put(t, "secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s[0], Name: s[1]},
			Data: map[string][]byte{"k": []byte("data of " + s[1])}})
	}
	e.put(t, "deployments", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "d"}})
	return e
}

// served is what a response held: its code, its shape ("list", "watch",
// "object", "status" or "text") and the namespace/name of every object in it.
type served struct {
	code  int
	shape string
	objs  []string
}

// serve sends a GET of target (a raw request target, sent as it is)
// with token and reads the whole response; watches must end by
// themselves (timeoutSeconds).
func serve(t *testing.T, e *env, token, target string) served {
	t.Helper()
	req, err := http.NewRequest("GET", e.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = target // the target as written: no cleaning or re-encoding
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", target, err)
	}
	out := served{code: resp.StatusCode}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		out.shape = "text"
		return out
	}
	type object struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Namespace string `json:"namespace"`
			Name      string `json:"name"`
		} `json:"metadata"`
	}
	name := func(o object) string { return o.Metadata.Namespace + "/" + o.Metadata.Name }
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		var v struct {
			object
			Type   string  `json:"type"`
			Object *object `json:"object"`
			Items  []object
		}
		if err := dec.Decode(&v); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("GET %s: %d: cannot decode %q: %v", target, resp.StatusCode, body, err)
		}
		switch {
		case v.Type != "":
			out.shape = "watch"
			if v.Object != nil && v.Type != "BOOKMARK" {
				out.objs = append(out.objs, name(*v.Object))
			}
		case v.Kind == "Status":
			out.shape = "status"
		case strings.HasSuffix(v.Kind, "List"):
			out.shape = "list"
			for _, o := range v.Items {
				out.objs = append(out.objs, name(o))
			}
		default:
			out.shape = "object"
			out.objs = append(out.objs, name(v.object))
		}
	}
	return out
}

// TestResolverFindings: issue 23's findings 1-4, each request authorized
// and served from one resolution as kube-apiserver resolves it.
func TestResolverFindings(t *testing.T) {
	e := resolverEnv(t)
	const secrets = "/api/v1/namespaces/team-a/secrets"
	const end = "&timeoutSeconds=1" // watches end by themselves
	tests := []struct {
		name, token, target string
		code                int
		shape               string // "" with a refusal
		objs                string // comma-separated; "-": none checked
	}{
		// 1: a repeated fieldSelector: the first value is authorized and
		// served (kube-apiserver's first value wins).
		{"fieldSelector first value", tokReader, secrets + "?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=", 200, "list", "team-a/allowed-secret"},
		{"fieldSelector first value watch", tokReader, secrets + "?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=&watch=1" + end, 200, "watch", "team-a/allowed-secret"},
		{"fieldSelector empty first", tokReader, secrets + "?fieldSelector=&fieldSelector=metadata.name%3Dallowed-secret", 403, "", "-"},
		{"watch=0&watch=1 list-only", tokList, secrets + "?watch=0&watch=1" + end, 200, "list", "team-a/allowed-secret,team-a/top-secret"},
		{"watch=0&watch=1 watch-only", tokWatch, secrets + "?watch=0&watch=1" + end, 403, "", "-"},
		{"watch=1&watch=0 list-only", tokList, secrets + "?watch=1&watch=0" + end, 403, "", "-"},
		{"watch=1&watch=0 watch-only", tokWatch, secrets + "?watch=1&watch=0" + end, 200, "watch", "team-a/allowed-secret,team-a/top-secret"},
		// 2: an empty segment kube-apiserver's router does not route.
		{"empty segment core", tokCoreGet, "/api/v1//secrets", 404, "status", "-"},
		{"empty segment core watch", tokCoreGet, "/api/v1//secrets?watch=1" + end, 404, "status", "-"},
		{"empty segment apps", tokCoreGet, "/apis/apps/v1//deployments", 403, "", "-"},
		{"empty segment apps root", tokRoot, "/apis/apps/v1//deployments", 404, "status", "-"},
		{"empty segment resource root", tokRoot, "/api/v1/namespaces/team-a//secrets", 404, "status", "-"},
		// An empty namespace is routed (go-restful's {namespace} matches
		// ""): every namespace, as kube-apiserver.
		{"empty namespace root", tokRoot, "/api/v1/namespaces//secrets", 200, "list", "team-a/allowed-secret,team-a/top-secret,team-b/other"},
		// RequestInfoFactory's error: kube-apiserver's 500.
		{"watch without kind", tokRoot, "/api/v1/watch", 500, "text", "-"},
		{"watch without kind", tokRoot, "/apis/apps/v1/watch/", 500, "text", "-"},
		// 3: watch=f is a watch.
		{"watch=f watch-only", tokWatch, secrets + "?watch=f" + end, 200, "watch", "team-a/allowed-secret,team-a/top-secret"},
		{"watch=F list-only", tokList, secrets + "?watch=F" + end, 403, "", "-"},
		{"watch=False list-only", tokList, secrets + "?watch=False", 200, "list", "team-a/allowed-secret,team-a/top-secret"},
		// 4: watch on a named object is a GET.
		{"named watch=1", tokGet, secrets + "/top-secret?watch=1" + end, 200, "object", "team-a/top-secret"},
		{"named watch=1 watch-only", tokWatch, secrets + "/top-secret?watch=1" + end, 403, "", "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := serve(t, e, tt.token, tt.target)
			if got.code != tt.code || (tt.shape != "" && got.shape != tt.shape) ||
				(tt.objs != "-" && strings.Join(got.objs, ",") != tt.objs) {
				t.Errorf("GET %s = %d %s %v; want %d %s %s", tt.target, got.code, got.shape, got.objs, tt.code, tt.shape, tt.objs)
			}
		})
	}
}

// TestResolverServedWithinAuthorized: for tricky spellings of Secret
// requests (repeated and encoded parameters, empty segments, /watch/
// paths, watch on named objects, selectors that do not decode), every
// object a user is served is one the authorizer allows that user to read
// with the verb served (asked through lazyapi's own
// SelfSubjectAccessReview, by name and namespace): the object set served
// never exceeds what the request's attributes authorize.
func TestResolverServedWithinAuthorized(t *testing.T) {
	e := resolverEnv(t)
	const ns = "/api/v1/namespaces/team-a/secrets"
	const end = "&timeoutSeconds=1"
	targets := []string{
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=metadata.name%3Dtop-secret",
		ns + "?fieldSelector=metadata.name%3D%3Dallowed-secret",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret,metadata.name!%3Dx",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret,metadata.namespace%3Dteam-b",
		ns + "?%66ieldSelector=metadata.name%3Dallowed-secret&fieldSelector=",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret;x&fieldSelector=",
		ns + "?fieldSelector=%zz&fieldSelector=metadata.name%3Dallowed-secret",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&limit=",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&labelSelector=%21%21",
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&watch=f&watch=0" + end,
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&watch=0&watch=1" + end,
		ns + "?fieldSelector=metadata.name%3Dallowed-secret&fieldSelector=&watch=1" + end,
		ns + "?watch=0&watch=1" + end,
		ns + "?watch=1&watch=0" + end,
		ns + "?watch=f" + end,
		ns + "?watch=F&limit=1" + end,
		ns + "/top-secret?watch=1" + end,
		ns + "/top-secret?fieldSelector=metadata.name%3Dallowed-secret",
		ns + "/allowed-secret?watch=1" + end,
		ns + "/allowed-secret/",
		ns + "/allowed-secret%2F..",
		"/api/v1//secrets?fieldSelector=metadata.name%3Dallowed-secret",
		"/api/v1//secrets",
		"/api/v1/namespaces//secrets?fieldSelector=metadata.name%3Dallowed-secret",
		"/api/v1/namespaces/team-a//secrets",
		"/api/v1/secrets?fieldSelector=metadata.name%3Dallowed-secret",
		"/api/v1/watch/namespaces/team-a/secrets?fieldSelector=metadata.name%3Dallowed-secret" + end,
		"/api/v1/watch/namespaces/team-a/secrets/allowed-secret?timeoutSeconds=1",
		"/api/v1/namespaces/team-b/secrets?fieldSelector=metadata.name%3Dallowed-secret",
		"/api/v1/namespaces/team-a/secrets/allowed-secret/status",
	}
	users := []string{tokReader, tokList, tokWatch, tokGet, tokCoreGet}
	type key struct{ token, verb, obj string }
	allowed := map[key]bool{}
	can := func(token, verb, obj string) bool {
		k := key{token, verb, obj}
		if v, ok := allowed[k]; ok {
			return v
		}
		ns, name, _ := strings.Cut(obj, "/")
		body, _ := json.Marshal(map[string]any{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": map[string]string{"verb": verb, "resource": "secrets", "namespace": ns, "name": name}}})
		req, err := http.NewRequest("POST", e.url+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var rev struct {
			Status struct{ Allowed bool } `json:"status"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&rev); err != nil || resp.StatusCode != 201 {
			t.Fatalf("SelfSubjectAccessReview: %d %v", resp.StatusCode, err)
		}
		allowed[k] = rev.Status.Allowed
		return rev.Status.Allowed
	}
	verbOf := map[string]string{"list": "list", "watch": "watch", "object": "get"}
	servedAny := 0
	for _, tok := range users {
		for _, target := range targets {
			got := serve(t, e, tok, target)
			if got.code != 200 {
				continue
			}
			verb := verbOf[got.shape]
			for _, obj := range got.objs {
				servedAny++
				if !can(tok, verb, obj) {
					t.Errorf("%s: GET %s served %s (%s), which it may not %s", tok, target, obj, got.shape, verb)
				}
			}
		}
	}
	if servedAny == 0 {
		t.Fatal("nothing served at all")
	}
}
