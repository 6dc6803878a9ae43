package authz

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
)

// Kinds of role references and subjects, as rbac.authorization.k8s.io/v1.
const (
	KindRole           = "Role"
	KindClusterRole    = "ClusterRole"
	KindUser           = "User"
	KindGroup          = "Group"
	KindServiceAccount = "ServiceAccount"
)

// PolicyRule is rbacv1.PolicyRule (without its JSON tags).
type PolicyRule struct {
	Verbs           []string
	APIGroups       []string
	Resources       []string
	ResourceNames   []string
	NonResourceURLs []string
}

// Role is a Role (Namespace set) or a ClusterRole (Namespace ""): its rules
// as stored. An aggregated ClusterRole's rules are those the aggregation
// controller wrote; its aggregationRule is not evaluated here, as in
// kube-apiserver.
type Role struct {
	Namespace, Name string
	Rules           []PolicyRule
}

// Subject is rbacv1.Subject.
type Subject struct {
	Kind      string
	APIGroup  string
	Name      string
	Namespace string
}

// RoleRef is rbacv1.RoleRef.
type RoleRef struct {
	APIGroup, Kind, Name string
}

// Binding is a RoleBinding (Namespace set) or a ClusterRoleBinding
// (Namespace "").
type Binding struct {
	Namespace, Name string
	RoleRef         RoleRef
	Subjects        []Subject
}

// Objects are all of a cluster's RBAC objects, as RBAC.Replace takes them.
type Objects struct {
	Roles               []Role
	ClusterRoles        []Role
	RoleBindings        []Binding
	ClusterRoleBindings []Binding
}

// RBAC is the RBAC mode: kube-apiserver's RBACAuthorizer over a snapshot of
// the RBAC objects, indexed by subject. Replace swaps in a new snapshot
// (rebuilding the index); Authorize reads the current one without locks
// and without allocating. It is safe for concurrent use; the zero value
// has no rules (everything is NoOpinion) until Replace.
type RBAC struct {
	snap atomic.Pointer[index]
}

// NewRBAC returns an RBAC authorizer with no rules.
func NewRBAC() *RBAC { return &RBAC{} }

// index is an immutable snapshot: for the cluster scope (ClusterRoleBindings)
// and for each namespace (its RoleBindings), the rule lists granted to
// each user name and each group. ServiceAccount subjects are indexed under
// their user name, system:serviceaccount:NS:NAME, since kube-apiserver
// matches them against the user name only (serviceaccount.MatchesUsername).
type index struct {
	cluster    scope
	namespaces map[string]*scope
	// counts for Stats.
	roles, clusterRoles, roleBindings, clusterRoleBindings int
}

// scope maps subjects to the rule lists their bindings grant. A rule list
// is shared by every binding to the same role; a subject bound twice to
// one role has it twice (harmless: the first match wins).
type scope struct {
	users  map[string][]grant
	groups map[string][]grant
}

// grant is one binding's grant to one subject: the role's rules and
// kube-apiserver's reason when they allow ("RBAC: allowed by
// RoleBinding ..."), built once per index.
type grant struct {
	rl     *ruleList
	reason string
}

// ruleList is one role's rules or, for a binding whose role cannot be
// resolved, the error kube-apiserver reports for it (in the reason of a
// denial: "RBAC: ...").
type ruleList struct {
	rules []PolicyRule
	err   string
}

func (s *scope) add(sub *Subject, b *Binding, rl *ruleList) {
	bindingNS := b.Namespace
	g := grant{rl: rl, reason: "RBAC: allowed by " + describeBinding(b, sub)}
	switch sub.Kind {
	case KindUser:
		s.users = appendTo(s.users, sub.Name, g)
	case KindGroup:
		s.groups = appendTo(s.groups, sub.Name, g)
	case KindServiceAccount:
		// appliesToUser: a subject without namespace means the binding's
		// namespace; none at all (a ClusterRoleBinding's) never matches.
		ns := sub.Namespace
		if ns == "" {
			ns = bindingNS
		}
		if ns == "" {
			return
		}
		s.users = appendTo(s.users, ServiceAccountPrefix+ns+":"+sub.Name, g)
	}
	// Other kinds never match, as in kube-apiserver.
}

func appendTo(m map[string][]grant, k string, g grant) map[string][]grant {
	if m == nil {
		m = make(map[string][]grant)
	}
	m[k] = append(m[k], g)
	return m
}

