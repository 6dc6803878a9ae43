package resource

// SubresourceKind says what kube-apiserver answers a GET of
// {resource}/{name}/{subresource} with.
type SubresourceKind uint8

const (
	// SubNone: kube-apiserver registers no such subresource (404).
	SubNone SubresourceKind = iota
	// SubObject: the stored object itself (status, and the
	// get/update/patch subresources ephemeralcontainers, resize, approval).
	SubObject
	// SubScale: an autoscaling/v1 Scale computed from the stored object.
	SubScale
	// SubConnect: a connection to a kubelet, a pod or a service (log,
	// exec, attach, portforward, proxy); nothing stored to serve.
	SubConnect
	// SubCreateOnly: a subresource that only accepts POST (binding,
	// eviction, token): kube-apiserver answers a GET 405.
	SubCreateOnly
)

// builtinSubresources are the subresources kube-apiserver v1.37 registers
// for the built-in resources lazyapi serves, by GroupResource, from
// kubernetes/kubernetes pkg/registry/*/rest/storage_*.go (the
// storage[resource+"/..."] entries), apiextensions-apiserver's
// customresourcedefinitions/status and kube-aggregator's apiservices/status.
var builtinSubresources = map[string]map[string]SubresourceKind{
	"pods": {"status": SubObject, "ephemeralcontainers": SubObject, "resize": SubObject,
		"log": SubConnect, "exec": SubConnect, "attach": SubConnect, "portforward": SubConnect, "proxy": SubConnect,
		"binding": SubCreateOnly, "eviction": SubCreateOnly},
	"replicationcontrollers":             {"status": SubObject, "scale": SubScale},
	"services":                           {"status": SubObject, "proxy": SubConnect},
	"nodes":                              {"status": SubObject, "proxy": SubConnect},
	"namespaces":                         {"status": SubObject, "finalize": SubCreateOnly},
	"persistentvolumes":                  {"status": SubObject},
	"persistentvolumeclaims":             {"status": SubObject},
	"resourcequotas":                     {"status": SubObject},
	"serviceaccounts":                    {"token": SubCreateOnly},
	"apiservices.apiregistration.k8s.io": {"status": SubObject},
	"customresourcedefinitions.apiextensions.k8s.io": {"status": SubObject},
	"deployments.apps":                     {"status": SubObject, "scale": SubScale},
	"replicasets.apps":                     {"status": SubObject, "scale": SubScale},
	"statefulsets.apps":                    {"status": SubObject, "scale": SubScale},
	"daemonsets.apps":                      {"status": SubObject},
	"horizontalpodautoscalers.autoscaling": {"status": SubObject},
	"jobs.batch":                           {"status": SubObject},
	"cronjobs.batch":                       {"status": SubObject},
	"certificatesigningrequests.certificates.k8s.io":           {"status": SubObject, "approval": SubObject},
	"podcertificaterequests.certificates.k8s.io":               {"status": SubObject},
	"ingresses.networking.k8s.io":                              {"status": SubObject},
	"servicecidrs.networking.k8s.io":                           {"status": SubObject},
	"poddisruptionbudgets.policy":                              {"status": SubObject},
	"volumeattachments.storage.k8s.io":                         {"status": SubObject},
	"csinodes.storage.k8s.io":                                  {"status": SubObject},
	"validatingadmissionpolicies.admissionregistration.k8s.io": {"status": SubObject},
	"flowschemas.flowcontrol.apiserver.k8s.io":                 {"status": SubObject},
	"prioritylevelconfigurations.flowcontrol.apiserver.k8s.io": {"status": SubObject},
	"devicetaintrules.resource.k8s.io":                         {"status": SubObject},
	"resourceclaims.resource.k8s.io":                           {"status": SubObject},
	"storageversionmigrations.storagemigration.k8s.io":         {"status": SubObject},
}

// Subresource returns what kube-apiserver serves at the resource's
// subresource sub: for a custom resource, what its CRD's version declares
// (subresources.status, subresources.scale).
func (r *Resource) Subresource(sub string) SubresourceKind {
	if r.Custom {
		switch {
		case sub == "status" && r.statusSub:
			return SubObject
		case sub == "scale" && r.Scale != nil:
			return SubScale
		}
		return SubNone
	}
	return builtinSubresources[r.GroupResource()][sub]
}

// ScalePaths are a custom resource's subresources.scale JSON paths
// (specReplicasPath, statusReplicasPath, labelSelectorPath), as in its CRD.
type ScalePaths struct {
	SpecReplicas, StatusReplicas, LabelSelector string
}
