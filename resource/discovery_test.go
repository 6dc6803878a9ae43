package resource

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// discoveryServer serves a table's discovery documents at kube-apiserver's
// paths. With aggregated, /api and /apis answer a client that accepts
// apidiscovery.k8s.io/v2 with the aggregated documents, as kube-apiserver
// does; without, they always answer the legacy documents. It records the
// paths it served.
type discoveryServer struct {
	tb         *Table
	aggregated bool

	mu    sync.Mutex
	paths map[string]int
}

func (s *discoveryServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paths[r.URL.Path]++
	s.mu.Unlock()
	wantsAggregated := s.aggregated && strings.Contains(r.Header.Get("Accept"), "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
	var body []byte
	ok := true
	ct := "application/json"
	switch p := strings.Trim(r.URL.Path, "/"); {
	case p == "version":
		body = s.tb.DiscoveryVersion()
	case p == "api" && wantsAggregated:
		body, ct = s.tb.DiscoveryAggregated(true), AggregatedContentType
	case p == "api":
		body = s.tb.DiscoveryAPIVersions()
	case p == "api/v1":
		body = s.tb.DiscoveryCore()
	case p == "apis" && wantsAggregated:
		body, ct = s.tb.DiscoveryAggregated(false), AggregatedContentType
	case p == "apis":
		body = s.tb.DiscoveryGroups()
	case strings.HasPrefix(p, "apis/"):
		parts := strings.Split(p, "/")
		switch len(parts) {
		case 2:
			body, ok = s.tb.DiscoveryGroup(parts[1])
		case 3:
			body, ok = s.tb.DiscoveryGroupVersion(parts[1], parts[2])
		default:
			ok = false
		}
	default:
		ok = false
	}
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Write(body)
}

func (s *discoveryServer) served(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paths[path]
}

func startDiscovery(t *testing.T, tb *Table, aggregated bool) (*discoveryServer, *httptest.Server) {
	ds := &discoveryServer{tb: tb, aggregated: aggregated, paths: map[string]int{}}
	srv := httptest.NewServer(ds)
	t.Cleanup(srv.Close)
	return ds, srv
}

// TestDiscoveryClientGo feeds the documents to client-go's discovery client
// and REST mapper, in aggregated and legacy mode.
func TestDiscoveryClientGo(t *testing.T) {
	for _, aggregated := range []bool{true, false} {
		name := "legacy"
		if aggregated {
			name = "aggregated"
		}
		t.Run(name, func(t *testing.T) {
			tb := NewBuiltin()
			ds, srv := startDiscovery(t, tb, aggregated)
			dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL, QPS: -1})
			if err != nil {
				t.Fatal(err)
			}
			info, err := dc.ServerVersion()
			if err != nil {
				t.Fatalf("ServerVersion: %v", err)
			}
			if v, err := utilversion.ParseSemantic(info.GitVersion); err != nil || v.Major() != 1 || v.Minor() != 37 {
				t.Errorf("ServerVersion().GitVersion = %q: %v, %v", info.GitVersion, v, err)
			}

			groups, lists, err := dc.ServerGroupsAndResources()
			if err != nil {
				t.Fatalf("ServerGroupsAndResources: %v", err)
			}
			n, subs := 0, map[string]bool{}
			for _, l := range lists {
				for _, r := range l.APIResources {
					if strings.Contains(r.Name, "/") {
						subs[l.GroupVersion+"/"+r.Name] = true
						continue
					}
					n++
				}
			}
			// The stored resources and the three self reviews, which
			// lazyapi answers.
			if want := len(tb.Resources()) + 3; n != want {
				t.Errorf("ServerGroupsAndResources: %d resources, want %d", n, want)
			}
			// Subresources served from stored data are listed, with the
			// response kind of each (client-go reads both forms).
			for _, sub := range []string{"apps/v1/deployments/scale", "apps/v1/deployments/status", "v1/pods/status", "autoscaling/v1/horizontalpodautoscalers/status"} {
				if !subs[sub] {
					t.Errorf("ServerGroupsAndResources lacks %s", sub)
				}
			}
			if subs["v1/pods/log"] || subs["v1/pods/exec"] || subs["v1/pods/binding"] {
				t.Errorf("ServerGroupsAndResources lists a subresource lazyapi does not serve from stored data")
			}
			// authentication.k8s.io and authorization.k8s.io: the self
			// reviews.
			if len(groups) != len(tb.snap.Load().groups)+3 {
				t.Errorf("ServerGroupsAndResources: %d groups, want %d", len(groups), len(tb.snap.Load().groups)+3)
			}
			if aggregated && ds.served("/apis/apps/v1") != 0 {
				t.Errorf("aggregated mode fetched /apis/apps/v1")
			}
			if !aggregated && ds.served("/apis/apps/v1") == 0 {
				t.Errorf("legacy mode did not fetch /apis/apps/v1")
			}

			gr, err := restmapper.GetAPIGroupResources(dc)
			if err != nil {
				t.Fatalf("GetAPIGroupResources: %v", err)
			}
			mapper := restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(gr), dc, nil)
			tests := []struct {
				in   string
				want schema.GroupVersionResource
			}{
				{"cm", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
				{"configmap", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}},
				{"po", schema.GroupVersionResource{Version: "v1", Resource: "pods"}},
				{"svc", schema.GroupVersionResource{Version: "v1", Resource: "services"}},
				{"no", schema.GroupVersionResource{Version: "v1", Resource: "nodes"}},
				{"ns", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}},
				{"events", schema.GroupVersionResource{Version: "v1", Resource: "events"}},
				{"deploy", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
				{"sts", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}},
				{"hpa", schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}},
				{"ing", schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}},
				{"crd", schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}},
				{"clustertrustbundles", schema.GroupVersionResource{Group: "certificates.k8s.io", Version: "v1", Resource: "clustertrustbundles"}},
			}
			for _, tt := range tests {
				got, err := mapper.ResourceFor(schema.GroupVersionResource{Resource: tt.in})
				if err != nil || got != tt.want {
					t.Errorf("ResourceFor(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
				}
			}
			m, err := mapper.RESTMapping(schema.GroupKind{Group: "apps", Kind: "Deployment"})
			if err != nil || m.Resource.Version != "v1" || m.Scope.Name() != "namespace" {
				t.Errorf("RESTMapping(Deployment.apps) = %+v, %v", m, err)
			}
			m, err = mapper.RESTMapping(schema.GroupKind{Kind: "Node"})
			if err != nil || m.Resource.Resource != "nodes" || m.Scope.Name() != "root" {
				t.Errorf("RESTMapping(Node) = %+v, %v", m, err)
			}
		})
	}
}

