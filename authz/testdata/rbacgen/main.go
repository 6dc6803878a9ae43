// Command rbacgen writes the fixture and expected answers of lazyapi's
// differential RBAC test (proxy TestRBACDifferential): a set of Roles,
// ClusterRoles (one aggregated, stored with the rules the aggregation
// controller writes), RoleBindings and ClusterRoleBindings
// (rbac-fixture.json), the users the test authenticates (rbac-users.csv, a
// --token-auth-file), and for every user and request URL what
// kube-apiserver v1.37 answers (rbac-expected.tsv.gz): the request's
// attributes from its RequestInfoFactory, decided by its authorizer chain
// (the system:masters privileged-group authorizer, then the RBAC
// authorizer of plugin/pkg/auth/authorizer/rbac over these objects), and
// for a denial its exact Forbidden message (responsewriters).
//
// It is a module of its own (under testdata, so go test ./... ignores it)
// so that lazyapi's go.mod does not take in k8s.io/kubernetes. Run it from
// this directory with the module cache kube-apiserver's build filled
// (bench/kube-apiserver.sh):
//
//	GOFLAGS=-mod=mod GOPROXY=off go run . ../../../proxy/testdata
package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	rbaclisters "k8s.io/client-go/listers/rbac/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
)

// Fixture is what rbac-fixture.json holds.
type Fixture struct {
	Roles               []rbacv1.Role               `json:"roles"`
	ClusterRoles        []rbacv1.ClusterRole        `json:"clusterRoles"`
	RoleBindings        []rbacv1.RoleBinding        `json:"roleBindings"`
	ClusterRoleBindings []rbacv1.ClusterRoleBinding `json:"clusterRoleBindings"`
}

func rule(verbs, groups, resources []string, names ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources, ResourceNames: names}
}

func urls(verbs []string, urls ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
}

var (
	read  = []string{"get", "list", "watch"}
	get   = []string{"get"}
	list  = []string{"list"}
	watch = []string{"watch"}
	all   = []string{"*"}
	core  = []string{""}
)

func meta(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("uid-" + ns + "-" + name)}
}

func subj(kind, name, ns string) rbacv1.Subject {
	s := rbacv1.Subject{Kind: kind, Name: name, Namespace: ns}
	if kind != rbacv1.ServiceAccountKind {
		s.APIGroup = rbacv1.GroupName
	}
	return s
}

func ref(kind, name string) rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}
}

