package resource

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

func TestBuiltinLookup(t *testing.T) {
	tb := NewBuiltin()
	tests := []struct {
		group, version, resource string
		kind, listKind           string
		keyPrefix                string
		namespaced               bool
		shortNames, categories   []string
	}{
		{"", "v1", "configmaps", "ConfigMap", "ConfigMapList", "configmaps", true, []string{"cm"}, nil},
		{"", "v1", "pods", "Pod", "PodList", "pods", true, []string{"po"}, []string{"all"}},
		{"", "v1", "services", "Service", "ServiceList", "services/specs", true, []string{"svc"}, []string{"all"}},
		{"", "v1", "endpoints", "Endpoints", "EndpointsList", "services/endpoints", true, []string{"ep"}, nil},
		{"", "v1", "nodes", "Node", "NodeList", "minions", false, []string{"no"}, nil},
		{"", "v1", "namespaces", "Namespace", "NamespaceList", "namespaces", false, []string{"ns"}, nil},
		{"", "v1", "replicationcontrollers", "ReplicationController", "ReplicationControllerList", "controllers", true, []string{"rc"}, []string{"all"}},
		{"", "v1", "events", "Event", "EventList", "events", true, []string{"ev"}, nil},
		{"", "v1", "secrets", "Secret", "SecretList", "secrets", true, nil, nil},
		{"", "v1", "persistentvolumes", "PersistentVolume", "PersistentVolumeList", "persistentvolumes", false, []string{"pv"}, nil},
		{"apps", "v1", "deployments", "Deployment", "DeploymentList", "deployments", true, []string{"deploy"}, []string{"all"}},
		{"apps", "v1", "statefulsets", "StatefulSet", "StatefulSetList", "statefulsets", true, []string{"sts"}, []string{"all"}},
		{"autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", "HorizontalPodAutoscalerList", "horizontalpodautoscalers", true, []string{"hpa"}, []string{"all"}},
		{"batch", "v1", "jobs", "Job", "JobList", "jobs", true, nil, []string{"all"}},
		{"batch", "v1", "cronjobs", "CronJob", "CronJobList", "cronjobs", true, []string{"cj"}, []string{"all"}},
		{"networking.k8s.io", "v1", "ingresses", "Ingress", "IngressList", "ingress", true, []string{"ing"}, nil},
		{"networking.k8s.io", "v1", "ingressclasses", "IngressClass", "IngressClassList", "ingressclasses", false, nil, nil},
		{"coordination.k8s.io", "v1", "leases", "Lease", "LeaseList", "leases", true, nil, nil},
		{"discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", "EndpointSliceList", "endpointslices", true, nil, nil},
		{"rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", "ClusterRoleList", "clusterroles", false, nil, nil},
		{"rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", "RoleBindingList", "rolebindings", true, nil, nil},
		{"storage.k8s.io", "v1", "storageclasses", "StorageClass", "StorageClassList", "storageclasses", false, []string{"sc"}, nil},
		{"certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", "CertificateSigningRequestList", "certificatesigningrequests", false, []string{"csr"}, nil},
		{"certificates.k8s.io", "v1", "clustertrustbundles", "ClusterTrustBundle", "ClusterTrustBundleList", "clustertrustbundles", false, nil, nil},
		{"admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", "ValidatingWebhookConfigurationList", "validatingwebhookconfigurations", false, nil, []string{"api-extensions"}},
		{"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", "CustomResourceDefinitionList", "apiextensions.k8s.io/customresourcedefinitions", false, []string{"crd", "crds"}, []string{"api-extensions"}},
		{"apiregistration.k8s.io", "v1", "apiservices", "APIService", "APIServiceList", "apiregistration.k8s.io/apiservices", false, nil, []string{"api-extensions"}},
		{"scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", "PriorityClassList", "priorityclasses", false, []string{"pc"}, nil},
		{"flowcontrol.apiserver.k8s.io", "v1", "flowschemas", "FlowSchema", "FlowSchemaList", "flowschemas", false, nil, nil},
		{"resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", "ResourceClaimList", "resourceclaims", true, nil, nil},
		{"resource.k8s.io", "v1", "devicetaintrules", "DeviceTaintRule", "DeviceTaintRuleList", "devicetaintrules", false, nil, nil},
		{"storagemigration.k8s.io", "v1", "storageversionmigrations", "StorageVersionMigration", "StorageVersionMigrationList", "storageversionmigrations", false, nil, nil},
	}
	for _, tt := range tests {
		r, ok := tb.Lookup(tt.group, tt.version, tt.resource)
		if !ok {
			t.Errorf("Lookup(%q, %q, %q) not found", tt.group, tt.version, tt.resource)
			continue
		}
		if r.Kind != tt.kind || r.ListKind != tt.listKind || r.KeyPrefix != tt.keyPrefix || r.Namespaced != tt.namespaced {
			t.Errorf("Lookup(%q, %q, %q) = kind %q list %q key %q namespaced %v, want %q %q %q %v", tt.group, tt.version, tt.resource,
				r.Kind, r.ListKind, r.KeyPrefix, r.Namespaced, tt.kind, tt.listKind, tt.keyPrefix, tt.namespaced)
		}
		if !slices.Equal(r.ShortNames, tt.shortNames) || !slices.Equal(r.Categories, tt.categories) {
			t.Errorf("Lookup(%q, %q, %q) short names %q categories %q, want %q %q", tt.group, tt.version, tt.resource,
				r.ShortNames, r.Categories, tt.shortNames, tt.categories)
		}
		if r.SingularName != strings.ToLower(tt.kind) || !r.Servable() || r.Custom {
			t.Errorf("Lookup(%q, %q, %q) singular %q servable %v custom %v", tt.group, tt.version, tt.resource, r.SingularName, r.Servable(), r.Custom)
		}
	}
}