// TestDiscoveryDocuments checks the documents' shape against the
// apimachinery types they decode into.
func TestDiscoveryDocuments(t *testing.T) {
	tb := NewBuiltin()
	tb.SetServerAddress("10.0.0.1:6443")

	var av metav1.APIVersions
	mustUnmarshal(t, tb.DiscoveryAPIVersions(), &av)
	if av.Kind != "APIVersions" || len(av.Versions) != 1 || av.Versions[0] != "v1" ||
		len(av.ServerAddressByClientCIDRs) != 1 || av.ServerAddressByClientCIDRs[0].ServerAddress != "10.0.0.1:6443" {
		t.Errorf("/api = %+v", av)
	}

	var core metav1.APIResourceList
	mustUnmarshal(t, tb.DiscoveryCore(), &core)
	if core.Kind != "APIResourceList" || core.GroupVersion != "v1" {
		t.Errorf("/api/v1 = %s %s", core.Kind, core.GroupVersion)
	}
	var cm *metav1.APIResource
	for i := range core.APIResources {
		if core.APIResources[i].Name == "configmaps" {
			cm = &core.APIResources[i]
		}
	}
	// The storageVersionHash kube-apiserver v1.3x serves for configmaps.
	if cm == nil || cm.Kind != "ConfigMap" || !cm.Namespaced || strings.Join(cm.Verbs, ",") != "get,list,watch" || cm.StorageVersionHash != "qFsyl6wFWjQ=" {
		t.Errorf("/api/v1 configmaps = %+v", cm)
	}

	var groups metav1.APIGroupList
	mustUnmarshal(t, tb.DiscoveryGroups(), &groups)
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.Name)
		if g.PreferredVersion != g.Versions[0] {
			t.Errorf("group %s preferred %v, first %v", g.Name, g.PreferredVersion, g.Versions[0])
		}
	}
	if names[0] != "apiregistration.k8s.io" || names[1] != "apps" {
		t.Errorf("/apis groups start %q, want apiregistration.k8s.io, apps", names[:2])
	}

	b, ok := tb.DiscoveryGroup("certificates.k8s.io")
	if !ok {
		t.Fatalf("DiscoveryGroup(certificates.k8s.io) not found")
	}
	var g metav1.APIGroup
	mustUnmarshal(t, b, &g)
	if g.Kind != "APIGroup" || g.PreferredVersion.Version != "v1" || len(g.Versions) != 1 {
		t.Errorf("/apis/certificates.k8s.io = %+v", g)
	}
	b, ok = tb.DiscoveryGroup("autoscaling")
	if !ok {
		t.Fatalf("DiscoveryGroup(autoscaling) not found")
	}
	mustUnmarshal(t, b, &g)
	if g.PreferredVersion.Version != "v2" || len(g.Versions) != 2 || g.Versions[1].Version != "v1" {
		t.Errorf("/apis/autoscaling = %+v", g)
	}
	if _, ok := tb.DiscoveryGroup("events.k8s.io"); !ok {
		t.Errorf("DiscoveryGroup(events.k8s.io) not served")
	}
	if _, ok := tb.DiscoveryGroupVersion("apps", "v1beta1"); ok {
		t.Errorf("DiscoveryGroupVersion(apps, v1beta1) served")
	}

	var agg apidiscoveryv2.APIGroupDiscoveryList
	mustUnmarshal(t, tb.DiscoveryAggregated(false), &agg)
	if agg.Kind != "APIGroupDiscoveryList" || agg.APIVersion != "apidiscovery.k8s.io/v2" || len(agg.Items) != len(groups.Groups) {
		t.Errorf("aggregated /apis: %s %s, %d items, want %d", agg.Kind, agg.APIVersion, len(agg.Items), len(groups.Groups))
	}
	var aggCore apidiscoveryv2.APIGroupDiscoveryList
	mustUnmarshal(t, tb.DiscoveryAggregated(true), &aggCore)
	if len(aggCore.Items) != 1 || aggCore.Items[0].Name != "" || aggCore.Items[0].Versions[0].Version != "v1" ||
		len(aggCore.Items[0].Versions[0].Resources) != countResources(core.APIResources) {
		t.Errorf("aggregated /api = %+v", aggCore.Items)
	}
}

