package resource

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// notServedFromKube are the group-version-resources kube-apiserver v1.37
// lists in discovery and lazyapi does not serve, with the reason.
var notServedFromKube = map[string]string{
	"v1/bindings":          "create-only pods/binding, not stored",
	"v1/componentstatuses": "computed per request, not stored",
	"authentication.k8s.io/v1/selfsubjectreviews":       "create-only review",
	"authentication.k8s.io/v1/tokenreviews":             "create-only review",
	"authorization.k8s.io/v1/localsubjectaccessreviews": "create-only review",
	"authorization.k8s.io/v1/selfsubjectaccessreviews":  "create-only review",
	"authorization.k8s.io/v1/selfsubjectrulesreviews":   "create-only review",
	"authorization.k8s.io/v1/subjectaccessreviews":      "create-only review",
}

// extraInLazyapi are what lazyapi serves and kube-apiserver v1.37 does not
// list, with the reason.
var extraInLazyapi = map[string]string{}

func readKube(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/kube-apiserver/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestDiscoveryAgainstKubeAPIServer compares lazyapi's discovery with
// kube-apiserver v1.37's own (resource/testdata/kube-apiserver, recorded by
// internal/testing/kubecapture): every resource kube-apiserver lists is served by
// lazyapi with the same names, kind, scope, short names, categories and
// storage version hash, or is one of notServedFromKube; lazyapi serves
// nothing kube-apiserver does not list; every group has kube-apiserver's
// versions and preferred version, less those lazyapi cannot serve. Verbs
// differ by design (lazyapi lists get, list, watch) and subresources are
// not served.
func TestDiscoveryAgainstKubeAPIServer(t *testing.T) {
	tb := NewBuiltin()
	var groups metav1.APIGroupList
	readKube(t, "apis.json", &groups)
	lists := map[string]*metav1.APIResourceList{}
	var core metav1.APIResourceList
	readKube(t, "api~v1.json", &core)
	lists["v1"] = &core
	var mine metav1.APIGroupList
	if err := json.Unmarshal(tb.DiscoveryGroups(), &mine); err != nil {
		t.Fatal(err)
	}
	mineByName := map[string]metav1.APIGroup{}
	for _, g := range mine.Groups {
		mineByName[g.Name] = g
	}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			var l metav1.APIResourceList
			readKube(t, "apis~"+strings.ReplaceAll(v.GroupVersion, "/", "~")+".json", &l)
			lists[v.GroupVersion] = &l
		}
		m, ok := mineByName[g.Name]
		servedGVs := 0
		for _, v := range g.Versions {
			for _, r := range lists[v.GroupVersion].APIResources {
				if _, skip := notServedFromKube[v.GroupVersion+"/"+r.Name]; !skip && !strings.Contains(r.Name, "/") {
					servedGVs++
					break
				}
			}
		}
		if g.Name == "authentication.k8s.io" || g.Name == "authorization.k8s.io" {
			// Listed for the self reviews lazyapi answers
			// (TestDiscoverySelfReviews).
			if !ok {
				t.Errorf("group %s is not listed", g.Name)
			}
			continue
		}
		if servedGVs == 0 {
			if ok {
				t.Errorf("group %s is served by lazyapi but has nothing lazyapi can serve", g.Name)
			}
			continue
		}
		if !ok {
			t.Errorf("group %s of kube-apiserver is not served", g.Name)
			continue
		}
		if m.PreferredVersion != g.PreferredVersion {
			t.Errorf("group %s preferred version %v, kube-apiserver %v", g.Name, m.PreferredVersion, g.PreferredVersion)
		}
	}
	seen := map[string]bool{}
	for gv, l := range lists {
		group, version, ok := strings.Cut(gv, "/")
		if !ok {
			group, version = "", gv
		}
		for _, kr := range l.APIResources {
			if strings.Contains(kr.Name, "/") {
				continue
			}
			key := gv + "/" + kr.Name
			r, ok := tb.Lookup(group, version, kr.Name)
			if _, skip := notServedFromKube[key]; skip {
				if ok {
					t.Errorf("%s is served, but listed in notServedFromKube", key)
				}
				continue
			}
			if !ok {
				t.Errorf("%s is listed by kube-apiserver, not served by lazyapi", key)
				continue
			}
			seen[key] = true
			sn, cats := slices.Clone(kr.ShortNames), slices.Clone(kr.Categories)
			sort.Strings(sn)
			sort.Strings(cats)
			msn, mcats := slices.Clone(r.ShortNames), slices.Clone(r.Categories)
			sort.Strings(msn)
			sort.Strings(mcats)
			if r.Kind != kr.Kind || r.SingularName != kr.SingularName || r.Namespaced != kr.Namespaced ||
				!slices.Equal(sn, msn) || !slices.Equal(cats, mcats) ||
				r.storageVersionHash() != kr.StorageVersionHash {
				t.Errorf("%s: lazyapi %s %s namespaced=%v %q %q hash %s; kube-apiserver %s %s namespaced=%v %q %q hash %s", key,
					r.Kind, r.SingularName, r.Namespaced, msn, mcats, r.storageVersionHash(),
					kr.Kind, kr.SingularName, kr.Namespaced, sn, cats, kr.StorageVersionHash)
			}
		}
	}
	for _, r := range tb.Resources() {
		if key := r.APIVersion() + "/" + r.Resource; !seen[key] && extraInLazyapi[key] == "" {
			t.Errorf("%s is served by lazyapi, not listed by kube-apiserver v1.37", key)
		}
	}
}