func TestBuiltinNotServed(t *testing.T) {
	tb := NewBuiltin()
	for _, k := range []gvr{
		{"apps", "v1beta1", "deployments"},                           // removed
		{"extensions", "v1beta1", "ingresses"},                       // removed
		{"", "v1", "componentstatuses"},                              // not in etcd
		{"", "v1", "configmap"},                                      // singular is not a lookup key
		{"", "v1", "cm"},                                             // nor a short name
		{"", "v1", "pods/status"},                                    // no subresources
		{"coordination.k8s.io", "v1beta1", "leasecandidates"},        // beta, off by default
		{"scheduling.k8s.io", "v1beta1", "workloads"},                // beta, off by default
		{"certificates.k8s.io", "v1beta1", "clustertrustbundles"},    // stored at v1beta1, served at v1 as kube-apiserver
		{"certificates.k8s.io", "v1beta1", "podcertificaterequests"}, // stored at v1beta1, served at v1 (converted) as kube-apiserver
	} {
		if r, ok := tb.Lookup(k.group, k.version, k.resource); ok {
			t.Errorf("Lookup(%q, %q, %q) = %+v, want not served", k.group, k.version, k.resource, r)
		}
	}
}

// TestBuiltinUniqueNames: short names and etcd key prefixes belong to one
// resource, but for the versions served by conversion from another
// version's objects (Conversion), which share them with it.
func TestBuiltinUniqueNames(t *testing.T) {
	seen := map[string]string{}
	for _, r := range NewBuiltin().Resources() {
		if r.Conversion != nil {
			continue
		}
		for _, n := range r.ShortNames {
			if prev, dup := seen[n]; dup {
				t.Errorf("short name %q of %s also used by %s", n, r.GroupResource(), prev)
			}
			seen[n] = r.GroupResource()
		}
	}
	keys := map[string]string{}
	for _, r := range NewBuiltin().Resources() {
		if r.Conversion != nil {
			continue
		}
		if prev, dup := keys[r.KeyPrefix]; dup {
			t.Errorf("key prefix %q of %s also used by %s", r.KeyPrefix, r.GroupResource(), prev)
		}
		keys[r.KeyPrefix] = r.GroupResource()
	}
}

func TestStorageVersion(t *testing.T) {
	tests := []struct{ group, kind, want string }{
		{"", "ConfigMap", "v1"},
		{"apps", "Deployment", "v1"},
		{"autoscaling", "HorizontalPodAutoscaler", "v2"},
		{"batch", "CronJob", "v1"},
		{"flowcontrol.apiserver.k8s.io", "FlowSchema", "v1"},
		{"admissionregistration.k8s.io", "MutatingAdmissionPolicy", "v1"}, // v1 introduced 1.36
		{"certificates.k8s.io", "ClusterTrustBundle", "v1beta1"},          // v1 introduced 1.37
		{"certificates.k8s.io", "PodCertificateRequest", "v1beta1"},       // v1 introduced 1.37
		{"resource.k8s.io", "DeviceTaintRule", "v1beta2"},                 // v1 introduced 1.37, v1beta2 1.36
		{"resource.k8s.io", "ResourceClaim", "v1"},                        // v1 introduced 1.34
		{"storagemigration.k8s.io", "StorageVersionMigration", "v1beta1"}, // v1 introduced 1.37
		{"storage.k8s.io", "VolumeAttributesClass", "v1"},
	}
	for _, tt := range tests {
		got, err := storageVersion(tt.group, tt.kind)
		if err != nil || got != tt.want {
			t.Errorf("storageVersion(%q, %q) = %q, %v, want %q", tt.group, tt.kind, got, err, tt.want)
		}
	}
	if _, err := storageVersion("apps", "NoSuchKind"); err == nil {
		t.Errorf("storageVersion of an unknown kind: no error")
	}
}

