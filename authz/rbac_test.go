package authz_test

import (
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/authz"
)

// refAuthorize is a reference RBAC: kube-apiserver's VisitRulesFor and
// RuleAllows written as plainly as possible (every binding scanned, roles
// looked up by scanning, the combined resource string built), without
// RBAC's index.
func refAuthorize(o *authz.Objects, a *authz.Attributes) bool {
	applies := func(subs []authz.Subject, ns string) bool {
		for _, s := range subs {
			switch s.Kind {
			case "User":
				if s.Name == a.User {
					return true
				}
			case "Group":
				for _, g := range a.Groups {
					if g == s.Name {
						return true
					}
				}
			case "ServiceAccount":
				sns := ns
				if s.Namespace != "" {
					sns = s.Namespace
				}
				if sns != "" && a.User == "system:serviceaccount:"+sns+":"+s.Name {
					return true
				}
			}
		}
		return false
	}
	rules := func(ref authz.RoleRef, ns string) []authz.PolicyRule {
		switch ref.Kind {
		case "Role":
			for _, r := range o.Roles {
				if r.Namespace == ns && ns != "" && r.Name == ref.Name {
					return r.Rules
				}
			}
		case "ClusterRole":
			for _, r := range o.ClusterRoles {
				if r.Name == ref.Name {
					return r.Rules
				}
			}
		}
		return nil
	}
	in := func(set []string, v string) bool {
		for _, s := range set {
			if s == v || s == "*" {
				return true
			}
		}
		return false
	}
	allows := func(r authz.PolicyRule) bool {
		if !a.ResourceRequest {
			if !in(r.Verbs, a.Verb) {
				return false
			}
			for _, u := range r.NonResourceURLs {
				if u == "*" || u == a.Path || (strings.HasSuffix(u, "*") && strings.HasPrefix(a.Path, strings.TrimRight(u, "*"))) {
					return true
				}
			}
			return false
		}
		combined := a.Resource
		if a.Subresource != "" {
			combined += "/" + a.Subresource
		}
		resOK := false
		for _, rr := range r.Resources {
			if rr == "*" || rr == combined || (a.Subresource != "" && rr == "*/"+a.Subresource) {
				resOK = true
			}
		}
		nameOK := len(r.ResourceNames) == 0
		for _, n := range r.ResourceNames {
			if n == a.Name {
				nameOK = true
			}
		}
		return in(r.Verbs, a.Verb) && in(r.APIGroups, a.APIGroup) && resOK && nameOK
	}
	for _, b := range o.ClusterRoleBindings {
		if applies(b.Subjects, "") {
			for _, r := range rules(b.RoleRef, "") {
				if allows(r) {
					return true
				}
			}
		}
	}
	if a.Namespace == "" {
		return false
	}
	for _, b := range o.RoleBindings {
		if b.Namespace == a.Namespace && applies(b.Subjects, a.Namespace) {
			for _, r := range rules(b.RoleRef, a.Namespace) {
				if allows(r) {
					return true
				}
			}
		}
	}
	return false
}

// pick returns an element of vocab chosen by the next byte of *b.
func pick(b *[]byte, vocab []string) string {
	if len(*b) == 0 {
		return vocab[0]
	}
	v := vocab[int((*b)[0])%len(vocab)]
	*b = (*b)[1:]
	return v
}

func picks(b *[]byte, vocab []string) []string {
	n := int(pick(b, []string{"0", "1", "2", "3", "2", "3"})[0] - '0')
	out := make([]string, n)
	for i := range out {
		out[i] = pick(b, vocab)
	}
	return out
}

var (
	vNames     = []string{"a", "b", "a", "x"}
	vNS        = []string{"", "ns1", "ns2"}
	vVerbs     = []string{"get", "list", "watch", "*", "*", "create"}
	vGroups    = []string{"", "apps", "*", "example.com"}
	vResources = []string{"pods", "pods/status", "*/status", "*", "*", "secrets", "pods/log", "status"}
	vURLs      = []string{"/api", "/api/*", "*", "/apis*", "/metrics", "/api/v1", "/**"}
	vPaths     = []string{"/api", "/api/v1", "/apis", "/apis/apps", "/metrics", "/", "/api/"}
	vSubjects  = []string{"User", "Group", "ServiceAccount", "Other"}
	vUsers     = []string{"a", "b", "system:serviceaccount:ns1:a", "system:serviceaccount:ns2:b", "system:serviceaccount::a"}
	vUGroups   = []string{"a", "b", "system:authenticated", "system:serviceaccounts"}
	vRefKinds  = []string{"Role", "ClusterRole", "ClusterRole", "Other"}
)