// describeBinding is kube-apiserver's clusterRoleBindingDescriber and
// roleBindingDescriber with describeSubject.
func describeBinding(b *Binding, sub *Subject) string {
	var subject string
	if sub.Kind == KindServiceAccount {
		ns := sub.Namespace
		if ns == "" {
			ns = b.Namespace
		}
		subject = fmt.Sprintf("%s %q", sub.Kind, sub.Name+"/"+ns)
	} else {
		subject = fmt.Sprintf("%s %q", sub.Kind, sub.Name)
	}
	if b.Namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.Name, b.RoleRef.Kind, b.RoleRef.Name, subject)
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", b.Name+"/"+b.Namespace, b.RoleRef.Kind, b.RoleRef.Name, subject)
}

// ServiceAccountPrefix starts a service account's user name:
// system:serviceaccount:NAMESPACE:NAME.
const ServiceAccountPrefix = "system:serviceaccount:"

// Replace makes objs the RBAC objects Authorize evaluates, from the next
// call on. It builds a new index (O(objects)) and does not retain objs's
// slices' backing arrays beyond the rules it points at: the caller must
// not modify them afterwards.
func (r *RBAC) Replace(objs *Objects) {
	ix := &index{
		namespaces:          make(map[string]*scope),
		roles:               len(objs.Roles),
		clusterRoles:        len(objs.ClusterRoles),
		roleBindings:        len(objs.RoleBindings),
		clusterRoleBindings: len(objs.ClusterRoleBindings),
	}
	clusterRoles := make(map[string]*ruleList, len(objs.ClusterRoles))
	for i := range objs.ClusterRoles {
		cr := &objs.ClusterRoles[i]
		clusterRoles[cr.Name] = &ruleList{rules: cr.Rules}
	}
	roles := make(map[string]*ruleList, len(objs.Roles))
	for i := range objs.Roles {
		ro := &objs.Roles[i]
		roles[ro.Namespace+"/"+ro.Name] = &ruleList{rules: ro.Rules}
	}
	// resolve is GetRoleReferenceRules: the referenced role's rules, or
	// the error kube-apiserver's listers give (a ClusterRoleBinding's
	// Role is looked up in namespace "", where none exists).
	resolve := func(ref RoleRef, ns string) *ruleList {
		var rl *ruleList
		switch ref.Kind {
		case KindRole:
			if rl = roles[ns+"/"+ref.Name]; rl == nil {
				rl = &ruleList{err: fmt.Sprintf("role.rbac.authorization.k8s.io %q not found", ref.Name)}
			}
		case KindClusterRole:
			if rl = clusterRoles[ref.Name]; rl == nil {
				rl = &ruleList{err: fmt.Sprintf("clusterrole.rbac.authorization.k8s.io %q not found", ref.Name)}
			}
		default:
			rl = &ruleList{err: fmt.Sprintf("unsupported role reference kind: %q", ref.Kind)}
		}
		return rl
	}
	for i := range objs.ClusterRoleBindings {
		b := &objs.ClusterRoleBindings[i]
		rl := resolve(b.RoleRef, "")
		for j := range b.Subjects {
			ix.cluster.add(&b.Subjects[j], b, rl)
		}
	}
	for i := range objs.RoleBindings {
		b := &objs.RoleBindings[i]
		if b.Namespace == "" {
			continue
		}
		rl := resolve(b.RoleRef, b.Namespace)
		sc := ix.namespaces[b.Namespace]
		if sc == nil {
			sc = &scope{}
			ix.namespaces[b.Namespace] = sc
		}
		for j := range b.Subjects {
			sc.add(&b.Subjects[j], b, rl)
		}
	}
	r.snap.Store(ix)
}

// Stats returns the numbers of objects of the current snapshot.
func (r *RBAC) Stats() (roles, clusterRoles, roleBindings, clusterRoleBindings int) {
	ix := r.snap.Load()
	if ix == nil {
		return 0, 0, 0, 0
	}
	return ix.roles, ix.clusterRoles, ix.roleBindings, ix.clusterRoleBindings
}

// Authorize allows a when a rule bound to its user, one of its groups or
// (for a service account user) its service account, at the cluster scope
// or in a's namespace, matches it, with kube-apiserver's reason naming
// the binding; else it has no opinion (RBAC never denies), with the errors
// of the user's bindings whose roles do not resolve as the reason.
func (r *RBAC) Authorize(a *Attributes) (Decision, string, error) {
	ix := r.snap.Load()
	if ix == nil {
		return NoOpinion, "", nil
	}
	if reason, ok := ix.cluster.allows(a); ok {
		return Allow, reason, nil
	}
	ns := ix.namespaces[a.Namespace]
	if a.Namespace != "" && ns != nil {
		if reason, ok := ns.allows(a); ok {
			return Allow, reason, nil
		}
	}
	// Denied: the reason lists the errors of the user's bindings whose
	// roles do not resolve, as utilerrors.NewAggregate prints them
	// (duplicates dropped; kube-apiserver's order is its informer's, which
	// is random).
	var errs []string
	errs = ix.cluster.errors(a, errs)
	if a.Namespace != "" && ns != nil {
		errs = ns.errors(a, errs)
	}
	switch len(errs) {
	case 0:
		return NoOpinion, "", nil
	case 1:
		return NoOpinion, "RBAC: " + errs[0], nil
	}
	return NoOpinion, "RBAC: [" + strings.Join(errs, ", ") + "]", nil
}

