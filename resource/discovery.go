package resource

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sort"

	"go.uber.org/zap"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// GitVersion is what lazyapi reports as gitVersion at /version: the
// kube-apiserver release whose API it mirrors, with a "-lazyapi" suffix so
// that kubectl parses it (semver pre-release) and a human sees what answers.
const GitVersion = "v1.37.2-lazyapi"

// AggregatedContentType is the media type of the aggregated discovery
// documents returned by DiscoveryAggregated, as kube-apiserver writes it.
const AggregatedContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// snapshot is an immutable view of the table and its discovery documents.
type snapshot struct {
	all         []*Resource
	byGVR       map[gvr]*Resource
	groups      []*group // discovery order, without the core group
	groupByName map[string]*group

	version, apiVersions, core, groupList []byte
	aggregatedCore, aggregatedAPIs        []byte
	// gen is the Table's rebuild count at this snapshot.
	gen uint64
	// crdDocs are the CRD doc builder's results (Table.CRDDocs).
	crdDocs []any
	// builtinGVs are the served built-in group-versions.
	builtinGVs      [][2]string
	groupDoc        map[string][]byte
	groupVersionDoc map[string][]byte // "group/version"
}

type group struct {
	name      string
	priority  int
	versions  []string // preferred first
	resources map[string][]*Resource
}

// DiscoveryVersion returns the JSON of /version (a version.Info).
func (t *Table) DiscoveryVersion() []byte { return t.snap.Load().version }

// DiscoveryAPIVersions returns the JSON of /api (an APIVersions).
func (t *Table) DiscoveryAPIVersions() []byte { return t.snap.Load().apiVersions }

// DiscoveryCore returns the JSON of /api/v1 (an APIResourceList).
func (t *Table) DiscoveryCore() []byte { return t.snap.Load().core }

// DiscoveryGroups returns the JSON of /apis (an APIGroupList).
func (t *Table) DiscoveryGroups() []byte { return t.snap.Load().groupList }

// DiscoveryGroup returns the JSON of /apis/<g> (an APIGroup).
func (t *Table) DiscoveryGroup(g string) ([]byte, bool) {
	b, ok := t.snap.Load().groupDoc[g]
	return b, ok
}

// DiscoveryGroupVersion returns the JSON of /apis/<g>/<v> (an
// APIResourceList); DiscoveryCore serves the core group.
func (t *Table) DiscoveryGroupVersion(g, v string) ([]byte, bool) {
	b, ok := t.snap.Load().groupVersionDoc[g+"/"+v]
	return b, ok
}

// DiscoveryAggregated returns the JSON of the apidiscovery.k8s.io/v2
// APIGroupDiscoveryList served at /api (core=true) or /apis (core=false) to a
// client that accepts AggregatedContentType.
func (t *Table) DiscoveryAggregated(core bool) []byte {
	s := t.snap.Load()
	if core {
		return s.aggregatedCore
	}
	return s.aggregatedAPIs
}