// TestDiscoverySubresourcesAgainstKubeAPIServer: the subresources lazyapi
// serves from stored data (status and the like, scale) are listed in
// legacy discovery as kube-apiserver lists them (name, scope, kind, group,
// version; verbs: get only, lazyapi being read-only), and in aggregated
// discovery with kube-apiserver's response kinds; the connect and
// create-only subresources, which lazyapi answers with a Status, are not.
func TestDiscoverySubresourcesAgainstKubeAPIServer(t *testing.T) {
	tb := NewBuiltin()
	var groups metav1.APIGroupList
	readKube(t, "apis.json", &groups)
	files := map[string]string{"v1": "api~v1.json"}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			files[v.GroupVersion] = "apis~" + strings.ReplaceAll(v.GroupVersion, "/", "~") + ".json"
		}
	}
	for gv, f := range files {
		var kl metav1.APIResourceList
		readKube(t, f, &kl)
		group, version, ok := strings.Cut(gv, "/")
		if !ok {
			group, version = "", gv
		}
		var ml metav1.APIResourceList
		doc := tb.DiscoveryCore()
		if group != "" {
			if doc, ok = tb.DiscoveryGroupVersion(group, version); !ok {
				continue
			}
		}
		if err := json.Unmarshal(doc, &ml); err != nil {
			t.Fatal(err)
		}
		mine := map[string]metav1.APIResource{}
		for _, r := range ml.APIResources {
			if strings.Contains(r.Name, "/") {
				mine[r.Name] = r
			}
		}
		for _, kr := range kl.APIResources {
			res, sub, ok := strings.Cut(kr.Name, "/")
			if !ok {
				continue
			}
			r, served := tb.Lookup(group, version, res)
			k := SubNone
			if served {
				k = r.Subresource(sub)
			}
			m, listed := mine[kr.Name]
			delete(mine, kr.Name)
			if k != SubObject && k != SubScale {
				if listed {
					t.Errorf("%s/%s is listed, but lazyapi does not serve it from stored data", gv, kr.Name)
				}
				continue
			}
			if !listed {
				t.Errorf("%s/%s is listed by kube-apiserver and served by lazyapi, not listed", gv, kr.Name)
				continue
			}
			if m.Namespaced != kr.Namespaced || m.Kind != kr.Kind || m.Group != kr.Group || m.Version != kr.Version ||
				!slices.Equal(m.Verbs, []string{"get"}) {
				t.Errorf("%s/%s = %+v, kube-apiserver %+v", gv, kr.Name, m, kr)
			}
		}
		for name := range mine {
			t.Errorf("%s/%s is listed by lazyapi, not by kube-apiserver", gv, name)
		}
	}

	// Aggregated: the resources' and subresources' response kinds.
	type aggList struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Versions []struct {
				Version   string `json:"version"`
				Resources []struct {
					Resource     string          `json:"resource"`
					ResponseKind json.RawMessage `json:"responseKind"`
					Subresources []struct {
						Subresource  string          `json:"subresource"`
						ResponseKind json.RawMessage `json:"responseKind"`
					} `json:"subresources"`
				} `json:"resources"`
			} `json:"versions"`
		} `json:"items"`
	}
	for _, core := range []bool{true, false} {
		var kube, mine aggList
		name := "aggregated-apis.json"
		if core {
			name = "aggregated-api.json"
		}
		readKube(t, name, &kube)
		if err := json.Unmarshal(tb.DiscoveryAggregated(core), &mine); err != nil {
			t.Fatal(err)
		}
		type key struct{ g, v, r string }
		type entry struct {
			kind string
			subs map[string]string
		}
		index := func(l aggList) map[key]entry {
			m := map[key]entry{}
			for _, it := range l.Items {
				for _, v := range it.Versions {
					for _, r := range v.Resources {
						e := entry{kind: string(r.ResponseKind), subs: map[string]string{}}
						for _, s := range r.Subresources {
							e.subs[s.Subresource] = string(s.ResponseKind)
						}
						m[key{it.Metadata.Name, v.Version, r.Resource}] = e
					}
				}
			}
			return m
		}
		km, mm := index(kube), index(mine)
		for k, me := range mm {
			ke, ok := km[k]
			if !ok {
				continue // TestDiscoveryAgainstKubeAPIServer reports it
			}
			if me.kind != ke.kind {
				t.Errorf("aggregated %v responseKind %s, kube-apiserver %s", k, me.kind, ke.kind)
			}
			for s, rk := range me.subs {
				if ke.subs[s] != rk {
					t.Errorf("aggregated %v/%s responseKind %s, kube-apiserver %q", k, s, rk, ke.subs[s])
				}
			}
			r, _ := tb.Lookup(k.g, k.v, k.r)
			for s := range ke.subs {
				if sk := r.Subresource(s); (sk == SubObject || sk == SubScale) && me.subs[s] == "" {
					t.Errorf("aggregated %v lacks subresource %s", k, s)
				}
			}
		}
	}
}

