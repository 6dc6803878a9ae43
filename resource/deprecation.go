package resource

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/scheme"
)

// The prerelease-lifecycle methods k8s.io/api generates for its types
// (+k8s:prerelease-lifecycle-gen tags).
type (
	lifecycleDeprecated interface {
		APILifecycleDeprecated() (major, minor int)
	}
	lifecycleReplacement interface {
		APILifecycleReplacement() schema.GroupVersionKind
	}
)

// builtinWarning returns the Warning header kube-apiserver v1.37 sends with
// every response for group/version kind, or "" when that version is not
// deprecated. It is k8s.io/apiserver/pkg/endpoints/deprecation's
// IsDeprecated and WarningMessage (applied by the API installer to every
// route of a resource, installer.go registerResourceHandlers), written out
// here because importing k8s.io/apiserver would raise shared dependencies
// (prometheus) of the whole module.
func builtinWarning(gvk schema.GroupVersionKind) (string, error) {
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return "", fmt.Errorf("cannot create %v: %w", gvk, err)
	}
	dep, ok := obj.(lifecycleDeprecated)
	if !ok {
		return "", nil
	}
	major, minor := dep.APILifecycleDeprecated()
	if (major == 0 && minor == 0) || major > kubeMajor || (major == kubeMajor && minor > kubeMinor) {
		return "", nil
	}
	msg := fmt.Sprintf("%s %s is deprecated in v%d.%d+", gvk.GroupVersion().String(), gvk.Kind, major, minor)
	if rem, ok := obj.(lifecycleRemoved); ok {
		if major, minor := rem.APILifecycleRemoved(); major != 0 || minor != 0 {
			msg += fmt.Sprintf(", unavailable in v%d.%d+", major, minor)
		}
	}
	if rep, ok := obj.(lifecycleReplacement); ok {
		if r := rep.APILifecycleReplacement(); !r.Empty() {
			msg += fmt.Sprintf("; use %s %s", r.GroupVersion().String(), r.Kind)
		}
	}
	return warningHeader(msg)
}

// crdWarning returns the Warning header apiextensions-apiserver sends for
// a deprecated served version of a CRD: the version's deprecationWarning,
// or defaultDeprecationWarning's text (customresource_handler.go), which
// names the highest served, not deprecated version newer than it.
func crdWarning(group, kind, ver string, custom *string, versions []crdVersionSpec) (string, error) {
	if custom != nil {
		return warningHeader(*custom)
	}
	msg := fmt.Sprintf("%s/%s %s is deprecated", group, ver, kind)
	var newer []string
	for _, v := range versions {
		if v.served && !v.deprecated && version.CompareKubeAwareVersionStrings(ver, v.name) < 0 {
			newer = append(newer, v.name)
		}
	}
	if len(newer) > 0 {
		slices.SortFunc(newer, func(a, b string) int { return version.CompareKubeAwareVersionStrings(b, a) })
		msg += fmt.Sprintf("; use %s/%s %s", group, newer[0], kind)
	}
	return warningHeader(msg)
}

// crdVersionSpec is what crdWarning needs of each version of a CRD.
type crdVersionSpec struct {
	name               string
	served, deprecated bool
}

// warningHeader formats a warning as kube-apiserver's warning recorder
// does: code 299, agent "-", the text quoted (filters/warning.go,
// utilnet.NewWarningHeader).
func warningHeader(text string) (string, error) {
	h, err := utilnet.NewWarningHeader(299, "-", text)
	if err != nil {
		return "", fmt.Errorf("cannot format warning %q: %w", text, err)
	}
	return h, nil
}