// errors appends the errors of a's bindings in s that are not in errs.
func (s *scope) errors(a *Attributes, errs []string) []string {
	add := func(gs []grant) {
		for _, g := range gs {
			if g.rl.err != "" && !slices.Contains(errs, g.rl.err) {
				errs = append(errs, g.rl.err)
			}
		}
	}
	add(s.users[a.User])
	for _, g := range a.Groups {
		add(s.groups[g])
	}
	return errs
}

func (s *scope) allows(a *Attributes) (reason string, ok bool) {
	for _, g := range s.users[a.User] {
		if g.rl.allows(a) {
			return g.reason, true
		}
	}
	if len(s.groups) == 0 {
		return "", false
	}
	for _, name := range a.Groups {
		for _, g := range s.groups[name] {
			if g.rl.allows(a) {
				return g.reason, true
			}
		}
	}
	return "", false
}

// RulesFor returns the rules RBAC grants the user (name and groups) in
// namespace ns ("" : the cluster scope only), as kube-apiserver's
// RulesFor for SelfSubjectRulesReview, and the errors of bindings whose
// roles do not resolve. The rules are shared: do not modify them.
func (r *RBAC) RulesFor(user string, groups []string, ns string) (rules []PolicyRule, errs []string) {
	ix := r.snap.Load()
	if ix == nil {
		return nil, nil
	}
	collect := func(s *scope) {
		add := func(gs []grant) {
			for _, g := range gs {
				rules = append(rules, g.rl.rules...)
				if g.rl.err != "" && !slices.Contains(errs, g.rl.err) {
					errs = append(errs, g.rl.err)
				}
			}
		}
		add(s.users[user])
		for _, name := range groups {
			add(s.groups[name])
		}
	}
	collect(&ix.cluster)
	if sc := ix.namespaces[ns]; ns != "" && sc != nil {
		collect(sc)
	}
	return rules, errs
}

func (rl *ruleList) allows(a *Attributes) bool {
	for i := range rl.rules {
		if RuleAllows(a, &rl.rules[i]) {
			return true
		}
	}
	return false
}

// RuleAllows is kube-apiserver's rbac.RuleAllows: whether rule matches a.
func RuleAllows(a *Attributes, rule *PolicyRule) bool {
	if a.ResourceRequest {
		return has(rule.Verbs, a.Verb, "*") &&
			has(rule.APIGroups, a.APIGroup, "*") &&
			resourceMatches(rule, a.Resource, a.Subresource) &&
			(len(rule.ResourceNames) == 0 || has(rule.ResourceNames, a.Name, ""))
	}
	return has(rule.Verbs, a.Verb, "*") && nonResourceURLMatches(rule, a.Path)
}

// has reports whether set holds v or all (all "" never matches: used for
// resourceNames, which have no wildcard).
func has(set []string, v, all string) bool {
	for _, s := range set {
		if s == v || (all != "" && s == all) {
			return true
		}
	}
	return false
}

// resourceMatches is ResourceMatches: "*", "resource[/subresource]" or,
// for a subresource, "*/subresource". It compares without building
// "resource/subresource".
func resourceMatches(rule *PolicyRule, resource, sub string) bool {
	for _, rr := range rule.Resources {
		if rr == "*" {
			return true
		}
		if sub == "" {
			if rr == resource {
				return true
			}
			continue
		}
		if len(rr) == len(resource)+1+len(sub) && rr[len(resource)] == '/' &&
			strings.HasPrefix(rr, resource) && strings.HasSuffix(rr, sub) {
			return true
		}
		if len(rr) == len(sub)+2 && strings.HasPrefix(rr, "*/") && strings.HasSuffix(rr, sub) {
			return true
		}
	}
	return false
}

// nonResourceURLMatches is NonResourceURLMatches: "*", the path, or a
// prefix ending in "*" (all trailing stars trimmed, as strings.TrimRight).
func nonResourceURLMatches(rule *PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == "*" || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}