// TestBuiltinCoversScheme checks that every kind client-go's scheme has in a
// GA group version, or in a group version lazyapi serves, is either served
// at that version or excluded with a reason, and that no exclusion is stale.
func TestBuiltinCoversScheme(t *testing.T) {
	tb := NewBuiltin()
	servedGV := map[schema.GroupVersion]bool{}
	served := map[schema.GroupVersionKind]bool{}
	for _, r := range tb.Resources() {
		gv := schema.GroupVersion{Group: r.Group, Version: r.Version}
		servedGV[gv] = true
		served[gv.WithKind(r.Kind)] = true
		served[gv.WithKind(r.ListKind)] = true
	}
	known := scheme.Scheme.AllKnownTypes()
	checked := 0
	for gvk, typ := range known {
		gv := gvk.GroupVersion()
		ga := !strings.Contains(gvk.Version, "alpha") && !strings.Contains(gvk.Version, "beta") && gvk.Version != "__internal"
		if !ga && !servedGV[gv] {
			continue
		}
		if typ.PkgPath() == "k8s.io/apimachinery/pkg/apis/meta/v1" {
			continue // ListOptions, WatchEvent, ... added to every group version
		}
		checked++
		if served[gvk] {
			continue
		}
		if _, ok := excludedKinds[gvk]; ok {
			continue
		}
		if item, ok := strings.CutSuffix(gvk.Kind, "List"); ok {
			if _, ok := excludedKinds[gv.WithKind(item)]; ok {
				continue
			}
		}
		t.Errorf("kind %v of client-go's scheme is neither served nor excluded", gvk)
	}
	if checked < 100 {
		t.Errorf("checked only %d kinds of client-go's scheme", checked)
	}
	for gvk, reason := range excludedKinds {
		if _, ok := known[gvk]; !ok {
			t.Errorf("excluded kind %v (%s) is not in client-go's scheme", gvk, reason)
		}
		if served[gvk] {
			t.Errorf("excluded kind %v (%s) is served", gvk, reason)
		}
	}
}

func TestConvertFieldLabel(t *testing.T) {
	tb := NewBuiltin()
	tests := []struct {
		group, version, resource, label string
		want, wantErr                   string
	}{
		{"", "v1", "pods", "metadata.name", "metadata.name", ""},
		{"", "v1", "pods", "metadata.namespace", "metadata.namespace", ""},
		{"", "v1", "pods", "spec.nodeName", "spec.nodeName", ""},
		{"", "v1", "pods", "status.podIPs", "status.podIPs", ""},
		{"", "v1", "pods", "spec.host", "spec.nodeName", ""},
		{"", "v1", "pods", "spec.foo", "", "field label not supported: spec.foo"},
		{"", "v1", "secrets", "type", "type", ""},
		{"", "v1", "events", "involvedObject.uid", "involvedObject.uid", ""},
		{"", "v1", "events", "reportingComponent", "reportingComponent", ""},
		{"", "v1", "namespaces", "status.phase", "status.phase", ""},
		{"", "v1", "namespaces", "metadata.namespace", "", "field label not supported: metadata.namespace"},
		{"", "v1", "nodes", "spec.unschedulable", "spec.unschedulable", ""},
		{"", "v1", "services", "spec.clusterIP", "spec.clusterIP", ""},
		{"", "v1", "replicationcontrollers", "status.replicas", "status.replicas", ""},
		{"", "v1", "configmaps", "metadata.namespace", "metadata.namespace", ""},
		{"", "v1", "configmaps", "data.x", "", `"data.x" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{"apps", "v1", "replicasets", "status.replicas", "", `"status.replicas" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{"batch", "v1", "jobs", "status.successful", "status.successful", ""},
		{"batch", "v1", "jobs", "spec.x", "", `field label "spec.x" not supported for batchv1.Job`},
		{"certificates.k8s.io", "v1", "certificatesigningrequests", "spec.signerName", "spec.signerName", ""},
		{"resource.k8s.io", "v1", "resourceslices", "spec.driver", "spec.driver", ""},
		{"resource.k8s.io", "v1", "resourceslices", "spec.pool.name", "", "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name"},
	}
	for _, tt := range tests {
		r, ok := tb.Lookup(tt.group, tt.version, tt.resource)
		if !ok {
			t.Fatalf("Lookup(%q, %q, %q) not found", tt.group, tt.version, tt.resource)
		}
		got, err := r.ConvertFieldLabel(tt.label)
		gotErr := ""
		if err != nil {
			gotErr = err.Error()
		}
		if got != tt.want || gotErr != tt.wantErr {
			t.Errorf("%s.ConvertFieldLabel(%q) = %q, %q, want %q, %q", r.GroupResource(), tt.label, got, gotErr, tt.want, tt.wantErr)
		}
	}
}