func fixture() *Fixture {
	f := &Fixture{}
	agg := map[string]string{"rbac.example.com/aggregate-to-monitoring": "true"}
	f.ClusterRoles = []rbacv1.ClusterRole{
		{ObjectMeta: meta("", "cm-reader", nil), Rules: []rbacv1.PolicyRule{rule(read, core, []string{"configmaps"})}},
		{ObjectMeta: meta("", "secret-getter", nil), Rules: []rbacv1.PolicyRule{rule(get, core, []string{"secrets"})}},
		{ObjectMeta: meta("", "named-secret", nil), Rules: []rbacv1.PolicyRule{rule(read, core, []string{"secrets", "configmaps"}, "special")}},
		{ObjectMeta: meta("", "pod-status", nil), Rules: []rbacv1.PolicyRule{rule(get, core, []string{"pods/status"})}},
		{ObjectMeta: meta("", "any-status", nil), Rules: []rbacv1.PolicyRule{rule(read, all, []string{"*/status"})}},
		{ObjectMeta: meta("", "pod-lister", nil), Rules: []rbacv1.PolicyRule{rule(list, core, []string{"pods"}), rule(watch, core, []string{"pods"})}},
		{ObjectMeta: meta("", "widget-admin", nil), Rules: []rbacv1.PolicyRule{rule(all, []string{"example.com"}, []string{"widgets"})}},
		{ObjectMeta: meta("", "apps-reader", nil), Rules: []rbacv1.PolicyRule{rule(read, []string{"apps", "batch"}, []string{"*"})}},
		{ObjectMeta: meta("", "everything-in-group-star", nil), Rules: []rbacv1.PolicyRule{rule(get, all, all)}},
		{ObjectMeta: meta("", "node-reader", nil), Rules: []rbacv1.PolicyRule{rule(read, core, []string{"nodes", "namespaces"})}},
		{ObjectMeta: meta("", "namespace-getter", nil), Rules: []rbacv1.PolicyRule{rule(get, core, []string{"namespaces"}, "ns1")}},
		{ObjectMeta: meta("", "rbac-viewer", nil), Rules: []rbacv1.PolicyRule{rule(read, []string{"rbac.authorization.k8s.io"}, []string{"roles", "rolebindings"})}},
		{ObjectMeta: meta("", "system:discovery", nil), Rules: []rbacv1.PolicyRule{urls(get, "/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", "/version", "/version/", "/healthz", "/livez", "/readyz")}},
		{ObjectMeta: meta("", "metrics-reader", nil), Rules: []rbacv1.PolicyRule{urls(get, "/metrics"), urls(all, "/logs*")}},
		{ObjectMeta: meta("", "star-urls", nil), Rules: []rbacv1.PolicyRule{urls(get, "*")}},
		{ObjectMeta: meta("", "watch-only", nil), Rules: []rbacv1.PolicyRule{rule(watch, all, []string{"configmaps", "secrets", "widgets"})}},
		{ObjectMeta: meta("", "verb-star", nil), Rules: []rbacv1.PolicyRule{rule(all, core, []string{"serviceaccounts"}, "special")}},
		// Aggregation sources and the aggregated role as the controller
		// stores it: the union of the sources' rules.
		{ObjectMeta: meta("", "monitoring-pods", agg), Rules: []rbacv1.PolicyRule{rule(read, core, []string{"pods"})}},
		{ObjectMeta: meta("", "monitoring-nodes", agg), Rules: []rbacv1.PolicyRule{rule(get, core, []string{"nodes"}), urls(get, "/metrics")}},
		{ObjectMeta: meta("", "monitoring", nil), AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: agg}}}},
		// Referenced by nothing that exists and a role left empty.
		{ObjectMeta: meta("", "empty", nil)},
	}
	// The aggregation controller's result.
	for _, cr := range f.ClusterRoles {
		if cr.Labels["rbac.example.com/aggregate-to-monitoring"] == "true" {
			f.ClusterRoles[19].Rules = append(f.ClusterRoles[19].Rules, cr.Rules...)
		}
	}
	f.Roles = []rbacv1.Role{
		{ObjectMeta: meta("ns1", "cm-writer-reader", nil), Rules: []rbacv1.PolicyRule{rule([]string{"get", "list"}, core, []string{"configmaps"})}},
		{ObjectMeta: meta("ns2", "secrets-all", nil), Rules: []rbacv1.PolicyRule{rule(all, core, []string{"secrets"})}},
		{ObjectMeta: meta("ns2", "deploy-status", nil), Rules: []rbacv1.PolicyRule{rule(get, []string{"apps"}, []string{"deployments/status"})}},
		{ObjectMeta: meta("ns3", "named", nil), Rules: []rbacv1.PolicyRule{rule(read, core, []string{"configmaps", "pods"}, "special", "other2")}},
		{ObjectMeta: meta("ns3", "widgets", nil), Rules: []rbacv1.PolicyRule{rule(list, []string{"example.com"}, []string{"widgets", "widgets/status"})}},
		{ObjectMeta: meta("ns1", "everything", nil), Rules: []rbacv1.PolicyRule{rule(all, all, all)}},
		// A Role with non-resource URLs: never effective (namespaced).
		{ObjectMeta: meta("ns1", "urls", nil), Rules: []rbacv1.PolicyRule{urls(get, "/metrics")}},
	}
	f.ClusterRoleBindings = []rbacv1.ClusterRoleBinding{
		{ObjectMeta: meta("", "discovery", nil), RoleRef: ref("ClusterRole", "system:discovery"), Subjects: []rbacv1.Subject{subj("Group", "system:authenticated", ""), subj("Group", "system:unauthenticated", "")}},
		{ObjectMeta: meta("", "cm-readers", nil), RoleRef: ref("ClusterRole", "cm-reader"), Subjects: []rbacv1.Subject{subj("User", "alice", ""), subj("Group", "cm-readers", "")}},
		{ObjectMeta: meta("", "monitoring", nil), RoleRef: ref("ClusterRole", "monitoring"), Subjects: []rbacv1.Subject{subj("ServiceAccount", "prometheus", "monitoring"), subj("Group", "monitors", "")}},
		{ObjectMeta: meta("", "metrics", nil), RoleRef: ref("ClusterRole", "metrics-reader"), Subjects: []rbacv1.Subject{subj("User", "metrics-user", "")}},
		// A ServiceAccount subject without namespace in a
		// ClusterRoleBinding never matches.
		{ObjectMeta: meta("", "sa-no-ns", nil), RoleRef: ref("ClusterRole", "everything-in-group-star"), Subjects: []rbacv1.Subject{subj("ServiceAccount", "default", "")}},
		{ObjectMeta: meta("", "getall", nil), RoleRef: ref("ClusterRole", "everything-in-group-star"), Subjects: []rbacv1.Subject{subj("User", "getter", ""), subj("ServiceAccount", "getter", "ns2")}},
		{ObjectMeta: meta("", "nodes", nil), RoleRef: ref("ClusterRole", "node-reader"), Subjects: []rbacv1.Subject{subj("Group", "node-readers", "")}},
		{ObjectMeta: meta("", "anonymous-cm", nil), RoleRef: ref("ClusterRole", "named-secret"), Subjects: []rbacv1.Subject{subj("User", "system:anonymous", "")}},
		{ObjectMeta: meta("", "urls-star", nil), RoleRef: ref("ClusterRole", "star-urls"), Subjects: []rbacv1.Subject{subj("User", "url-star", "")}},
		{ObjectMeta: meta("", "watchers", nil), RoleRef: ref("ClusterRole", "watch-only"), Subjects: []rbacv1.Subject{subj("Group", "watchers", ""), subj("ServiceAccount", "watcher", "ns3")}},
		{ObjectMeta: meta("", "status", nil), RoleRef: ref("ClusterRole", "any-status"), Subjects: []rbacv1.Subject{subj("User", "status-user", "")}},
		// References to a missing ClusterRole and (not allowed) to a Role.
		{ObjectMeta: meta("", "missing", nil), RoleRef: ref("ClusterRole", "does-not-exist"), Subjects: []rbacv1.Subject{subj("User", "bob", "")}},
		{ObjectMeta: meta("", "to-role", nil), RoleRef: ref("Role", "everything"), Subjects: []rbacv1.Subject{subj("User", "bob", "")}},
		// Unknown subject kind, and the apiGroup of a User is not checked.
		{ObjectMeta: meta("", "odd-subjects", nil), RoleRef: ref("ClusterRole", "apps-reader"), Subjects: []rbacv1.Subject{{Kind: "Robot", Name: "carol"}, {Kind: "User", Name: "dave", APIGroup: "other.example.com"}}},
		{ObjectMeta: meta("", "namespaces", nil), RoleRef: ref("ClusterRole", "namespace-getter"), Subjects: []rbacv1.Subject{subj("User", "ns-getter", "")}},
		{ObjectMeta: meta("", "rbac", nil), RoleRef: ref("ClusterRole", "rbac-viewer"), Subjects: []rbacv1.Subject{subj("Group", "system:serviceaccounts:ns1", "")}},
		{ObjectMeta: meta("", "verb-star", nil), RoleRef: ref("ClusterRole", "verb-star"), Subjects: []rbacv1.Subject{subj("Group", "system:serviceaccounts", "")}},
	}
	f.RoleBindings = []rbacv1.RoleBinding{
		{ObjectMeta: meta("ns1", "cm", nil), RoleRef: ref("Role", "cm-writer-reader"), Subjects: []rbacv1.Subject{subj("User", "erin", ""), subj("ServiceAccount", "app", "")}},
		{ObjectMeta: meta("ns2", "secrets", nil), RoleRef: ref("Role", "secrets-all"), Subjects: []rbacv1.Subject{subj("Group", "ns2-admins", ""), subj("ServiceAccount", "app", "ns1")}},
		{ObjectMeta: meta("ns2", "deploy-status", nil), RoleRef: ref("Role", "deploy-status"), Subjects: []rbacv1.Subject{subj("User", "frank", "")}},
		// RoleBinding to a ClusterRole: scoped to its namespace.
		{ObjectMeta: meta("ns3", "secret-getter", nil), RoleRef: ref("ClusterRole", "secret-getter"), Subjects: []rbacv1.Subject{subj("User", "grace", ""), subj("Group", "system:authenticated", "")}},
		{ObjectMeta: meta("ns1", "pods", nil), RoleRef: ref("ClusterRole", "pod-lister"), Subjects: []rbacv1.Subject{subj("User", "heidi", ""), subj("Group", "system:unauthenticated", "")}},
		{ObjectMeta: meta("ns2", "pod-status", nil), RoleRef: ref("ClusterRole", "pod-status"), Subjects: []rbacv1.Subject{subj("User", "heidi", "")}},
		{ObjectMeta: meta("ns3", "named", nil), RoleRef: ref("Role", "named"), Subjects: []rbacv1.Subject{subj("User", "ivan", ""), subj("ServiceAccount", "default", "")}},
		{ObjectMeta: meta("ns3", "widgets", nil), RoleRef: ref("Role", "widgets"), Subjects: []rbacv1.Subject{subj("User", "judy", "")}},
		{ObjectMeta: meta("ns1", "widget-admin", nil), RoleRef: ref("ClusterRole", "widget-admin"), Subjects: []rbacv1.Subject{subj("User", "judy", ""), subj("Group", "widget-admins", "")}},
		{ObjectMeta: meta("ns1", "everything", nil), RoleRef: ref("Role", "everything"), Subjects: []rbacv1.Subject{subj("User", "mallory", ""), subj("ServiceAccount", "admin", "ns1")}},
		// A RoleBinding to a Role of another namespace's name: resolved in
		// the binding's namespace, where it does not exist.
		{ObjectMeta: meta("ns2", "no-such-role", nil), RoleRef: ref("Role", "everything"), Subjects: []rbacv1.Subject{subj("User", "niaj", "")}},
		{ObjectMeta: meta("ns1", "urls", nil), RoleRef: ref("Role", "urls"), Subjects: []rbacv1.Subject{subj("User", "niaj", "")}},
		{ObjectMeta: meta("ns2", "apps", nil), RoleRef: ref("ClusterRole", "apps-reader"), Subjects: []rbacv1.Subject{subj("Group", "system:serviceaccounts:ns2", ""), subj("User", "olivia", "")}},
		{ObjectMeta: meta("ns3", "namespaces", nil), RoleRef: ref("ClusterRole", "node-reader"), Subjects: []rbacv1.Subject{subj("User", "peggy", "")}},
		{ObjectMeta: meta("ns1", "aggregated", nil), RoleRef: ref("ClusterRole", "monitoring"), Subjects: []rbacv1.Subject{subj("User", "rupert", "")}},
	}
	return f
}

