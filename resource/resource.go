// Package resource is the table of resources lazyapi serves: the built-in
// resources kube-apiserver v1.37 serves by default, at the version it stores
// them in etcd, and the custom resources defined by the
// CustomResourceDefinitions found in etcd. It also renders the discovery
// documents (/version, /api, /apis, aggregated discovery) from the table.
//
// Decisions, each documented where it is made:
//   - A built-in resource is served at the versions kube-apiserver serves
//     (builtin.go): at its storage version, or at a version of the same
//     schema with apiVersion rewritten (RewritesTypeMeta), or, where the
//     schemas differ, converted object by object as kube-apiserver converts
//     (Conversion: events.k8s.io/v1 Events, autoscaling/v1
//     HorizontalPodAutoscalers, certificates.k8s.io/v1
//     PodCertificateRequests). A custom resource is listed at every served
//     version, but only its storage version is Servable; the proxy answers
//     the others with an error Status.
//   - Only get, list and watch are advertised. Subresources are served as
//     kube-apiserver registers them (subresource.go: status and scale from
//     the stored object; log, exec, attach, portforward, proxy answered
//     with a Status naming kube-apiserver); discovery lists those served
//     from stored data, with the verb get.
//   - CustomResourceDefinitions and APIServices, which kube-apiserver stores
//     as JSON, are served at the version kube-apiserver serves:
//     APIServices at apiregistration.k8s.io/v1 as stored, CRDs at
//     apiextensions.k8s.io/v1, converted from the stored v1beta1 by
//     codec.Unwrap (the one conversion lazyapi does).
//   - /version reports GitVersion ("v1.37.2-lazyapi").
package resource

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// Verbs are the verbs lazyapi serves for every resource.
var verbs = []string{"get", "list", "watch"}

// Resource describes one served resource at one version. A *Resource
// returned by a Table is shared and must not be modified.
type Resource struct {
	// Group is the API group, "" for the core group.
	Group string
	// Version is the version the resource is served at. For built-in
	// resources it is the version kube-apiserver stores the resource at.
	Version string
	// Resource is the plural, lower-case resource name ("configmaps").
	Resource string
	// Kind and ListKind are the object and list kinds ("ConfigMap", "ConfigMapList").
	Kind, ListKind string
	// SingularName is the singular resource name ("configmap").
	SingularName string
	// Namespaced is true for namespaced resources.
	Namespaced bool
	// ShortNames and Categories are advertised in discovery ("cm"; "all").
	ShortNames, Categories []string
	// KeyPrefix is the etcd key segment between --etcd-prefix and the
	// namespace or name: "configmaps", "services/specs", "minions",
	// "example.com/widgets".
	KeyPrefix string
	// Custom is true for a CRD's resource: stored as JSON, and list items keep
	// their kind and apiVersion.
	Custom bool
	// JSONStorage is true when kube-apiserver always stores the resource as
	// JSON: custom resources, CustomResourceDefinitions and APIServices.
	// Other built-in resources are protobuf unless kube-apiserver runs with
	// --storage-media-type=application/json.
	JSONStorage bool
	// StorageVersion is the version objects are stored at in etcd (of
	// StorageGroup, see Conversion). A built-in resource at another
	// version is served by rewriting apiVersion (same schema) or by
	// conversion (Conversion); a custom resource's other served versions
	// are listed in discovery and in the table so that the proxy can
	// answer them with a clear error (see Servable).
	StorageVersion string
	// FieldSelectors are the field selector labels kube-apiserver supports
	// for the resource besides metadata.name and metadata.namespace.
	// ConvertFieldLabel applies the exact kube-apiserver rules.
	FieldSelectors []string
	// Columns are a custom resource's additionalPrinterColumns for this
	// version, used for Table output. Empty for built-in resources.
	Columns []Column
	// Warning is the value of the Warning header kube-apiserver sends with
	// every response for this resource at this version, e.g.
	// `299 - "v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1
	// EndpointSlice"`, or "" when the version is not deprecated
	// (deprecation.go).
	Warning string

	// Conversion, when not nil, says that objects are stored at another
	// version with another schema: each is decoded, converted as
	// kube-apiserver converts it, and encoded again (codec.Convert).
	Conversion *Conversion

	// Scale is a custom resource's scale subresource (nil: none).
	Scale *ScalePaths

	// statusSub: a custom resource with the status subresource.
	statusSub bool
	// fieldStyle selects the field label rules and error message;
	// noNamespaceField is set when metadata.namespace is refused.
	fieldStyle       fieldStyle
	noNamespaceField bool
	// cacheFields are the fields the watch cache derives for a custom
	// resource: those of every served version (they share one cache).
	cacheFields []string
	// noConversion: a custom resource whose CRD's conversion strategy is
	// None, served at every served version (apiVersion rewritten).
	noConversion bool
	// fieldAliases, when not nil, are the only field labels accepted
	// besides metadata.name and metadata.namespace, each mapped to the
	// stored kind's label (events.k8s.io/v1's regarding.kind is
	// involvedObject.kind).
	fieldAliases map[string]string
}

