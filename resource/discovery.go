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
	builtinGVs [][2]string
	// servesWrites is the Table's at this snapshot.
	servesWrites bool
	// docGVs are the group-versions discovery lists but the core one.
	docGVs          [][2]string
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
	s.servesWrites = t.servesWrites
	core, groups := docGroups(s, t.servesWrites)
	coreList := resourceList("v1", core.resources["v1"])
	coreList.APIVersion = "" // as kube-apiserver writes /api/v1
	s.core = mustJSON(coreList)
	list := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, g := range groups {
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
		Items:    []apidiscoveryv2.APIGroupDiscovery{groupDiscovery(core)},
	}
	s.aggregatedCore = mustJSON(coreAgg)
	agg := &apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: coreAgg.TypeMeta,
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	for _, g := range groups {
		agg.Items = append(agg.Items, groupDiscovery(g))
		for _, v := range g.versions {
			s.docGVs = append(s.docGVs, [2]string{g.name, v})
		}
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

// Verbs advertised in discovery when lazyapi forwards what it does not
// serve (Table.SetServesWrites): kube-apiserver's. Built-in resources list
// them sorted; apiextensions-apiserver lists a custom resource's in its
// own order.
var (
	kubeVerbs          = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
	kubeNamespaceVerbs = []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	crdVerbs           = []string{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	objectSubVerbs     = []string{"get", "patch", "update"}
	createVerbs        = []string{"create"}
)

// docResource is one resource as discovery lists it.
type docResource struct {
	name, singular string
	// kind is the response kind; group and version empty for a built-in
	// (those of the group version), as kube-apiserver writes them.
	kind                   metav1.GroupVersionKind
	namespaced             bool
	verbs                  []string
	shortNames, categories []string
	hash                   string
	subs                   []subresourceDoc
}

// docGroup is one group as discovery lists it.
type docGroup struct {
	name      string
	priority  int
	versions  []string // preferred first
	resources map[string][]docResource
}

// unstoredResource is a resource kube-apiserver v1.37 lists in discovery
// that is not stored in etcd (see excludedKinds). lazyapi answers the self
// reviews (proxy/selfreview.go) and lists them in both modes; the others
// only when it forwards them (Table.SetServesWrites).
type unstoredResource struct {
	group, version string
	doc            docResource
	selfReview     bool
}

var unstoredResources = []unstoredResource{
	{version: "v1", doc: docResource{name: "bindings", singular: "binding", kind: metav1.GroupVersionKind{Kind: "Binding"},
		namespaced: true, verbs: createVerbs}},
	{version: "v1", doc: docResource{name: "componentstatuses", singular: "componentstatus", kind: metav1.GroupVersionKind{Kind: "ComponentStatus"},
		verbs: []string{"get", "list"}, shortNames: []string{"cs"}}},
	{group: "authentication.k8s.io", version: "v1", selfReview: true, doc: docResource{name: "selfsubjectreviews", singular: "selfsubjectreview",
		kind: metav1.GroupVersionKind{Kind: "SelfSubjectReview"}, verbs: createVerbs}},
	{group: "authentication.k8s.io", version: "v1", doc: docResource{name: "tokenreviews", singular: "tokenreview",
		kind: metav1.GroupVersionKind{Kind: "TokenReview"}, verbs: createVerbs}},
	{group: "authorization.k8s.io", version: "v1", doc: docResource{name: "localsubjectaccessreviews", singular: "localsubjectaccessreview",
		kind: metav1.GroupVersionKind{Kind: "LocalSubjectAccessReview"}, namespaced: true, verbs: createVerbs}},
	{group: "authorization.k8s.io", version: "v1", selfReview: true, doc: docResource{name: "selfsubjectaccessreviews", singular: "selfsubjectaccessreview",
		kind: metav1.GroupVersionKind{Kind: "SelfSubjectAccessReview"}, verbs: createVerbs}},
	{group: "authorization.k8s.io", version: "v1", selfReview: true, doc: docResource{name: "selfsubjectrulesreviews", singular: "selfsubjectrulesreview",
		kind: metav1.GroupVersionKind{Kind: "SelfSubjectRulesReview"}, verbs: createVerbs}},
	{group: "authorization.k8s.io", version: "v1", doc: docResource{name: "subjectaccessreviews", singular: "subjectaccessreview",
		kind: metav1.GroupVersionKind{Kind: "SubjectAccessReview"}, verbs: createVerbs}},
}

// forwardedSubresources are the subresources of built-in resources that
// lazyapi does not serve from stored data (SubConnect, SubCreateOnly) as
// kube-apiserver v1.37 lists them, by "resource/subresource" of the
// GroupResource: listed only when lazyapi forwards them.
var forwardedSubresources = map[string]subresourceDoc{
	"pods/attach":      {kind: metav1.GroupVersionKind{Kind: "PodAttachOptions"}, verbs: []string{"create", "get"}},
	"pods/exec":        {kind: metav1.GroupVersionKind{Kind: "PodExecOptions"}, verbs: []string{"create", "get"}},
	"pods/portforward": {kind: metav1.GroupVersionKind{Kind: "PodPortForwardOptions"}, verbs: []string{"create", "get"}},
	"pods/log":         {kind: metav1.GroupVersionKind{Kind: "Pod"}, verbs: []string{"get"}},
	"pods/proxy":       {kind: metav1.GroupVersionKind{Kind: "PodProxyOptions"}, verbs: []string{"create", "delete", "get", "patch", "update"}},
	"nodes/proxy":      {kind: metav1.GroupVersionKind{Kind: "NodeProxyOptions"}, verbs: []string{"create", "delete", "get", "patch", "update"}},
	"services/proxy":   {kind: metav1.GroupVersionKind{Kind: "ServiceProxyOptions"}, verbs: []string{"create", "delete", "get", "patch", "update"}},
	"pods/binding":     {kind: metav1.GroupVersionKind{Kind: "Binding"}, verbs: createVerbs},
	"pods/eviction":    {kind: metav1.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, verbs: createVerbs},
	"serviceaccounts/token": {kind: metav1.GroupVersionKind{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"},
		verbs: createVerbs},
	"namespaces/finalize": {kind: metav1.GroupVersionKind{Kind: "Namespace"}, verbs: []string{"update"}},
}

// docGroups returns what discovery lists: the core group and the other
// groups in discovery order. Read-only (servesWrites false), the stored
// resources with the read verbs, the subresources served from stored data
// with get, and the self reviews; forwarding, kube-apiserver's verbs, every
// subresource and every resource it lists.
func docGroups(s *snapshot, servesWrites bool) (*docGroup, []*docGroup) {
	byName := map[string]*docGroup{}
	var groups []*docGroup
	get := func(name string, priority int, versions []string) *docGroup {
		g := byName[name]
		if g == nil {
			g = &docGroup{name: name, priority: priority, versions: versions, resources: map[string][]docResource{}}
			byName[name] = g
			if name != "" {
				groups = append(groups, g)
			}
		}
		return g
	}
	get("", groupPriority[""], []string{"v1"})
	if core := s.groupByName[""]; core != nil {
		for _, r := range core.resources["v1"] {
			byName[""].resources["v1"] = append(byName[""].resources["v1"], r.doc(servesWrites))
		}
	}
	for _, g := range s.groups {
		dg := get(g.name, g.priority, g.versions)
		for _, v := range g.versions {
			for _, r := range g.resources[v] {
				dg.resources[v] = append(dg.resources[v], r.doc(servesWrites))
			}
		}
	}
	for _, u := range unstoredResources {
		if !servesWrites && !u.selfReview {
			continue
		}
		g := get(u.group, groupPriority[u.group], []string{u.version})
		if !slices.Contains(g.versions, u.version) {
			g.versions = append(slices.Clone(g.versions), u.version)
		}
		g.resources[u.version] = append(g.resources[u.version], u.doc)
	}
	for _, g := range byName {
		for _, rs := range g.resources {
			slices.SortFunc(rs, func(a, b docResource) int { return cmp.Compare(a.name, b.name) })
		}
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.priority != b.priority {
			return a.priority > b.priority
		}
		return a.name < b.name
	})
	return byName[""], groups
}

// doc returns r as discovery lists it.
func (r *Resource) doc(servesWrites bool) docResource {
	d := docResource{
		name:       r.Resource,
		singular:   r.SingularName,
		kind:       metav1.GroupVersionKind{Kind: r.Kind},
		namespaced: r.Namespaced,
		verbs:      verbs,
		shortNames: r.ShortNames,
		categories: r.Categories,
		hash:       r.storageVersionHash(),
		subs:       r.servedSubresources(servesWrites),
	}
	if r.Custom {
		d.kind = metav1.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind}
	}
	if servesWrites {
		switch {
		case r.Custom:
			d.verbs = crdVerbs
		case r.Group == "" && r.Resource == "namespaces":
			d.verbs = kubeNamespaceVerbs
		default:
			d.verbs = kubeVerbs
		}
	}
	return d
}

func apiGroup(g *docGroup) metav1.APIGroup {
	ag := metav1.APIGroup{Name: g.name}
	for _, v := range g.versions {
		ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.name + "/" + v, Version: v})
	}
	ag.PreferredVersion = ag.Versions[0]
	return ag
}