// testUser is one line of rbac-users.csv. Token "" is the anonymous user
// (no credentials, --anonymous-auth=true).
type testUser struct {
	token, name, uid string
	groups           []string
}

func users() []testUser {
	sa := func(ns, name string) testUser {
		return testUser{name: "system:serviceaccount:" + ns + ":" + name,
			groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}}
	}
	us := []testUser{
		{name: "alice"}, {name: "bob"}, {name: "carol"}, {name: "dave"}, {name: "erin"},
		{name: "frank"}, {name: "grace"}, {name: "heidi"}, {name: "ivan"}, {name: "judy"},
		{name: "mallory"}, {name: "niaj"}, {name: "olivia"}, {name: "peggy"}, {name: "rupert"},
		{name: "getter"}, {name: "metrics-user"}, {name: "url-star"}, {name: "status-user"}, {name: "ns-getter"},
		{name: "root", groups: []string{"system:masters"}},
		{name: "in-groups", groups: []string{"cm-readers", "node-readers"}},
		{name: "ns2-admin", groups: []string{"ns2-admins", "widget-admins"}},
		{name: "monitor", groups: []string{"monitors"}},
		{name: "watcher", groups: []string{"watchers"}},
		{name: "nobody"},
		sa("ns1", "app"), sa("ns1", "admin"), sa("ns2", "getter"), sa("ns3", "default"),
		sa("ns3", "watcher"), sa("monitoring", "prometheus"), sa("ns2", "other"), sa("ns1", "default"),
	}
	for i := range us {
		us[i].token = fmt.Sprintf("token-%02d", i)
		us[i].uid = fmt.Sprintf("uid-%02d", i)
		// What kube-apiserver's AuthenticatedGroupAdder adds.
		us[i].groups = append(us[i].groups, user.AllAuthenticated)
	}
	return append(us, testUser{name: user.Anonymous, groups: []string{user.AllUnauthenticated}})
}