// Conversion describes a resource served at a version whose schema differs
// from the stored one.
type Conversion struct {
	// From is the apiVersion objects are stored at: "v1" (core Events for
	// events.k8s.io/v1), "autoscaling/v2", "certificates.k8s.io/v1beta1".
	From string
	// StorageGroup is the group of the resource kube-apiserver's storage
	// is registered as, which names it in NotFound Statuses, the
	// encryption configuration and the watch cache: "" for
	// events.k8s.io/v1 events (kube-apiserver serves them from the core
	// Event registry), else the resource's own group.
	StorageGroup string
}

// CacheFields returns the field selector labels the resource's watch cache
// derives: FieldSelectors, or for a custom resource those of every served
// version of its CRD, which share the cache.
func (r *Resource) CacheFields() []string {
	if r.Custom {
		return r.cacheFields
	}
	return r.FieldSelectors
}

// SetsAPIVersion reports whether each object's apiVersion is set to
// APIVersion() on the way out when it differs: a custom resource whose
// CRD's conversion strategy is None, served at every version from objects
// stored at any of them (apiextensions-apiserver's nopConverter sets it,
// also for objects stored at an older storage version).
func (r *Resource) SetsAPIVersion() bool { return r.Custom && r.noConversion }

// StorageAPIVersion returns the apiVersion objects are stored at.
func (r *Resource) StorageAPIVersion() string {
	if r.Conversion != nil {
		return r.Conversion.From
	}
	if r.Group == "" {
		return r.StorageVersion
	}
	return r.Group + "/" + r.StorageVersion
}

// StorageGroup returns the group of the registry that serves the resource
// in kube-apiserver (see Conversion.StorageGroup).
func (r *Resource) StorageGroup() string {
	if r.Conversion != nil {
		return r.Conversion.StorageGroup
	}
	return r.Group
}

// Servable reports whether the resource can be served from what is
// stored: its Version is its StorageVersion, or a built-in resource (same
// schema, RewritesTypeMeta, or Conversion), or a custom resource whose
// CRD's conversion strategy is None. A custom resource at another version
// with a Webhook strategy is not: its conversion needs the webhook.
func (r *Resource) Servable() bool {
	return r.Version == r.StorageVersion || !r.Custom || r.noConversion
}

// RewritesTypeMeta reports whether objects are stored at another version
// than they are served at and need only their apiVersion rewritten to
// APIVersion() on the way out: a built-in kind whose two versions have the
// same schema, or a custom resource whose CRD's conversion strategy is
// None (as apiextensions-apiserver's nopConverter sets apiVersion).
func (r *Resource) RewritesTypeMeta() bool {
	return r.Version != r.StorageVersion && r.Conversion == nil && (!r.Custom || r.noConversion)
}

// APIVersion returns "group/version", or "version" for the core group.
func (r *Resource) APIVersion() string {
	if r.Group == "" {
		return r.Version
	}
	return r.Group + "/" + r.Version
}

// GroupResource returns "resource.group", or "resource" for the core group,
// as kube-apiserver writes it in NotFound messages: of the registry that
// serves it (StorageGroup: "events" for events.k8s.io/v1 events).
func (r *Resource) GroupResource() string {
	if g := r.StorageGroup(); g != "" {
		return r.Resource + "." + g
	}
	return r.Resource
}

// Column is one additionalPrinterColumn of a CustomResourceDefinition.
type Column struct {
	Name        string
	Type        string
	Format      string
	Description string
	Priority    int32
	// JSONPath is the simple JSONPath evaluated against each object, e.g.
	// ".spec.replicas".
	JSONPath string
}

// Table is the set of served resources. It is safe for concurrent use: reads
// (Lookup, Versions, Resources, Discovery*) are lock-free and see one
// consistent snapshot; CRD changes replace the snapshot atomically. The zero
// value is not usable: use NewBuiltin.
type Table struct {
	// snap is the current snapshot; never nil after NewBuiltin.
	snap atomic.Pointer[snapshot]
	// ready is true once the built-in table is built and, if StartCRDSync
	// was called, the first load of the CRDs succeeded.
	ready atomic.Bool

	// mu serialises writers (CRD sync, SetServerAddress).
	mu sync.Mutex
	// builtin is the immutable list of built-in resources.
	builtin []*Resource
	// crds are the CRDs by etcd key; protected by mu.
	crds map[string]*crd
	// serverAddress is advertised in /api; protected by mu.
	serverAddress string
	// servesWrites: discovery lists kube-apiserver's verbs, subresources
	// and resources (SetServesWrites); protected by mu.
	servesWrites bool
	// log reports CRDs that cannot be decoded and watch restarts.
	log atomic.Pointer[zap.Logger]
	// syncDone is closed when the CRD sync goroutine returns; nil until
	// StartCRDSync starts it. Protected by mu.
	syncDone chan struct{}
	// crdDoc, when set, builds what a CRD contributes to other documents
	// (OpenAPI) from its stored value; set before StartCRDSync.
	crdDoc func(stored []byte) any
	// decrypt, when set, decrypts stored CRDs; set before StartCRDSync.
	decrypt func(key string, value []byte) ([]byte, error)
	// gen counts rebuilds; protected by mu.
	gen uint64
	// onChange are called after each change of the CRDs; protected by mu.
	onChange []func()
}