// countResources counts the resources of a list, not their subresources.
func countResources(rs []metav1.APIResource) int {
	n := 0
	for _, r := range rs {
		if !strings.Contains(r.Name, "/") {
			n++
		}
	}
	return n
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("cannot decode %T from %s: %v", v, b, err)
	}
}

// TestDiscoveryKubectl runs kubectl against the documents, when kubectl is on
// PATH.
func TestDiscoveryKubectl(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	for _, aggregated := range []bool{true, false} {
		tb := NewBuiltin()
		c, err := parseCRD(widgets.stored(t))
		if err != nil {
			t.Fatal(err)
		}
		tb.mu.Lock()
		tb.crds[widgets.key()] = c
		tb.rebuildLocked()
		tb.mu.Unlock()
		_, srv := startDiscovery(t, tb, aggregated)
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "config")
		if err := os.WriteFile(kubeconfig, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) string {
			t.Helper()
			cmd := exec.Command(kubectl, append([]string{"--server", srv.URL, "--cache-dir", filepath.Join(dir, "cache")}, args...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
		out := run("api-resources")
		for _, re := range []string{
			`(?m)^configmaps\s+cm\s+v1\s+true\s+ConfigMap$`,
			`(?m)^nodes\s+no\s+v1\s+false\s+Node$`,
			`(?m)^deployments\s+deploy\s+apps/v1\s+true\s+Deployment$`,
			`(?m)^horizontalpodautoscalers\s+hpa\s+autoscaling/v2\s+true\s+HorizontalPodAutoscaler$`,
			`(?m)^customresourcedefinitions\s+crd,crds\s+apiextensions.k8s.io/v1\s+false\s+CustomResourceDefinition$`,
			`(?m)^widgets\s+wd\s+example.com/v2\s+true\s+Widget$`,
		} {
			if !regexp.MustCompile(re).MatchString(out) {
				t.Errorf("aggregated=%v: kubectl api-resources does not match %s:\n%s", aggregated, re, out)
			}
		}
		out = run("api-resources", "--categories=all", "-o", "name")
		if want := "pods\nreplicationcontrollers\nservices\ndaemonsets.apps\ndeployments.apps\nreplicasets.apps\nstatefulsets.apps\nhorizontalpodautoscalers.autoscaling\ncronjobs.batch\njobs.batch\n"; out != want {
			t.Errorf("aggregated=%v: kubectl api-resources --categories=all = %q, want %q", aggregated, out, want)
		}
		if out := run("version", "-o", "json"); !strings.Contains(out, `"gitVersion": "`+GitVersion+`"`) {
			t.Errorf("aggregated=%v: kubectl version does not report %s:\n%s", aggregated, GitVersion, out)
		}
	}
}