// resources are the requested resources: group/version, resource, and
// whether it is namespaced (cluster-scoped ones are asked in namespaces
// too: RBAC decides on the URL's attributes only).
var resources = []struct{ gv, resource string }{
	{"v1", "configmaps"}, {"v1", "secrets"}, {"v1", "pods"}, {"v1", "pods/status"},
	{"v1", "serviceaccounts"}, {"apps/v1", "deployments"}, {"apps/v1", "deployments/status"},
	{"batch/v1", "jobs"}, {"rbac.authorization.k8s.io/v1", "roles"}, {"example.com/v1", "widgets"},
	{"v1", "nodes"}, {"v1", "namespaces"},
}

var scopes = []string{"ns1", "ns2", "ns3", ""}

var nonResource = []string{"/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/metrics",
	"/openapi/v2", "/openapi/v3", "/openapi/v3/apis/apps/v1", "/logs", "/logs/kube.log", "/debug/pprof/", "/apis/example.com/v1"}

// requestURLs are the GET URLs of the matrix: per resource and scope, the
// collection (list), its watch (watch=true and the /watch/ path), with and
// without a fieldSelector on metadata.name, and single objects named
// "special" (named in resourceNames) and "other" (not).
func requestURLs() []string {
	var out []string
	for _, r := range resources {
		base := "/api/" + r.gv
		if r.gv != "v1" {
			base = "/apis/" + r.gv
		}
		res, sub, _ := strings.Cut(r.resource, "/")
		for _, ns := range scopes {
			p := base + "/"
			if ns != "" {
				p += "namespaces/" + ns + "/"
			}
			w := base + "/watch/"
			if ns != "" {
				w += "namespaces/" + ns + "/"
			}
			if r.resource == "namespaces" {
				// The namespace object itself: /api/v1/namespaces/NAME.
				p, w = base+"/", base+"/watch/"
			}
			for _, name := range []string{"special", "other", "ns1"} {
				u := p + res + "/" + name
				if sub != "" {
					u += "/" + sub
				}
				out = append(out, u)
				if sub == "" && name != "ns1" {
					out = append(out, w+res+"/"+name)
				}
			}
			if sub != "" {
				continue
			}
			out = append(out,
				p+res,
				p+res+"?watch=true",
				p+res+"?watch=1&fieldSelector=metadata.name%3Dspecial",
				p+res+"?fieldSelector=metadata.name%3Dspecial",
				p+res+"?fieldSelector=metadata.name%3D%3Dother%2Cmetadata.namespace%3Dns1",
				p+res+"?fieldSelector=metadata.name%21%3Dspecial",
				p+res+"?watch=false&fieldSelector=metadata.name%3Dspecial",
				w+res,
				w+res+"?fieldSelector=metadata.name%3Dspecial",
			)
			if r.resource == "namespaces" {
				break // the same URLs in every scope
			}
		}
	}
	return append(out, nonResource...)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: rbacgen OUTDIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "rbacgen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	f := fixture()
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "rbac-fixture.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	us := users()
	var csv strings.Builder
	for _, u := range us {
		if u.token == "" {
			continue
		}
		// The token file's groups: without the added system:authenticated.
		fmt.Fprintf(&csv, "%s,%s,%s,\"%s\"\n", u.token, u.name, u.uid, strings.Join(u.groups[:len(u.groups)-1], ","))
	}
	if err := os.WriteFile(filepath.Join(dir, "rbac-users.csv"), []byte(csv.String()), 0o644); err != nil {
		return err
	}

	// kube-apiserver's chain for --authorization-mode=RBAC.
	// The RBAC authorizer reads listers over informer indexers, as
	// kube-apiserver's (pkg/kubeapiserver/authorizer/config.go), so that
	// its errors for missing roles are the listers' NotFound errors.
	indexer := func(objs []runtime.Object) cache.Indexer {
		ix := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		for _, o := range objs {
			if err := ix.Add(o); err != nil {
				panic(err)
			}
		}
		return ix
	}
	var roles, bindings, clusterRoles, clusterBindings []runtime.Object
	for i := range f.Roles {
		roles = append(roles, &f.Roles[i])
	}
	for i := range f.RoleBindings {
		bindings = append(bindings, &f.RoleBindings[i])
	}
	for i := range f.ClusterRoles {
		clusterRoles = append(clusterRoles, &f.ClusterRoles[i])
	}
	for i := range f.ClusterRoleBindings {
		clusterBindings = append(clusterBindings, &f.ClusterRoleBindings[i])
	}
	rbacAuthorizer := rbac.New(
		&rbac.RoleGetter{Lister: rbaclisters.NewRoleLister(indexer(roles))},
		&rbac.RoleBindingLister{Lister: rbaclisters.NewRoleBindingLister(indexer(bindings))},
		&rbac.ClusterRoleGetter{Lister: rbaclisters.NewClusterRoleLister(indexer(clusterRoles))},
		&rbac.ClusterRoleBindingLister{Lister: rbaclisters.NewClusterRoleBindingLister(indexer(clusterBindings))},
	)
	chain, err := union.New(
		union.NamedAuthorizer{AuthorizerName: "kubernetes.io/system-privileged-group", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		union.NamedAuthorizer{AuthorizerName: "rbac", Authorizer: rbacAuthorizer},
	)
	if err != nil {
		return err
	}
	factory := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

	out, err := os.Create(filepath.Join(dir, "rbac-expected.tsv.gz"))
	if err != nil {
		return err
	}
	defer out.Close()
	zw, _ := gzip.NewWriterLevel(out, gzip.BestCompression)
	fmt.Fprintln(zw, "# token\tURL\tallowed\tforbidden message (kube-apiserver v1.37 RBAC; generated by authz/testdata/rbacgen)")
	allowed, total := 0, 0
	for _, u := range us {
		info := &user.DefaultInfo{Name: u.name, UID: u.uid, Groups: u.groups}
		for _, url := range requestURLs() {
			req, err := http.NewRequest("GET", "http://lazyapi"+url, nil)
			if err != nil {
				return err
			}
			ri, err := factory.NewRequestInfo(req)
			if err != nil {
				return fmt.Errorf("%s: %w", url, err)
			}
			ctx := request.WithRequestInfo(request.WithUser(context.Background(), info), ri)
			attrs, err := filters.GetAuthorizerAttributes(ctx)
			if err != nil {
				return err
			}
			d, reason, _ := chain.Authorize(ctx, attrs)
			msg := ""
			if d == authorizer.DecisionAllow {
				allowed++
			} else {
				msg = responsewriters.ForbiddenStatusError(attrs, reason).ErrStatus.Message
			}
			total++
			fmt.Fprintf(zw, "%s\t%s\t%v\t%s\n", u.token, url, d == authorizer.DecisionAllow, msg)
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Printf("%d users, %d requests each: %d cases, %d allowed\n", len(us), len(requestURLs()), total, allowed)
	return nil
}
