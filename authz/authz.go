// Package authz decides whether an authenticated user may make a request,
// as kube-apiserver's authorizers do: RBAC evaluated from the cluster's own
// Roles and bindings (rbac.go), the fixed AlwaysAllow and AlwaysDeny modes,
// and the --authorization-mode chain that asks them in order (chain.go).
// It knows nothing of HTTP or etcd: callers describe a request as
// Attributes and feed RBAC objects to RBAC.Replace.
package authz

// Decision is an authorizer's answer, as k8s.io/apiserver's
// authorizer.Decision.
type Decision int8

const (
	// NoOpinion: the authorizer neither allows nor denies; the chain asks
	// the next one, and a request nobody allowed is forbidden.
	NoOpinion Decision = iota
	// Allow ends the chain: the request is served.
	Allow
	// Deny ends the chain: the request is forbidden.
	Deny
)

func (d Decision) String() string {
	switch d {
	case Allow:
		return "allowed"
	case Deny:
		return "denied"
	}
	return "no_opinion"
}

// Attributes describe a request as kube-apiserver's authorizer.Attributes
// (AttributesRecord). The authorizers only read them.
type Attributes struct {
	// User, UID, Groups and Extra are the authenticated user's.
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string

	// Verb is the lower-case verb: get, list, watch, or for a
	// non-resource request the lower-case HTTP method.
	Verb string
	// ResourceRequest: the request names an API resource (the fields
	// below); false: it is a non-resource request for Path.
	ResourceRequest bool
	Namespace       string
	APIGroup        string
	APIVersion      string
	Resource        string
	Subresource     string
	Name            string
	// Path is the request's URL path (non-resource requests).
	Path string
	// FieldSelector and LabelSelector are the request's fieldSelector
	// and labelSelector query parameters as given, for list, watch and
	// deletecollection requests not made through a /watch/ path
	// (kube-apiserver's RequestInfo.FieldSelector and LabelSelector).
	// RBAC ignores them; a Webhook sends them parsed in the
	// SubjectAccessReview's resourceAttributes, as kube-apiserver does.
	FieldSelector string
	LabelSelector string
}

// SystemMasters is the group kube-apiserver allows everything
// (user.SystemPrivilegedGroup), ahead of every configured mode.
const SystemMasters = "system:masters"

// Authorizer is one mode of the chain. Authorize must be safe for
// concurrent use and must not retain a.
type Authorizer interface {
	Authorize(a *Attributes) (d Decision, reason string, err error)
}

// AlwaysAllow is the AlwaysAllow mode: every request is allowed.
type AlwaysAllow struct{}

// Authorize allows.
func (AlwaysAllow) Authorize(*Attributes) (Decision, string, error) { return Allow, "", nil }

// AlwaysDeny is the AlwaysDeny mode. As kube-apiserver's, it has no
// opinion with reason "Everything is forbidden.", so a later mode can
// still allow.
type AlwaysDeny struct{}

// Authorize has no opinion.
func (AlwaysDeny) Authorize(*Attributes) (Decision, string, error) {
	return NoOpinion, "Everything is forbidden.", nil
}

var (
	_ Authorizer = AlwaysAllow{}
	_ Authorizer = AlwaysDeny{}
	_ Authorizer = (*RBAC)(nil)
)