// rebuildLocked builds a new snapshot from the built-in resources and the
// CRDs and publishes it. t.mu must be held.
func (t *Table) rebuildLocked() {
	s := &snapshot{
		byGVR:           map[gvr]*Resource{},
		groupByName:     map[string]*group{},
		groupDoc:        map[string][]byte{},
		groupVersionDoc: map[string][]byte{},
	}
	add := func(r *Resource, priority int) bool {
		k := gvr{r.Group, r.Version, r.Resource}
		if _, dup := s.byGVR[k]; dup {
			return false
		}
		s.byGVR[k] = r
		g := s.groupByName[r.Group]
		if g == nil {
			g = &group{name: r.Group, priority: priority, resources: map[string][]*Resource{}}
			s.groupByName[r.Group] = g
		}
		if _, ok := g.resources[r.Version]; !ok {
			g.versions = append(g.versions, r.Version)
		}
		g.resources[r.Version] = append(g.resources[r.Version], r)
		return true
	}
	for _, r := range t.builtin {
		add(r, groupPriority[r.Group])
	}
	t.gen++
	s.gen = t.gen
	for _, c := range sortedCRDs(t.crds) {
		if c.doc != nil {
			s.crdDocs = append(s.crdDocs, c.doc)
		}
		for _, r := range c.resources() {
			if !add(r, crdGroupPriority) {
				t.log.Load().Warn("custom resource collides with a served resource; ignored",
					zap.String("crd", c.name), zap.String("resource", r.Resource+"."+r.Group+"/"+r.Version))
			}
		}
	}

	for _, g := range s.groupByName {
		servable := map[string]bool{}
		for v, rs := range g.resources {
			for _, r := range rs {
				if r.Servable() {
					servable[v] = true
				}
			}
			slices.SortFunc(rs, func(a, b *Resource) int { return cmp.Compare(a.Resource, b.Resource) })
		}
		// Versions that can be served as stored come first, so that the
		// preferred version of every group is a storage version; then
		// kube-apiserver's version priority (GA > beta > alpha).
		slices.SortFunc(g.versions, func(a, b string) int {
			if servable[a] != servable[b] {
				if servable[a] {
					return -1
				}
				return 1
			}
			return version.CompareKubeAwareVersionStrings(b, a)
		})
		if g.name != "" {
			s.groups = append(s.groups, g)
		}
	}
	sort.Slice(s.groups, func(i, j int) bool {
		a, b := s.groups[i], s.groups[j]
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		return a.name < b.name
	})
	if core := s.groupByName[""]; core != nil {
		s.all = append(s.all, core.resources["v1"]...)
	}
	for _, g := range s.groups {
		for _, v := range g.versions {
			s.all = append(s.all, g.resources[v]...)
		}
	}

	seen := map[[2]string]bool{}
	for _, r := range s.all {
		gv := [2]string{r.Group, r.Version}
		if !r.Custom && r.Servable() && !seen[gv] {
			seen[gv] = true
			s.builtinGVs = append(s.builtinGVs, gv)
		}
	}

	s.version = mustJSON(versionInfo())
	s.apiVersions = mustJSON(&metav1.APIVersions{
		TypeMeta: metav1.TypeMeta{Kind: "APIVersions"},
		Versions: []string{"v1"},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{
			{ClientCIDR: "0.0.0.0/0", ServerAddress: t.serverAddress},
		},
	})
	var coreRes []*Resource
	if core := s.groupByName[""]; core != nil {
		coreRes = core.resources["v1"]
	}
	s.core = mustJSON(resourceList("v1", coreRes))
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, g := range s.groups {
		ag := apiGroup(g)
		list.Groups = append(list.Groups, ag)
		ag.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
		s.groupDoc[g.name] = mustJSON(&ag)
		for _, v := range g.versions {
			s.groupVersionDoc[g.name+"/"+v] = mustJSON(resourceList(g.name+"/"+v, g.resources[v]))
		}
	}
	s.groupList = mustJSON(list)

	coreAgg := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	if core := s.groupByName[""]; core != nil {
		coreAgg.Items = append(coreAgg.Items, groupDiscovery(core))
	}
	s.aggregatedCore = mustJSON(coreAgg)
	agg := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: coreAgg.TypeMeta,
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	for _, g := range s.groups {
		agg.Items = append(agg.Items, groupDiscovery(g))
	}
	s.aggregatedAPIs = mustJSON(agg)

	t.snap.Store(s)
}

func versionInfo() *version.Info {
	return &version.Info{
		Major:                 fmt.Sprint(kubeMajor),
		Minor:                 fmt.Sprint(kubeMinor),
		EmulationMajor:        fmt.Sprint(kubeMajor),
		EmulationMinor:        fmt.Sprint(kubeMinor),
		MinCompatibilityMajor: fmt.Sprint(kubeMajor),
		MinCompatibilityMinor: fmt.Sprint(kubeMinor - 1),
		GitVersion:            GitVersion,
		GitTreeState:          "clean",
		GoVersion:             runtime.Version(),
		Compiler:              runtime.Compiler,
		Platform:              runtime.GOOS + "/" + runtime.GOARCH,
	}
}

func apiGroup(g *group) metav1.APIGroup {
	ag := metav1.APIGroup{Name: g.name}
	for _, v := range g.versions {
		ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.name + "/" + v, Version: v})
	}
	ag.PreferredVersion = ag.Versions[0]
	return ag
}