// genObjects builds RBAC objects and a request from fuzz bytes.
func genObjects(b []byte) (*authz.Objects, *authz.Attributes) {
	o := &authz.Objects{}
	rule := func() authz.PolicyRule {
		r := authz.PolicyRule{Verbs: picks(&b, vVerbs), APIGroups: picks(&b, vGroups), Resources: picks(&b, vResources)}
		if pick(&b, []string{"n", "y"}) == "y" {
			r.ResourceNames = picks(&b, vNames)
		}
		if pick(&b, []string{"n", "y"}) == "y" {
			r.NonResourceURLs = picks(&b, vURLs)
		}
		return r
	}
	role := func(ns string) authz.Role {
		r := authz.Role{Namespace: ns, Name: pick(&b, vNames)}
		for range int(pick(&b, []string{"0", "1", "2"})[0] - '0') {
			r.Rules = append(r.Rules, rule())
		}
		return r
	}
	binding := func(ns string) authz.Binding {
		bd := authz.Binding{Namespace: ns, Name: "b", RoleRef: authz.RoleRef{Kind: pick(&b, vRefKinds), Name: pick(&b, vNames)}}
		for range int(pick(&b, []string{"1", "2"})[0] - '0') {
			s := authz.Subject{Kind: pick(&b, vSubjects), Namespace: pick(&b, vNS)}
			if s.Kind == "Group" {
				s.Name = pick(&b, vUGroups)
			} else {
				s.Name = pick(&b, vNames)
			}
			bd.Subjects = append(bd.Subjects, s)
		}
		return bd
	}
	// Names must be unique per kind and namespace, as in etcd.
	seen := map[string]bool{}
	for range 5 {
		if r := role(""); !seen["cr/"+r.Name] {
			seen["cr/"+r.Name] = true
			o.ClusterRoles = append(o.ClusterRoles, r)
		}
		if r := role(pick(&b, vNS[1:])); !seen["r/"+r.Namespace+"/"+r.Name] {
			seen["r/"+r.Namespace+"/"+r.Name] = true
			o.Roles = append(o.Roles, r)
		}
		o.ClusterRoleBindings = append(o.ClusterRoleBindings, binding(""))
		o.RoleBindings = append(o.RoleBindings, binding(pick(&b, vNS[1:])))
	}
	a := &authz.Attributes{User: pick(&b, vUsers), Groups: picks(&b, vUGroups), Verb: pick(&b, vVerbs[:3])}
	if pick(&b, []string{"r", "r", "n"}) == "n" {
		a.Path = pick(&b, vPaths)
	} else {
		a.ResourceRequest = true
		a.Namespace = pick(&b, vNS)
		a.APIGroup = pick(&b, []string{"", "apps", "example.com"})
		a.Resource, a.Subresource, _ = strings.Cut(pick(&b, []string{"pods", "pods/status", "secrets", "pods/log", "deployments/status"}), "/")
		a.Name = pick(&b, vNames)
	}
	return o, a
}

// FuzzRBAC checks RBAC's indexed evaluation against refAuthorize on
// random objects and requests.
func FuzzRBAC(f *testing.F) {
	for _, s := range []string{"", "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"\x00\x01\x00\x01\x00\x01\x02\x03\x01\x01\x01\x01\x00\x02\x01\x01\x00\x01\x01\x01\x02\x01\x00\x00\x01\x02\x00\x01\x01\x01\x01\x02\x02\x02\x00\x01\x01\x01\x01\x00\x00\x01\x02\x01\x01\x02\x01\x00\x01\x01\x02\x01\x01\x01"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, a := genObjects(b)
		r := authz.NewRBAC()
		r.Replace(o)
		d, _, _ := r.Authorize(a)
		if want := refAuthorize(o, a); (d == authz.Allow) != want {
			t.Fatalf("Authorize(%+v) = %v, reference allowed=%v; objects %+v", a, d, want, o)
		}
	})
}

