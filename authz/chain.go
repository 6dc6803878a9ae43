package authz

import (
	"fmt"
	"slices"
	"strings"

	"github.com/VictoriaMetrics/metrics"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
)

// Mode names of --authorization-mode, as kube-apiserver spells them.
const (
	ModeRBAC        = "RBAC"
	ModeWebhook     = "Webhook"
	ModeAlwaysAllow = "AlwaysAllow"
	ModeAlwaysDeny  = "AlwaysDeny"
)

// ParseModes parses an --authorization-mode value: a comma-separated list
// of RBAC, Webhook, AlwaysAllow and AlwaysDeny, each at most once. Node and
// ABAC, which kube-apiserver also knows, are refused with a reason.
func ParseModes(s string) ([]string, error) {
	var modes []string
	for m := range strings.SplitSeq(s, ",") {
		m = strings.TrimSpace(m)
		switch m {
		case ModeRBAC, ModeWebhook, ModeAlwaysAllow, ModeAlwaysDeny:
		case "Node":
			return nil, fmt.Errorf("mode %q is not supported: lazyapi serves no kubelet; drop it (the Node authorizer only ever allows kubelets' own objects)", m)
		case "ABAC":
			return nil, fmt.Errorf("mode %q is not supported: use RBAC", m)
		case "":
			return nil, fmt.Errorf("empty mode in %q", s)
		default:
			return nil, fmt.Errorf("unknown mode %q: must be one of RBAC, Webhook, AlwaysAllow, AlwaysDeny", m)
		}
		if slices.Contains(modes, m) {
			return nil, fmt.Errorf("mode %q is given twice", m)
		}
		modes = append(modes, m)
	}
	return modes, nil
}

// Mode is one authorizer of a Chain with its mode name (RBAC, Webhook,
// AlwaysAllow, AlwaysDeny).
type Mode struct {
	Name       string
	Authorizer Authorizer
}

// Chain asks its modes in order, as kube-apiserver's union authorizer,
// after allowing the system:masters group everything. It is safe for
// concurrent use.
type Chain struct {
	modes []chainMode
	// masters counts requests allowed for system:masters membership.
	masters   *metrics.Counter
	forbidden *metrics.Counter
}

type chainMode struct {
	Mode
	reasonName string // kube-apiserver's authorizer name in reasons: the lower-case mode, "default" for Webhook
	// counters by Decision.
	decisions [3]*metrics.Counter
	errors    *metrics.Counter // answers with an error (any decision)
}

// NewChain returns a chain of modes. Its decisions are counted in ms as
// lazyapi_authorization_decisions_total{mode,decision} (decision allowed,
// denied or no_opinion; mode system:masters for the privileged group),
// lazyapi_authorization_errors_total{mode} (a Webhook that could not be
// asked, an answer both allowed and denied) and
// lazyapi_authorization_forbidden_total.
func NewChain(modes []Mode, ms *metrics.Set) (*Chain, error) {
	if len(modes) == 0 {
		return nil, fmt.Errorf("authz: at least one authorization mode is needed")
	}
	if ms == nil {
		ms = metrics.NewSet()
	}
	c := &Chain{
		masters:   ms.GetOrCreateCounter(`lazyapi_authorization_decisions_total{mode="system:masters",decision="allowed"}`),
		forbidden: ms.GetOrCreateCounter(`lazyapi_authorization_forbidden_total`),
	}
	for _, m := range modes {
		if m.Authorizer == nil {
			return nil, fmt.Errorf("authz: mode %q has no authorizer", m.Name)
		}
		cm := chainMode{Mode: m, reasonName: strings.ToLower(m.Name)}
		if m.Name == ModeWebhook {
			// kube-apiserver names the webhook of
			// --authorization-webhook-config-file "default" in its union
			// (defaultWebhookName), so its reasons read "default: ...".
			cm.reasonName = "default"
		}
		for d := NoOpinion; d <= Deny; d++ {
			cm.decisions[d] = ms.GetOrCreateCounter(fmt.Sprintf(`lazyapi_authorization_decisions_total{mode=%q,decision=%q}`, m.Name, d))
		}
		cm.errors = ms.GetOrCreateCounter(fmt.Sprintf(`lazyapi_authorization_errors_total{mode=%q}`, m.Name))
		c.modes = append(c.modes, cm)
	}
	return c, nil
}

