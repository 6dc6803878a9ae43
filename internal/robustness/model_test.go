package robustness

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

func stored(t *testing.T, tier, write string) []byte {
	t.Helper()
	b, err := storagefmt.Protobuf(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns",
		Labels: map[string]string{"tier": tier}, Annotations: map[string]string{writeAnnotation: write}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// testModel: key a enters tier=a at 2, changes at 3, leaves at 4, comes
// back at 5 and is deleted at 6; key b is created at 7.
func testModel(t *testing.T) *model {
	m := newModel()
	const a, b = "/registry/configmaps/ns/a", "/registry/configmaps/ns/b"
	m.apply(a, 2, stored(t, "a", "w0.1"), false)
	m.apply(a, 3, stored(t, "a", "w0.2"), false)
	m.apply(a, 4, stored(t, "b", "w0.3"), false)
	m.apply(a, 5, stored(t, "a", "w0.4"), false)
	m.apply(a, 6, nil, true)
	m.apply(b, 7, stored(t, "a", "w1.1"), false)
	m.progress(7)
	return m
}

func TestModelEventsAsKubeAPIServer(t *testing.T) {
	m := testModel(t)
	sel, _ := labels.Parse("tier=a")
	got := m.events(scope{prefix: "/registry/configmaps/", sel: sel}, 0, 7)
	want := []event{
		{Type: "ADDED", Key: "/registry/configmaps/ns/a", RV: 2, Write: "w0.1"},
		{Type: "MODIFIED", Key: "/registry/configmaps/ns/a", RV: 3, Write: "w0.2"},
		{Type: "DELETED", Key: "/registry/configmaps/ns/a", RV: 4, Write: "w0.2"}, // leaves the selector: its previous state
		{Type: "ADDED", Key: "/registry/configmaps/ns/a", RV: 5, Write: "w0.4"},
		{Type: "DELETED", Key: "/registry/configmaps/ns/a", RV: 6, Write: "w0.4"},
		{Type: "ADDED", Key: "/registry/configmaps/ns/b", RV: 7, Write: "w1.1"},
	}
	if len(got) != len(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := m.state(scope{prefix: "/registry/configmaps/ns/", sel: sel}, 4); len(s) != 0 {
		t.Errorf("state at 4 with tier=a = %v, want none", s)
	}
	if s := m.state(scope{prefix: "/registry/configmaps/ns/"}, 5); len(s) != 1 || s[0].RV != 5 || s[0].Write != "w0.4" {
		t.Errorf("state at 5 = %v, want a at 5", s)
	}
}

// TestValidatorsCatch checks that the validators fail answers that break
// the guarantees: a LIST missing an object, a watch missing an event, a
// consistent LIST older than an acknowledged write, a 410 for a revision
// not compacted.
func TestValidatorsCatch(t *testing.T) {
	h := &harness{prefix: "/registry", model: testModel(t)}
	ok := &op{Verb: "list", Mode: "exact", Resource: "configmaps", Namespace: "ns", FromRV: 5,
		Pages: []page{{RV: 5, Items: []item{{Key: "/registry/configmaps/ns/a", RV: 5, Write: "w0.4"}}}}}
	if v := h.validate(ok); v != nil {
		t.Fatalf("a correct LIST fails: %s", v)
	}
	cases := map[string]*op{
		"a LIST at revision N holds exactly etcd's state at N": {Verb: "list", Mode: "exact", Resource: "configmaps", FromRV: 5,
			Pages: []page{{RV: 5, Items: []item{}}}},
		"a consistent read is at least as new as every acknowledged write": {Verb: "list", Mode: "consistent", Resource: "configmaps", Acked: 7,
			Pages: []page{{RV: 5, Items: []item{{Key: "/registry/configmaps/ns/a", RV: 5, Write: "w0.4"}}}}},
		"a watch misses no change": {Verb: "watch", Mode: "list", Resource: "configmaps", Selector: "tier=a", FromRV: 1,
			Events: []event{{Type: "ADDED", Key: "/registry/configmaps/ns/a", RV: 2, Write: "w0.1"}, {Type: "BOOKMARK", RV: 4}}},
		"a watch reports every change in order": {Verb: "watch", Mode: "list", Resource: "configmaps", Selector: "tier=a", FromRV: 3,
			Events: []event{{Type: "MODIFIED", Key: "/registry/configmaps/ns/a", RV: 4, Write: "w0.3"}}},
		"410 Gone only for a compacted revision": {Verb: "list", Mode: "exact", Resource: "configmaps", FromRV: 5, Compacted: 3, Code: 410},
		"initial events equal etcd's state": {Verb: "watch", Mode: "initial", Resource: "configmaps",
			Events: []event{{Type: "BOOKMARK", RV: 7, InitialEnd: true}}},
	}
	for want, o := range cases {
		v := h.validate(o)
		if v == nil || !strings.HasPrefix(v.Guarantee, want) {
			t.Errorf("validate(%s %s) = %v, want a violation of %q", o.Verb, o.Mode, v, want)
		}
	}
}
