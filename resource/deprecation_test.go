package resource

import (
	"maps"
	"testing"
)

// TestBuiltinWarnings pins the served built-in versions kube-apiserver
// v1.37 warns about, with its exact header values (k8s.io/api's
// prerelease-lifecycle methods through deprecation.WarningMessage).
func TestBuiltinWarnings(t *testing.T) {
	got := map[string]string{}
	for _, r := range NewBuiltin().Resources() {
		if r.Warning != "" {
			got[r.APIVersion()+" "+r.Resource] = r.Warning
		}
	}
	want := map[string]string{
		"v1 endpoints": `299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice"`,
	}
	for k, v := range wantBetaWarnings {
		want[k] = v
	}
	if !maps.Equal(got, want) {
		t.Errorf("warnings:\n got %q\nwant %q", got, want)
	}
}

// TestCRDWarning: a deprecated served CRD version carries its
// deprecationWarning, or apiextensions-apiserver's default text naming the
// newest served version that is not deprecated.
func TestCRDWarning(t *testing.T) {
	stored := []byte(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.example.com"},
"spec":{"group":"example.com","names":{"plural":"widgets","kind":"Widget"},"scope":"Namespaced",
"versions":[{"name":"v1alpha1","served":true,"storage":false,"deprecated":true},
{"name":"v1beta1","served":true,"storage":false,"deprecated":true,"deprecationWarning":"use \"v1\" now"},
{"name":"v1","served":true,"storage":true},{"name":"v2","served":false,"storage":false}]},
"status":{"conditions":[{"type":"Established","status":"True"}]}}`)
	c, err := parseCRD(stored)
	if err != nil || c == nil {
		t.Fatalf("parseCRD = %v, %v", c, err)
	}
	got := map[string]string{}
	for _, r := range c.resources() {
		got[r.Version] = r.Warning
	}
	want := map[string]string{
		"v1alpha1": `299 - "example.com/v1alpha1 Widget is deprecated; use example.com/v1 Widget"`,
		"v1beta1":  `299 - "use \"v1\" now"`,
		"v1":       "",
	}
	if !maps.Equal(got, want) {
		t.Errorf("warnings = %q, want %q", got, want)
	}
}

// wantBetaWarnings are the deprecated beta versions lazyapi serves: none,
// as kube-apiserver v1.37 serves every kind stored at a beta version at
// its GA version only (same schema: rewritten; PodCertificateRequest:
// converted).
var wantBetaWarnings = map[string]string{}