// TestRBACGenerated runs the fuzz comparison on many generated inputs.
func TestRBACGenerated(t *testing.T) {
	allowed := 0
	b := make([]byte, 128)
	seed := uint32(1)
	for range 20000 {
		for i := range b {
			seed = seed*1664525 + 1013904223
			b[i] = byte(seed >> 24)
		}
		o, a := genObjects(b)
		r := authz.NewRBAC()
		r.Replace(o)
		d, _, _ := r.Authorize(a)
		want := refAuthorize(o, a)
		if (d == authz.Allow) != want {
			t.Fatalf("Authorize(%+v) = %v, reference allowed=%v; objects %+v", a, d, want, o)
		}
		if want {
			allowed++
		}
	}
	t.Logf("%d of 20000 allowed", allowed)
	if allowed < 500 || allowed > 19500 {
		t.Errorf("%d of 20000 allowed: the generator does not exercise both answers", allowed)
	}
}

func benchRBAC() (*authz.RBAC, *authz.Attributes, *authz.Attributes) {
	o := &authz.Objects{}
	// A cluster-sized set: 300 ClusterRoles, 100 namespaces with 5 Roles
	// and 5 RoleBindings each, 200 ClusterRoleBindings.
	for i := range 300 {
		o.ClusterRoles = append(o.ClusterRoles, authz.Role{Name: "cr" + itoa(i), Rules: []authz.PolicyRule{
			{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"g" + itoa(i)}, Resources: []string{"r" + itoa(i), "s" + itoa(i)}}}})
	}
	for i := range 200 {
		o.ClusterRoleBindings = append(o.ClusterRoleBindings, authz.Binding{Name: "crb" + itoa(i),
			RoleRef:  authz.RoleRef{Kind: "ClusterRole", Name: "cr" + itoa(i)},
			Subjects: []authz.Subject{{Kind: "User", Name: "u" + itoa(i)}, {Kind: "Group", Name: "g" + itoa(i%10)}}})
	}
	for n := range 100 {
		ns := "ns" + itoa(n)
		for i := range 5 {
			o.Roles = append(o.Roles, authz.Role{Namespace: ns, Name: "r" + itoa(i), Rules: []authz.PolicyRule{
				{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, ResourceNames: []string{"x" + itoa(i)}}}})
			o.RoleBindings = append(o.RoleBindings, authz.Binding{Namespace: ns, Name: "rb" + itoa(i),
				RoleRef:  authz.RoleRef{Kind: "Role", Name: "r" + itoa(i)},
				Subjects: []authz.Subject{{Kind: "ServiceAccount", Name: "sa" + itoa(i)}}})
		}
	}
	r := authz.NewRBAC()
	r.Replace(o)
	allow := &authz.Attributes{User: "system:serviceaccount:ns42:sa3", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns42", "system:authenticated"},
		Verb: "get", ResourceRequest: true, Namespace: "ns42", Resource: "secrets", Name: "x3"}
	deny := *allow
	deny.Name = "x4"
	return r, allow, &deny
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestRBACAuthorizeAllocs(t *testing.T) {
	r, allow, deny := benchRBAC()
	for name, a := range map[string]*authz.Attributes{"allowed": allow, "denied": deny} {
		want := authz.Allow
		if a == deny {
			want = authz.NoOpinion
		}
		if d, _, _ := r.Authorize(a); d != want {
			t.Fatalf("%s: Authorize = %v, want %v", name, d, want)
		}
		if n := testing.AllocsPerRun(100, func() { r.Authorize(a) }); n != 0 {
			t.Errorf("%s: Authorize allocates %v times, want 0", name, n)
		}
	}
}

func BenchmarkRBACAuthorize(b *testing.B) {
	r, allow, deny := benchRBAC()
	for name, a := range map[string]*authz.Attributes{"allowed": allow, "denied": deny} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Authorize(a)
			}
		})
	}
}

func TestChainAuthorizeAllocs(t *testing.T) {
	r, allow, deny := benchRBAC()
	c, err := authz.NewChain([]authz.Mode{{Name: authz.ModeRBAC, Authorizer: r}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, a := range map[string]*authz.Attributes{"allowed": allow, "denied": deny} {
		if n := testing.AllocsPerRun(100, func() { c.Authorize(a) }); n != 0 {
			t.Errorf("%s: Chain.Authorize allocates %v times, want 0", name, n)
		}
	}
}