func resourceList(groupVersion string, rs []docResource) *metav1.APIResourceList {
	l := &metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: groupVersion,
		APIResources: []metav1.APIResource{},
	}
	for _, r := range rs {
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name:               r.name,
			SingularName:       r.singular,
			Namespaced:         r.namespaced,
			Kind:               r.kind.Kind,
			Verbs:              r.verbs,
			ShortNames:         r.shortNames,
			Categories:         r.categories,
			StorageVersionHash: r.hash,
		})
		// Subresources follow their resource, sorted, as in
		// kube-apiserver's list (sorted by name).
		for _, sub := range r.subs {
			l.APIResources = append(l.APIResources, metav1.APIResource{
				Name:       r.name + "/" + sub.name,
				Namespaced: r.namespaced,
				Group:      sub.kind.Group,
				Version:    sub.kind.Version,
				Kind:       sub.kind.Kind,
				Verbs:      sub.verbs,
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
	kind  metav1.GroupVersionKind
	verbs []string
}

// servedSubresources returns the subresources discovery lists for r,
// sorted by name: read-only, those lazyapi serves from stored data
// (status and the like, scale) with get; forwarding, every subresource
// kube-apiserver lists, with its verbs.
func (r *Resource) servedSubresources(servesWrites bool) []subresourceDoc {
	var names []string
	if r.Custom {
		for _, sub := range []string{"scale", "status"} {
			if r.Subresource(sub) != SubNone {
				names = append(names, sub)
			}
		}
	} else {
		for sub, k := range builtinSubresources[r.GroupResource()] {
			if k == SubObject || k == SubScale || servesWrites {
				names = append(names, sub)
			}
		}
		slices.Sort(names)
	}
	out := make([]subresourceDoc, 0, len(names))
	for _, sub := range names {
		d := subresourceDoc{name: sub, kind: metav1.GroupVersionKind{Kind: r.Kind}, verbs: subresourceVerbs}
		switch r.Subresource(sub) {
		case SubScale:
			d.kind = metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}
		case SubConnect, SubCreateOnly:
			f, ok := forwardedSubresources[r.GroupResource()+"/"+sub]
			if !ok {
				panic("BUG: no discovery entry for subresource " + r.GroupResource() + "/" + sub)
			}
			d.kind, d.verbs = f.kind, f.verbs
			out = append(out, d)
			continue
		}
		if servesWrites {
			d.verbs = objectSubVerbs
		}
		out = append(out, d)
	}
	return out
}

func groupDiscovery(g *docGroup) apidiscoveryv2.APIGroupDiscovery {
	d := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.name}}
	for _, v := range g.versions {
		vd := apidiscoveryv2.APIVersionDiscovery{Version: v, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
		for _, r := range g.resources[v] {
			scope := apidiscoveryv2.ScopeCluster
			if r.namespaced {
				scope = apidiscoveryv2.ScopeNamespace
			}
			rk := r.kind
			rd := apidiscoveryv2.APIResourceDiscovery{
				Resource:         r.name,
				ResponseKind:     &rk,
				Scope:            scope,
				SingularResource: r.singular,
				Verbs:            r.verbs,
				ShortNames:       r.shortNames,
				Categories:       r.categories,
			}
			for _, sub := range r.subs {
				k := sub.kind
				rd.Subresources = append(rd.Subresources, apidiscoveryv2.APISubresourceDiscovery{
					Subresource: sub.name, ResponseKind: &k, Verbs: sub.verbs})
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
