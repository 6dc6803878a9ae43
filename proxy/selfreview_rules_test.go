package proxy

import (
	"slices"
	"testing"

	"github.com/lazyapi/lazyapi/authz"
)

// TestReadOnlyRule: the rules a read-only SelfSubjectRulesReview lists are
// servedVerb's: read verbs and impersonate of resources, create only where
// every resource is a self review, GET and HEAD of non-resource URLs; a
// rule with nothing served is left out.
func TestReadOnlyRule(t *testing.T) {
	for _, tt := range []struct {
		in   authz.PolicyRule
		want []string // nil: left out
	}{
		{authz.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}, []string{"get", "list", "watch"}},
		{authz.PolicyRule{Verbs: []string{"get", "update", "patch", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}, []string{"get", "watch"}},
		{authz.PolicyRule{Verbs: []string{"create", "delete"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}, nil},
		{authz.PolicyRule{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}}, []string{"impersonate"}},
		{authz.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"},
			Resources: []string{"selfsubjectaccessreviews", "selfsubjectrulesreviews"}}, []string{"create"}},
		{authz.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"authorization.k8s.io"},
			Resources: []string{"selfsubjectaccessreviews", "subjectaccessreviews"}}, nil},
		{authz.PolicyRule{Verbs: []string{"*"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"selfsubjectreviews"}},
			[]string{"get", "list", "watch", "create"}},
		{authz.PolicyRule{Verbs: []string{"create"}, APIGroups: []string{"*"}, Resources: []string{"selfsubjectreviews"}}, nil},
		{authz.PolicyRule{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}, []string{"get", "head"}},
		{authz.PolicyRule{Verbs: []string{"get", "post"}, NonResourceURLs: []string{"/healthz"}}, []string{"get"}},
		{authz.PolicyRule{Verbs: []string{"post"}, NonResourceURLs: []string{"/logs"}}, nil},
	} {
		got, ok := readOnlyRule(tt.in)
		if ok != (tt.want != nil) || ok && !slices.Equal(got.Verbs, tt.want) {
			t.Errorf("readOnlyRule(%+v) = %q, %v; want %q", tt.in, got.Verbs, ok, tt.want)
		}
		if ok && (!slices.Equal(got.Resources, tt.in.Resources) || !slices.Equal(got.NonResourceURLs, tt.in.NonResourceURLs)) {
			t.Errorf("readOnlyRule(%+v) changed what the rule names: %+v", tt.in, got)
		}
	}
}