func resourceList(groupVersion string, rs []*Resource) *metav1.APIResourceList {
	l := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: groupVersion,
		APIResources: []metav1.APIResource{},
	}
	for _, r := range rs {
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name:               r.Resource,
			SingularName:       r.SingularName,
			Namespaced:         r.Namespaced,
			Kind:               r.Kind,
			Verbs:              verbs,
			ShortNames:         r.ShortNames,
			Categories:         r.Categories,
			StorageVersionHash: r.storageVersionHash(),
		})
		// Subresources follow their resource, sorted, as in
		// kube-apiserver's list (sorted by name).
		for _, sub := range r.servedSubresources() {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name:       r.Resource + "/" + sub.name,
				Namespaced: r.Namespaced,
				Group:      sub.kind.Group,
				Version:    sub.kind.Version,
				Kind:       sub.kind.Kind,
				Verbs:      subresourceVerbs,
			})
		}
	}
	return l
}

// subresourceVerbs are the verbs lazyapi serves on a subresource.
var subresourceVerbs = []string{"get"}

type subresourceDoc struct {
	name string
	// kind is the response kind: the resource's own kind (group and
	// version empty, as kube-apiserver writes it), or autoscaling/v1
	// Scale.
	kind metav1.GroupVersionKind
}

// servedSubresources returns the subresources lazyapi serves from stored
// data for r (status and the like, scale), sorted by name, as discovery
// lists them: the connect subresources (log, exec, ...) and the
// create-only ones, which lazyapi answers with a Status, are not listed.
func (r *Resource) servedSubresources() []subresourceDoc {
	var names []string
	if r.Custom {
		for _, sub := range []string{"scale", "status"} {
			if r.Subresource(sub) != SubNone {
				names = append(names, sub)
			}
		}
	} else {
		for sub, k := range builtinSubresources[r.GroupResource()] {
			if k == SubObject || k == SubScale {
				names = append(names, sub)
			}
		}
		slices.Sort(names)
	}
	out := make([]subresourceDoc, 0, len(names))
	for _, sub := range names {
		d := subresourceDoc{name: sub, kind: metav1.GroupVersionKind{Kind: r.Kind}}
		if r.Subresource(sub) == SubScale {
			d.kind = metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
		}
		out = append(out, d)
	}
	return out
}

func groupDiscovery(g *group) apidiscoveryv2.APIGroupDiscovery {
	d := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.name}}
	for _, v := range g.versions {
		vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		for _, r := range g.resources[v] {
			scope := apidiscoveryv2.ScopeCluster
			if r.Namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			rk := &metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
			if !r.Custom {
				// kube-apiserver leaves a built-in's group and version
				// empty (those of the group version).
				rk = &metav1.GroupVersionKind{Kind: r.Kind}
			}
			rd := apidiscoveryv2.APIResourceDiscovery{
				Resource:         r.Resource,
				ResponseKind:     rk,
				Scope:            scope,
				SingularResource: r.SingularName,
				Verbs:            verbs,
				ShortNames:       r.ShortNames,
				Categories:       r.Categories,
			}
			for _, sub := range r.servedSubresources() {
				k := sub.kind
				rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: sub.name, ResponseKind: &k, Verbs: subresourceVerbs})
			}
			vd.Resources = append(vd.Resources, rd)
		}
		d.Versions = append(d.Versions, vd)
	}
	return d
}

// storageVersionHash is the hash kube-apiserver advertises for r: of the
// version objects are encoded at in etcd. CustomResourceDefinitions are
// served at v1 (converted on read) but stored as v1beta1.
func (r *Resource) storageVersionHash() string {
	v := r.StorageVersion
	if r.Group == "apiextensions.k8s.io" && r.Resource == "customresourcedefinitions" {
		v = "v1beta1"
	}
	return storageVersionHash(r.StorageGroup(), v, r.Kind)
}

// storageVersionHash is k8s.io/apiserver/pkg/endpoints/discovery's
// StorageVersionHash: the first 8 bytes of sha256("group/version/kind"),
// base64.
func storageVersionHash(group, version, kind string) string {
	sum := sha256.Sum256([]byte(group + "/" + version + "/" + kind))
	return base64.StdEncoding.EncodeToString(sum[:8])
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot encode discovery document %T: %v", v, err))
	}
	return b
}