// TestDiscoveryServesWritesAgainstKubeAPIServer: when lazyapi forwards
// what it does not serve (SetServesWrites), every discovery document of the
// built-in table is kube-apiserver v1.37's (resource/testdata/kube-apiserver):
// /apis, every /apis/<group>, /api/v1 and /apis/<group>/<version> with the
// same resources, subresources and verbs, and the aggregated /api and /apis.
func TestDiscoveryServesWritesAgainstKubeAPIServer(t *testing.T) {
	tb := NewBuiltin()
	tb.SetServesWrites(true)
	same := func(name string, mine []byte, v any) {
		t.Helper()
		kube := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		readKube(t, name, kube)
		if err := json.Unmarshal(mine, v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(kube, v) {
			kb, _ := json.Marshal(kube)
			mb, _ := json.Marshal(v)
			t.Errorf("%s differs from kube-apiserver's:\nkube    %s\nlazyapi %s", name, kb, mb)
		}
	}
	var groups metav1.APIGroupList
	same("apis.json", tb.DiscoveryGroups(), &groups)
	same("api~v1.json", tb.DiscoveryCore(), &metav1.APIResourceList{})
	for _, g := range groups.Groups {
		doc, ok := tb.DiscoveryGroup(g.Name)
		if !ok {
			t.Errorf("no /apis/%s", g.Name)
			continue
		}
		same("apis~"+g.Name+".json", doc, &metav1.APIGroup{})
		for _, v := range g.Versions {
			doc, ok := tb.DiscoveryGroupVersion(g.Name, v.Version)
			if !ok {
				t.Errorf("no /apis/%s", v.GroupVersion)
				continue
			}
			same("apis~"+g.Name+"~"+v.Version+".json", doc, &metav1.APIResourceList{})
		}
	}
	same("aggregated-api.json", tb.DiscoveryAggregated(true), &apidiscoveryv2.APIGroupDiscoveryList{})
	same("aggregated-apis.json", tb.DiscoveryAggregated(false), &apidiscoveryv2.APIGroupDiscoveryList{})

	// And back: read-only lists the read verbs again.
	tb.SetServesWrites(false)
	var core metav1.APIResourceList
	if err := json.Unmarshal(tb.DiscoveryCore(), &core); err != nil {
		t.Fatal(err)
	}
	for _, r := range core.APIResources {
		if !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) && !slices.Equal(r.Verbs, []string{"get"}) {
			t.Errorf("read-only: v1 %s verbs %q", r.Name, r.Verbs)
		}
	}
}