// Authorize reports whether a is allowed, by which mode (or
// "system:masters"), and the reason, as kube-apiserver's union
// authorizer: for an allowed or denied request the deciding mode's reason
// (RBAC names the binding) and error; when no mode decided, each mode's
// "name: reason" joined by newlines and the modes' errors aggregated
// (utilerrors.NewAggregate). An error never allows: kube-apiserver answers
// a request that was not allowed and has an error 500 (its authorization
// filter's InternalError), a refusal without error 403.
func (c *Chain) Authorize(a *Attributes) (allowed bool, mode, reason string, err error) {
	if slices.Contains(a.Groups, SystemMasters) {
		c.masters.Inc()
		return true, SystemMasters, "", nil
	}
	var reasons []string
	var errs []error
	for i := range c.modes {
		m := &c.modes[i]
		d, r, err := m.Authorizer.Authorize(a)
		m.decisions[d].Inc()
		if err != nil {
			m.errors.Inc()
			errs = append(errs, err)
		}
		switch d {
		case Allow:
			return true, m.Name, r, err
		case Deny:
			c.forbidden.Inc()
			return false, m.Name, r, err
		}
		if r != "" {
			reasons = append(reasons, m.reasonName+": "+r)
		}
	}
	c.forbidden.Inc()
	if len(errs) > 0 {
		err = utilerrors.NewAggregate(errs)
	}
	return false, "", strings.Join(reasons, "\n"), err
}

// Modes returns the chain's mode names in order.
func (c *Chain) Modes() []string {
	names := make([]string, len(c.modes))
	for i, m := range c.modes {
		names[i] = m.Name
	}
	return names
}

// ForbiddenMessage is kube-apiserver's Forbidden message for a denied
// request (responsewriters.forbiddenMessage, with its HTML sanitizer),
// followed by ": reason" when reason is not empty, and prefixed as
// apierrors.NewForbidden prefixes it: `configmaps is forbidden: User "x"
// cannot list resource "configmaps" in API group "" in the namespace "y"`.
func ForbiddenMessage(a *Attributes, reason string) string {
	var msg string
	switch {
	case !a.ResourceRequest:
		msg = fmt.Sprintf("User %q cannot %s path %q", a.User, a.Verb, a.Path)
	default:
		res := a.Resource
		if a.Subresource != "" {
			res += "/" + a.Subresource
		}
		if a.Namespace != "" {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q in the namespace %q", a.User, a.Verb, res, a.APIGroup, a.Namespace)
		} else {
			msg = fmt.Sprintf("User %q cannot %s resource %q in API group %q at the cluster scope", a.User, a.Verb, res, a.APIGroup)
		}
	}
	msg = sanitizer.Replace(msg)
	if reason != "" {
		msg += ": " + reason
	}
	// apierrors.NewForbidden(GroupResource{a.APIGroup, a.Resource}, a.Name, err)
	gr := a.Resource
	if a.APIGroup != "" {
		gr += "." + a.APIGroup
	}
	switch {
	case gr == "":
		return "forbidden: " + msg
	case a.Name == "":
		return gr + " is forbidden: " + msg
	}
	return fmt.Sprintf("%s %q is forbidden: %s", gr, a.Name, msg)
}

// InternalErrorMessage is kube-apiserver's answer body to a request no
// mode allowed when the chain had an error (responsewriters.InternalError:
// http.Error with the sanitized text, status 500): `Internal Server
// Error: "<request URI>": <err>`.
func InternalErrorMessage(requestURI string, err error) string {
	return sanitizer.Replace(fmt.Sprintf("Internal Server Error: %q: %v", requestURI, err))
}

var sanitizer = strings.NewReplacer(`&`, "&amp;", `<`, "&lt;", `>`, "&gt;")

// RuleResolver lists the rules a mode grants a user, for
// SelfSubjectRulesReview.
type RuleResolver interface {
	// RulesFor returns the rules granted to user with groups in
	// namespace ns, and errors met while resolving them.
	RulesFor(user string, groups []string, ns string) (rules []PolicyRule, errs []string)
}

var (
	_ RuleResolver = (*RBAC)(nil)
	_ RuleResolver = AlwaysAllow{}
	_ RuleResolver = AlwaysDeny{}
)

// RulesUnsupported is a mode that cannot list the rules it grants (the
// Webhook mode): a SelfSubjectRulesReview is then incomplete and carries
// the returned error text, as kube-apiserver's mode returns it.
type RulesUnsupported interface {
	RulesUnsupported() string
}

// RulesFor grants everything, as kube-apiserver's AlwaysAllow resolver.
func (AlwaysAllow) RulesFor(string, []string, string) ([]PolicyRule, []string) {
	return []PolicyRule{
		{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
		{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
	}, nil
}

// RulesFor grants nothing.
func (AlwaysDeny) RulesFor(string, []string, string) ([]PolicyRule, []string) { return nil, nil }

// RulesFor is the union of the modes' rules (kube-apiserver's
// union.NewRuleResolvers); incomplete is true when a mode cannot list its
// rules (Webhook), with that mode's error among errs.
func (c *Chain) RulesFor(user string, groups []string, ns string) (rules []PolicyRule, incomplete bool, errs []string) {
	for _, m := range c.modes {
		rr, ok := m.Authorizer.(RuleResolver)
		if !ok {
			incomplete = true
			if u, ok := m.Authorizer.(RulesUnsupported); ok {
				errs = append(errs, u.RulesUnsupported())
			}
			continue
		}
		r, e := rr.RulesFor(user, groups, ns)
		rules = append(rules, r...)
		errs = append(errs, e...)
	}
	return rules, incomplete, errs
}