// OnChange registers fn, called after every change of the served CRDs (one
// added, changed or removed) on the CRD sync goroutine, with no lock held.
// The watch cache uses it to drop what a deleted CRD left behind.
func (t *Table) OnChange(fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.onChange = append(t.onChange, fn)
}

// SetCRDDocBuilder sets fn, which is called with the stored value of each
// served CRD when it is loaded or changes; what it returns is kept with the
// CRD and returned by CRDDocs (nil results are left out). Call it before
// StartCRDSync.
func (t *Table) SetCRDDocBuilder(fn func(stored []byte) any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.crdDoc = fn
}

// SetDecrypt sets fn, which turns a stored CRD encrypted at rest
// (--encryption-provider-config covering customresourcedefinitions) into
// its plaintext; key is its etcd key. Call it before StartCRDSync.
func (t *Table) SetDecrypt(fn func(key string, value []byte) ([]byte, error)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.decrypt = fn
}

// CRDGeneration returns a number that changes whenever the table does (a
// CRD was added, changed or removed).
func (t *Table) CRDGeneration() uint64 { return t.snap.Load().gen }

// CRDDocs returns the CRD doc builder's results for the served CRDs, in
// table order. The slice must not be modified.
func (t *Table) CRDDocs() []any { return t.snap.Load().crdDocs }

// ServedBuiltinGroupVersions returns the group-versions of the built-in
// resources served as stored, in discovery order, as "group/version"
// pairs.
func (t *Table) ServedBuiltinGroupVersions() [][2]string {
	return t.snap.Load().builtinGVs
}

// Lookup returns the resource served at group/version/resource; resource is
// the plural name. The result is shared and must not be modified.
func (t *Table) Lookup(group, version, resource string) (*Resource, bool) {
	r, ok := t.snap.Load().byGVR[gvr{group, version, resource}]
	return r, ok
}

// Versions returns the served versions of group, preferred version first,
// or nil if the group is not served. The slice must not be modified.
func (t *Table) Versions(group string) []string {
	if g, ok := t.snap.Load().groupByName[group]; ok {
		return g.versions
	}
	return nil
}

// Resources returns every served resource (every version), in discovery
// order. The slice must not be modified.
func (t *Table) Resources() []*Resource {
	return t.snap.Load().all
}

// Ready reports whether the table is complete: true for a built-in table, and
// after StartCRDSync once the CRDs were loaded.
func (t *Table) Ready() bool { return t.ready.Load() }

// SetLogger sets the logger used by the CRD sync. The default discards.
func (t *Table) SetLogger(l *zap.Logger) {
	t.log.Store(l)
}

// SetServerAddress sets the host:port advertised in /api's
// serverAddressByClientCIDRs (kube-apiserver advertises its own address
// there; clients ignore it). The default is empty.
func (t *Table) SetServerAddress(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.serverAddress = addr
	t.rebuildLocked()
}

// SetServesWrites says whether what lazyapi does not serve from etcd is
// forwarded to kube-apiserver (--upstream-kubeconfig). Then discovery lists
// what kube-apiserver lists: every verb, every subresource and the
// resources that are not stored (bindings, componentstatuses, the
// reviews); otherwise (the default) what lazyapi answers itself: get, list
// and watch, get of the subresources served from stored data, and create
// of the self reviews.
func (t *Table) SetServesWrites(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.servesWrites == on {
		return
	}
	t.servesWrites = on
	t.rebuildLocked()
}

// ServesWrites reports what SetServesWrites set.
func (t *Table) ServesWrites() bool { return t.snap.Load().servesWrites }

// DiscoveryGroupVersions returns the group-versions discovery lists
// besides the core v1, in discovery order: those of ServedBuiltinGroupVersions
// and of the CRDs, and of the resources listed though not stored (the
// self reviews' authentication.k8s.io/v1 and authorization.k8s.io/v1). The
// slice must not be modified.
func (t *Table) DiscoveryGroupVersions() [][2]string { return t.snap.Load().docGVs }

// CRDSyncDone returns a channel that is closed once the CRD sync goroutine
// started by StartCRDSync has returned (after its context ended). It is
// closed already if no sync is running.
func (t *Table) CRDSyncDone() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.syncDone == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return t.syncDone
}

type gvr struct{ group, version, resource string }