// TestDiscoverySelfReviews: read-only, discovery lists the self reviews
// lazyapi answers (create only) in authentication.k8s.io/v1 and
// authorization.k8s.io/v1, and none of the reviews it does not answer
// (tokenreviews, subjectaccessreviews, localsubjectaccessreviews), nor
// bindings or componentstatuses; every other resource lists get, list and
// watch.
func TestDiscoverySelfReviews(t *testing.T) {
	tb := NewBuiltin()
	want := map[string][]string{
		"authentication.k8s.io/v1": {"selfsubjectreviews"},
		"authorization.k8s.io/v1":  {"selfsubjectaccessreviews", "selfsubjectrulesreviews"},
	}
	for gv, names := range want {
		g, v, _ := strings.Cut(gv, "/")
		doc, ok := tb.DiscoveryGroupVersion(g, v)
		if !ok {
			t.Fatalf("no /apis/%s", gv)
		}
		var l metav1.APIResourceList
		if err := json.Unmarshal(doc, &l); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range l.APIResources {
			got = append(got, r.Name)
			if !slices.Equal(r.Verbs, []string{"create"}) || r.Namespaced {
				t.Errorf("%s/%s: verbs %q namespaced %v", gv, r.Name, r.Verbs, r.Namespaced)
			}
		}
		if !slices.Equal(got, names) {
			t.Errorf("/apis/%s lists %q, want %q", gv, got, names)
		}
		if !slices.Contains(tb.DiscoveryGroupVersions(), [2]string{g, v}) {
			t.Errorf("DiscoveryGroupVersions lacks %s", gv)
		}
		if slices.Contains(tb.ServedBuiltinGroupVersions(), [2]string{g, v}) {
			t.Errorf("ServedBuiltinGroupVersions has %s: nothing stored is served there", gv)
		}
	}
	var core metav1.APIResourceList
	if err := json.Unmarshal(tb.DiscoveryCore(), &core); err != nil {
		t.Fatal(err)
	}
	for _, r := range core.APIResources {
		if r.Name == "bindings" || r.Name == "componentstatuses" {
			t.Errorf("read-only lists v1 %s", r.Name)
		}
	}
}

// TestForwardedSubresourcesListed: every subresource of the built-in
// table that lazyapi does not serve from stored data has the discovery
// entry it gets when forwarding.
func TestForwardedSubresourcesListed(t *testing.T) {
	for gr, subs := range builtinSubresources {
		for sub, k := range subs {
			_, ok := forwardedSubresources[gr+"/"+sub]
			if want := k == SubConnect || k == SubCreateOnly; ok != want {
				t.Errorf("%s/%s (kind %d): in forwardedSubresources %v, want %v", gr, sub, k, ok, want)
			}
		}
	}
}
