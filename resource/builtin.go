package resource

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/scheme"
)

// The kube-apiserver release whose defaults the built-in table mirrors.
const (
	kubeMajor = 1
	kubeMinor = 37
)

// builtinSpec is what kube-apiserver knows about a built-in resource and the
// types do not say. The version is not here: it is derived from client-go's
// scheme by storageVersion, the rule kube-apiserver applies.
type builtinSpec struct {
	group, resource, kind string
	namespaced            bool
	shortNames            []string
	categories            []string
	// keyPrefix is the etcd key segment when it is not the resource name.
	keyPrefix string
	// fields are the field selector labels besides metadata.name and
	// metadata.namespace; style says how kube-apiserver checks them.
	fields []string
	style  fieldStyle
	// noNamespaceField: the kind's field label conversion does not accept
	// metadata.namespace (cluster-scoped kinds with a conversion function).
	noNamespaceField bool
	// jsonVersion is set for the resources that are not in client-go's
	// scheme and that kube-apiserver stores as JSON at this version
	// (CustomResourceDefinitions, APIServices).
	jsonVersion, listKind string
}

// builtinSpecs lists the built-in resources kube-apiserver v1.37 serves by
// default and that are stored in etcd. It mirrors, from the Kubernetes source
// (kubernetes/kubernetes):
//
//   - which group versions are on by default: pkg/controlplane/instance.go
//     stableAPIGroupVersionsEnabledByDefault (every GA group version; beta
//     and alpha versions are off by default since 1.24, KEP-3136, and the
//     legacy beta exceptions ended with flowcontrol v1beta3 in 1.32). GA
//     kinds new in 1.37 (k8s.io/api v0.37.2 lifecycle introduced=1.37:
//     ClusterTrustBundle, PodCertificateRequest, DeviceTaintRule,
//     StorageVersionMigration) are served by default like every GA kind.
//   - etcd key prefixes: pkg/kubeapiserver/default_storage_factory_builder.go
//     SpecialDefaultResourcePrefixes (controllers, services/endpoints,
//     minions, services/specs, ingress) and test/integration/etcd/data.go
//     ExpectedEtcdPath for every other resource (the bare resource name;
//     apiextensions.k8s.io/customresourcedefinitions and
//     apiregistration.k8s.io/apiservices for the two JSON-stored kinds).
//   - short names and categories: the ShortNames() and Categories() methods
//     of pkg/registry/<group>/<resource>/storage/storage.go.
//   - field selectors: the AddFieldLabelConversionFunc calls in
//     pkg/apis/core/v1/conversion.go (Pod, Node, ReplicationController,
//     Event, Namespace, Secret, Service), pkg/apis/batch/v1/conversion.go
//     (Job), pkg/apis/certificates/v1*/conversion.go
//     (CertificateSigningRequest, ClusterTrustBundle, PodCertificateRequest)
//     and pkg/apis/resource/v1/conversion.go (ResourceSlice); every other
//     kind uses apimachinery's DefaultMetaV1FieldSelectorConversion
//     (metadata.name, metadata.namespace only), which is why
//     apps/v1 ReplicaSet's status.replicas, listed by its registry
//     strategy, is refused by kube-apiserver's list handler.
//
// Versions whose schema differs from the stored one (events.k8s.io/v1
// Events stored as core v1 Events, autoscaling/v1 HorizontalPodAutoscalers
// stored as autoscaling/v2) are in convertedSpecs. Deliberately not served
// (see excludedKinds): kinds that are not stored in etcd (reviews,
// bindings, component statuses, subresource options).
var builtinSpecs = []builtinSpec{
	// core, pkg/registry/core/*
	{group: "", resource: "configmaps", kind: "ConfigMap", namespaced: true, shortNames: []string{"cm"}},
	{group: "", resource: "endpoints", kind: "Endpoints", namespaced: true, shortNames: []string{"ep"}, keyPrefix: "services/endpoints"},
	{group: "", resource: "events", kind: "Event", namespaced: true, shortNames: []string{"ev"}, style: fieldsListed,
		fields: []string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name", "involvedObject.uid",
			"involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
			"reason", "reportingComponent", "source", "type"}},
	{group: "", resource: "limitranges", kind: "LimitRange", namespaced: true, shortNames: []string{"limits"}},
	{group: "", resource: "namespaces", kind: "Namespace", shortNames: []string{"ns"}, style: fieldsListed,
		fields: []string{"status.phase"}, noNamespaceField: true},
	{group: "", resource: "nodes", kind: "Node", shortNames: []string{"no"}, keyPrefix: "minions", style: fieldsListed,
		fields: []string{"spec.unschedulable"}, noNamespaceField: true},
	{group: "", resource: "persistentvolumeclaims", kind: "PersistentVolumeClaim", namespaced: true, shortNames: []string{"pvc"}},
	{group: "", resource: "persistentvolumes", kind: "PersistentVolume", shortNames: []string{"pv"}},
	{group: "", resource: "pods", kind: "Pod", namespaced: true, shortNames: []string{"po"}, categories: []string{"all"}, style: fieldsListed,
		fields: []string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
			"spec.hostNetwork", "status.phase", "status.podIP", "status.podIPs", "status.nominatedNodeName"}},
	{group: "", resource: "podtemplates", kind: "PodTemplate", namespaced: true},
	{group: "", resource: "replicationcontrollers", kind: "ReplicationController", namespaced: true, shortNames: []string{"rc"},
		categories: []string{"all"}, keyPrefix: "controllers", style: fieldsListed, fields: []string{"status.replicas"}},
	{group: "", resource: "resourcequotas", kind: "ResourceQuota", namespaced: true, shortNames: []string{"quota"}},
	{group: "", resource: "secrets", kind: "Secret", namespaced: true, style: fieldsListed, fields: []string{"type"}},
	{group: "", resource: "serviceaccounts", kind: "ServiceAccount", namespaced: true, shortNames: []string{"sa"}},
	{group: "", resource: "services", kind: "Service", namespaced: true, shortNames: []string{"svc"}, categories: []string{"all"},
		keyPrefix: "services/specs", style: fieldsListed, fields: []string{"spec.clusterIP", "spec.type"}},

	// kube-aggregator: stored as JSON by its LegacyCodec (cmd/kube-apiserver/app/aggregator.go).
	{group: "apiregistration.k8s.io", resource: "apiservices", kind: "APIService", categories: []string{"api-extensions"},
		keyPrefix: "apiregistration.k8s.io/apiservices", jsonVersion: "v1", listKind: "APIServiceList"},

	// apps
	{group: "apps", resource: "controllerrevisions", kind: "ControllerRevision", namespaced: true},
	{group: "apps", resource: "daemonsets", kind: "DaemonSet", namespaced: true, shortNames: []string{"ds"}, categories: []string{"all"}},
	{group: "apps", resource: "deployments", kind: "Deployment", namespaced: true, shortNames: []string{"deploy"}, categories: []string{"all"}},
	{group: "apps", resource: "replicasets", kind: "ReplicaSet", namespaced: true, shortNames: []string{"rs"}, categories: []string{"all"}},
	{group: "apps", resource: "statefulsets", kind: "StatefulSet", namespaced: true, shortNames: []string{"sts"}, categories: []string{"all"}},

	// autoscaling: stored as v2 for both served versions.
	{group: "autoscaling", resource: "horizontalpodautoscalers", kind: "HorizontalPodAutoscaler", namespaced: true,
		shortNames: []string{"hpa"}, categories: []string{"all"}},

	// batch
	{group: "batch", resource: "cronjobs", kind: "CronJob", namespaced: true, shortNames: []string{"cj"}, categories: []string{"all"}},
	{group: "batch", resource: "jobs", kind: "Job", namespaced: true, categories: []string{"all"}, style: fieldsBatchJob,
		fields: []string{"status.successful"}},

	// certificates.k8s.io
	{group: "certificates.k8s.io", resource: "certificatesigningrequests", kind: "CertificateSigningRequest", shortNames: []string{"csr"},
		style: fieldsListed, fields: []string{"spec.signerName"}, noNamespaceField: true},
	{group: "certificates.k8s.io", resource: "clustertrustbundles", kind: "ClusterTrustBundle",
		style: fieldsListed, fields: []string{"spec.signerName"}, noNamespaceField: true},
	{group: "certificates.k8s.io", resource: "podcertificaterequests", kind: "PodCertificateRequest", namespaced: true,
		style: fieldsListed, fields: []string{"spec.signerName", "spec.podName", "spec.nodeName"}, noNamespaceField: true},

	// coordination.k8s.io
	{group: "coordination.k8s.io", resource: "leases", kind: "Lease", namespaced: true},

	// discovery.k8s.io
	{group: "discovery.k8s.io", resource: "endpointslices", kind: "EndpointSlice", namespaced: true},

	// networking.k8s.io
	{group: "networking.k8s.io", resource: "ingressclasses", kind: "IngressClass"},
	{group: "networking.k8s.io", resource: "ingresses", kind: "Ingress", namespaced: true, shortNames: []string{"ing"}, keyPrefix: "ingress"},
	{group: "networking.k8s.io", resource: "ipaddresses", kind: "IPAddress", shortNames: []string{"ip"}},
	{group: "networking.k8s.io", resource: "networkpolicies", kind: "NetworkPolicy", namespaced: true, shortNames: []string{"netpol"}},
	{group: "networking.k8s.io", resource: "servicecidrs", kind: "ServiceCIDR"},

	// node.k8s.io
	{group: "node.k8s.io", resource: "runtimeclasses", kind: "RuntimeClass"},

	// policy
	{group: "policy", resource: "poddisruptionbudgets", kind: "PodDisruptionBudget", namespaced: true, shortNames: []string{"pdb"}},

	// rbac.authorization.k8s.io
	{group: "rbac.authorization.k8s.io", resource: "clusterrolebindings", kind: "ClusterRoleBinding"},
	{group: "rbac.authorization.k8s.io", resource: "clusterroles", kind: "ClusterRole"},
	{group: "rbac.authorization.k8s.io", resource: "rolebindings", kind: "RoleBinding", namespaced: true},
	{group: "rbac.authorization.k8s.io", resource: "roles", kind: "Role", namespaced: true},

	// storage.k8s.io
	{group: "storage.k8s.io", resource: "csidrivers", kind: "CSIDriver"},
	{group: "storage.k8s.io", resource: "csinodes", kind: "CSINode"},
	{group: "storage.k8s.io", resource: "csistoragecapacities", kind: "CSIStorageCapacity", namespaced: true},
	{group: "storage.k8s.io", resource: "storageclasses", kind: "StorageClass", shortNames: []string{"sc"}},
	{group: "storage.k8s.io", resource: "volumeattachments", kind: "VolumeAttachment"},
	{group: "storage.k8s.io", resource: "volumeattributesclasses", kind: "VolumeAttributesClass", shortNames: []string{"vac"}},

	// admissionregistration.k8s.io: every resource is in category api-extensions.
	{group: "admissionregistration.k8s.io", resource: "mutatingadmissionpolicies", kind: "MutatingAdmissionPolicy", categories: []string{"api-extensions"}},
	{group: "admissionregistration.k8s.io", resource: "mutatingadmissionpolicybindings", kind: "MutatingAdmissionPolicyBinding", categories: []string{"api-extensions"}},
	{group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", kind: "MutatingWebhookConfiguration", categories: []string{"api-extensions"}},
	{group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies", kind: "ValidatingAdmissionPolicy", categories: []string{"api-extensions"}},
	{group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings", kind: "ValidatingAdmissionPolicyBinding", categories: []string{"api-extensions"}},
	{group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", kind: "ValidatingWebhookConfiguration", categories: []string{"api-extensions"}},

	// apiextensions-apiserver: CRDs are stored as apiextensions.k8s.io/v1beta1
	// JSON (its storage codec is LegacyCodec(v1beta1) with a v1beta1
	// EncodeVersioner, pkg/controlplane/apiserver/apiextensions.go) and
	// served at v1 only, as kube-apiserver does since 1.22: codec.Unwrap
	// converts each stored v1beta1 CRD to v1 (codec/crdv1.go), the one
	// conversion lazyapi does.
	{group: "apiextensions.k8s.io", resource: "customresourcedefinitions", kind: "CustomResourceDefinition",
		shortNames: []string{"crd", "crds"}, categories: []string{"api-extensions"},
		keyPrefix: "apiextensions.k8s.io/customresourcedefinitions", jsonVersion: "v1", listKind: "CustomResourceDefinitionList"},

	// scheduling.k8s.io
	{group: "scheduling.k8s.io", resource: "priorityclasses", kind: "PriorityClass", shortNames: []string{"pc"}},

	// flowcontrol.apiserver.k8s.io
	{group: "flowcontrol.apiserver.k8s.io", resource: "flowschemas", kind: "FlowSchema"},
	{group: "flowcontrol.apiserver.k8s.io", resource: "prioritylevelconfigurations", kind: "PriorityLevelConfiguration"},

	// resource.k8s.io
	{group: "resource.k8s.io", resource: "deviceclasses", kind: "DeviceClass"},
	{group: "resource.k8s.io", resource: "devicetaintrules", kind: "DeviceTaintRule"},
	{group: "resource.k8s.io", resource: "resourceclaims", kind: "ResourceClaim", namespaced: true},
	{group: "resource.k8s.io", resource: "resourceclaimtemplates", kind: "ResourceClaimTemplate", namespaced: true},
	{group: "resource.k8s.io", resource: "resourceslices", kind: "ResourceSlice", style: fieldsResourceSlice,
		fields: []string{"spec.nodeName", "spec.driver"}, noNamespaceField: true},

	// storagemigration.k8s.io
	{group: "storagemigration.k8s.io", resource: "storageversionmigrations", kind: "StorageVersionMigration"},
}

// groupPriority orders groups in /apis as kube-apiserver's aggregator does
// (GroupPriorityMinimum, higher first, then by name): apiVersionPriorities
// in cmd/kube-apiserver/app/aggregator.go and DefaultGenericAPIServicePriorities
// in pkg/controlplane/apiserver/aggregator.go. The aggregator lists its own
// group, apiregistration.k8s.io, first. Groups of CRDs get 1000
// (pkg/controlplane/controller/crdregistration).
var groupPriority = map[string]int{
	"":                             18000,
	"apiregistration.k8s.io":       17900,
	"apps":                         17800,
	"events.k8s.io":                17750,
	"authentication.k8s.io":        17700,
	"authorization.k8s.io":         17600,
	"autoscaling":                  17500,
	"batch":                        17400,
	"certificates.k8s.io":          17300,
	"networking.k8s.io":            17200,
	"policy":                       17100,
	"rbac.authorization.k8s.io":    17000,
	"storage.k8s.io":               16800,
	"admissionregistration.k8s.io": 16700,
	"apiextensions.k8s.io":         16700,
	"scheduling.k8s.io":            16600,
	"coordination.k8s.io":          16500,
	"node.k8s.io":                  16300,
	"discovery.k8s.io":             16200,
	"resource.k8s.io":              16200,
	"flowcontrol.apiserver.k8s.io": 16100,
	"internal.apiserver.k8s.io":    16000,
	"storagemigration.k8s.io":      15800,
}

const crdGroupPriority = 1000

// BuiltinGroup reports whether kube-apiserver v1.37 registers routes for
// group by default (its built-in groups, served or not by lazyapi:
// authentication.k8s.io, authorization.k8s.io), so that an unknown path
// under /apis/<group> gets a NotFound Status from them rather than its
// plain-text NotFound handler. internal.apiserver.k8s.io is alpha, off by
// default.
func BuiltinGroup(group string) bool {
	_, ok := groupPriority[group]
	return ok && group != "" && group != "internal.apiserver.k8s.io"
}

// excludedKinds are kinds of client-go's scheme in GA group versions (and in
// the group versions lazyapi serves) that are deliberately not in the table,
// with the reason. Tests check that every such kind is either served or here.
var excludedKinds = map[schema.GroupVersionKind]string{
	{Version: "v1", Kind: "Binding"}:               "create-only pods/binding subresource, not stored",
	{Version: "v1", Kind: "ComponentStatus"}:       "computed by kube-apiserver on request, not stored in etcd",
	{Version: "v1", Kind: "NodeProxyOptions"}:      "options of the nodes/proxy subresource",
	{Version: "v1", Kind: "PodAttachOptions"}:      "options of the pods/attach subresource",
	{Version: "v1", Kind: "PodExecOptions"}:        "options of the pods/exec subresource",
	{Version: "v1", Kind: "PodLogOptions"}:         "options of the pods/log subresource",
	{Version: "v1", Kind: "PodPortForwardOptions"}: "options of the pods/portforward subresource",
	{Version: "v1", Kind: "PodProxyOptions"}:       "options of the pods/proxy subresource",
	{Version: "v1", Kind: "ServiceProxyOptions"}:   "options of the services/proxy subresource",
	{Version: "v1", Kind: "RangeAllocation"}:       "kube-apiserver's internal IP/port allocator state, not served",
	{Version: "v1", Kind: "SerializedReference"}:   "legacy annotation payload, not a resource",
	{Version: "v1", Kind: "List"}:                  "generic v1 List used by kubectl, not a resource",

	{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenReview"}:       "create-only review, not stored",
	{Group: "authentication.k8s.io", Version: "v1", Kind: "TokenRequest"}:      "serviceaccounts/token subresource, not stored",
	{Group: "authentication.k8s.io", Version: "v1", Kind: "SelfSubjectReview"}: "create-only review, not stored",

	{Group: "authorization.k8s.io", Version: "v1", Kind: "SubjectAccessReview"}:      "create-only review, not stored",
	{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectAccessReview"}:  "create-only review, not stored",
	{Group: "authorization.k8s.io", Version: "v1", Kind: "LocalSubjectAccessReview"}: "create-only review, not stored",
	{Group: "authorization.k8s.io", Version: "v1", Kind: "SelfSubjectRulesReview"}:   "create-only review, not stored",

	{Group: "autoscaling", Version: "v1", Kind: "Scale"}: "scale subresource",

	{Group: "policy", Version: "v1", Kind: "Eviction"}: "create-only pods/eviction subresource",

	{Group: "certificates.k8s.io", Version: "v1beta1", Kind: "ClusterTrustBundle"}:        "stored as v1beta1 in 1.37, served at v1 (same schema: apiVersion rewritten), as kube-apiserver serves it",
	{Group: "certificates.k8s.io", Version: "v1beta1", Kind: "PodCertificateRequest"}:     "stored as v1beta1 in 1.37, served at v1 only (converted: v1 dropped pkixPublicKey, proofOfPossession), as kube-apiserver serves it",
	{Group: "certificates.k8s.io", Version: "v1beta1", Kind: "CertificateSigningRequest"}: "v1beta1 removed in 1.22; stored and served as v1",

	{Group: "resource.k8s.io", Version: "v1beta2", Kind: "DeviceTaintRule"}:       "stored as v1beta2 in 1.37, served at v1 (same schema: apiVersion rewritten), as kube-apiserver serves it",
	{Group: "resource.k8s.io", Version: "v1beta2", Kind: "DeviceClass"}:           "stored and served as v1",
	{Group: "resource.k8s.io", Version: "v1beta2", Kind: "ResourceClaim"}:         "stored and served as v1",
	{Group: "resource.k8s.io", Version: "v1beta2", Kind: "ResourceClaimTemplate"}: "stored and served as v1",
	{Group: "resource.k8s.io", Version: "v1beta2", Kind: "ResourceSlice"}:         "stored and served as v1",

	{Group: "storagemigration.k8s.io", Version: "v1beta1", Kind: "StorageVersionMigration"}: "stored as v1beta1 in 1.37, served at v1 (same schema: apiVersion rewritten), as kube-apiserver serves it",
}

// lifecycle is implemented by k8s.io/api types with
// +k8s:prerelease-lifecycle-gen tags.
type lifecycleIntroduced interface {
	APILifecycleIntroduced() (major, minor int)
}

type lifecycleRemoved interface {
	APILifecycleRemoved() (major, minor int)
}

// storageVersion returns the version kube-apiserver v1.37 stores group/kind
// at. It applies the rule of emulatedStorageVersion in
// k8s.io/apiserver/pkg/server/storage/resource_encoding_config.go: the
// highest-priority version of the kind whose lifecycle "introduced" release
// is not newer than the minimum compatibility version (the previous minor,
// 1.36), so that a rollback to 1.36 can read what 1.37 wrote. kube-apiserver
// prioritises GA over beta over alpha, higher numbers first
// (version.CompareKubeAwareVersionStrings). Versions removed by 1.37 are
// skipped. No ResourceEncodingOverrides of
// pkg/kubeapiserver/default_storage_factory_builder.go apply to a resource
// served by default in 1.37: the 1.36 overrides for mutatingadmissionpolicies
// (v1beta1) were to be removed in 1.37, those for clustertrustbundles and
// podcertificaterequests agree with the rule, and the rest name beta or alpha
// resources that are off by default.
func storageVersion(group, kind string) (string, error) {
	var versions []string
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Group == group && gvk.Kind == kind && gvk.Version != "__internal" {
			versions = append(versions, gvk.Version)
		}
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("cannot find kind %q of group %q in client-go's scheme", kind, group)
	}
	slices.SortFunc(versions, func(a, b string) int { return version.CompareKubeAwareVersionStrings(b, a) })
	minCompat := kubeMinor - 1
	for _, v := range versions {
		obj, err := scheme.Scheme.New(schema.GroupVersionKind{Group: group, Version: v, Kind: kind})
		if err != nil {
			return "", fmt.Errorf("cannot create %s %s/%s: %w", kind, group, v, err)
		}
		if l, ok := obj.(lifecycleRemoved); ok {
			if major, minor := l.APILifecycleRemoved(); major == kubeMajor && minor <= kubeMinor {
				continue
			}
		}
		if l, ok := obj.(lifecycleIntroduced); ok {
			if major, minor := l.APILifecycleIntroduced(); major > kubeMajor || (major == kubeMajor && minor > minCompat) {
				continue
			}
		}
		return v, nil
	}
	return "", fmt.Errorf("no version of %s.%s can be stored by kube-apiserver %d.%d", kind, group, kubeMajor, kubeMinor)
}

// NewBuiltin returns a table of every built-in resource kube-apiserver v1.37
// serves by default, each at the version kube-apiserver stores it at. It
// panics if client-go's scheme disagrees with the built-in data table, which
// is a bug caught by the package tests.
func NewBuiltin() *Table {
	rs, err := builtinResources()
	if err != nil {
		panic("BUG: " + err.Error())
	}
	t := &Table{builtin: rs, crds: map[string]*crd{}}
	t.log.Store(zap.NewNop())
	t.mu.Lock()
	t.rebuildLocked()
	t.mu.Unlock()
	t.ready.Store(true)
	return t
}

func builtinResources() ([]*Resource, error) {
	rs := make([]*Resource, 0, len(builtinSpecs))
	for i := range builtinSpecs {
		s := &builtinSpecs[i]
		r := &Resource{
			Group:            s.group,
			Resource:         s.resource,
			Kind:             s.kind,
			SingularName:     strings.ToLower(s.kind),
			Namespaced:       s.namespaced,
			ShortNames:       s.shortNames,
			Categories:       s.categories,
			KeyPrefix:        s.resource,
			FieldSelectors:   s.fields,
			fieldStyle:       s.style,
			noNamespaceField: s.noNamespaceField,
		}
		if s.keyPrefix != "" {
			r.KeyPrefix = s.keyPrefix
		}
		if s.jsonVersion != "" {
			r.Version, r.ListKind, r.JSONStorage = s.jsonVersion, s.listKind, true
		} else {
			v, err := storageVersion(s.group, s.kind)
			if err != nil {
				return nil, err
			}
			r.Version = v
			listKind := s.kind + "List"
			lt, ok := scheme.Scheme.AllKnownTypes()[schema.GroupVersionKind{Group: s.group, Version: v, Kind: listKind}]
			if !ok || lt.Kind() != reflect.Struct {
				return nil, fmt.Errorf("cannot find list kind %q of %s/%s in client-go's scheme", listKind, s.group, v)
			}
			r.ListKind = listKind
		}
		r.StorageVersion = r.Version
		if s.jsonVersion == "" {
			// Kinds that went GA while still stored at their beta version
			// are served, as by kube-apiserver, at the GA version only,
			// with apiVersion rewritten on the fly (checked: same schema).
			if v := servedVersion(r.Group, r.Kind, r.StorageVersion); v != r.StorageVersion {
				same, err := sameSchema(r.Group, r.Kind, r.StorageVersion, v)
				if err != nil {
					return nil, err
				}
				// A kind whose GA schema differs (PodCertificateRequest:
				// v1 dropped pkixPublicKey and proofOfPossession) is
				// converted as kube-apiserver converts it (codec.Convert).
				r.Version = v
				if !same {
					r.Conversion = &Conversion{From: r.StorageAPIVersion(), StorageGroup: r.Group}
				}
			}
			w, err := builtinWarning(schema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind})
			if err != nil {
				return nil, err
			}
			r.Warning = w
		}
		rs = append(rs, r)
	}
	for _, c := range convertedSpecs {
		r, err := convertedResource(rs, c)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// convertedSpec is a built-in resource kube-apiserver serves at a version
// whose schema differs from the one its objects are stored at, in another
// group-version (kube-apiserver's storage is shared:
// pkg/registry/events/rest/storage_events.go uses the core Event registry,
// pkg/registry/autoscaling/rest the one HPA registry for v1 and v2).
type convertedSpec struct {
	group, version, resource string
	// storedGroup is the group of the served resource that holds the
	// objects (its version is the storage version).
	storedGroup string
	// fields maps each field selector label kube-apiserver accepts for
	// this version to the stored kind's label (its field label
	// conversion function); nil: the stored kind's rules.
	fields map[string]string
}

var convertedSpecs = []convertedSpec{
	// pkg/apis/events/v1/conversion.go AddFieldLabelConversionsForEvent.
	{group: "events.k8s.io", version: "v1", resource: "events", storedGroup: "",
		fields: map[string]string{
			"reason": "reason", "type": "type",
			"regarding.kind": "involvedObject.kind", "regarding.namespace": "involvedObject.namespace",
			"regarding.name": "involvedObject.name", "regarding.uid": "involvedObject.uid",
			"regarding.apiVersion": "involvedObject.apiVersion", "regarding.resourceVersion": "involvedObject.resourceVersion",
			"regarding.fieldPath": "involvedObject.fieldPath", "reportingController": "reportingComponent",
		}},
	{group: "autoscaling", version: "v1", resource: "horizontalpodautoscalers", storedGroup: "autoscaling"},
}

// convertedResource returns the Resource of c, which shares the etcd keys,
// the watch cache and the qualified resource name (in NotFound messages)
// of the stored resource in rs.
func convertedResource(rs []*Resource, c convertedSpec) (*Resource, error) {
	var st *Resource
	for _, r := range rs {
		if r.Group == c.storedGroup && r.Resource == c.resource {
			st = r
		}
	}
	if st == nil {
		return nil, fmt.Errorf("no stored resource %s.%s for %s/%s", c.resource, c.storedGroup, c.group, c.version)
	}
	if st.Conversion != nil || st.RewritesTypeMeta() {
		return nil, fmt.Errorf("%s.%s is not served at its storage version", c.resource, c.storedGroup)
	}
	gvk := schema.GroupVersionKind{Group: c.group, Version: c.version, Kind: st.Kind}
	if _, ok := scheme.Scheme.AllKnownTypes()[gvk]; !ok {
		return nil, fmt.Errorf("cannot find %v in client-go's scheme", gvk)
	}
	if _, ok := scheme.Scheme.AllKnownTypes()[gvk.GroupVersion().WithKind(st.ListKind)]; !ok {
		return nil, fmt.Errorf("cannot find %s of %s in client-go's scheme", st.ListKind, gvk.GroupVersion())
	}
	r := *st
	r.Group, r.Version = c.group, c.version
	r.Conversion = &Conversion{From: st.APIVersion(), StorageGroup: st.Group}
	if c.fields != nil {
		r.fieldAliases = c.fields
		r.fieldStyle = fieldsListed
	}
	w, err := builtinWarning(gvk)
	if err != nil {
		return nil, err
	}
	r.Warning = w
	return &r, nil
}
