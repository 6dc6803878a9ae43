package e2e

import (
	"encoding/json"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// notListedReadOnly are the resources kube-apiserver v1.37 lists that a
// read-only lazyapi does not (it does not answer them): kubectl
// api-resources' NAME.
var notListedReadOnly = []string{"bindings", "componentstatuses", "localsubjectaccessreviews", "subjectaccessreviews", "tokenreviews"}

// TestDiscoveryAgainstKubeAPIServerLive compares lazyapi's discovery and
// OpenAPI with kube-apiserver v1.37.2's on the same etcd, through kubectl:
// read-only, `kubectl api-versions` is identical, `kubectl api-resources
// -o wide` is kube-apiserver's less notListedReadOnly with get, list and
// watch as verbs (create for the self reviews), /openapi/v3 lists
// kube-apiserver's paths less the OpenID ones, and a document's paths are
// kube-apiserver's with a GET operation. Forwarding (--upstream-kubeconfig,
// when the binary has it), both listings are identical.
func TestDiscoveryAgainstKubeAPIServerLive(t *testing.T) {
	script, _ := needKubeAPIServer(t)
	needKubectl(t)
	etcd := etcdtest.Start(t)
	k := startKubeAPIServer(t, script, etcd.Endpoint, "--front-proxy")
	kargs := []string{"--token=" + bench.KubeAPIServerToken, "--insecure-skip-tls-verify"}
	kube := func(args ...string) string { return mustKubectl(t, k.url, append(slices.Clone(kargs), args...)...) }

	// kube-apiserver's aggregator fills /openapi/v3 after readiness.
	var kubeV3 map[string]any
	deadline := time.Now().Add(time.Minute)
	for {
		kubeV3 = openAPIPaths(t, kube("get", "--raw", "/openapi/v3"))
		if _, ok := kubeV3["apis/apiregistration.k8s.io/v1"]; ok && len(kubeV3) >= 49 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second) // polling kube-apiserver's OpenAPI aggregation to a deadline
	}
	kubeVersions := kube("api-versions")
	kubeResources := parseTable(t, kube("api-resources", "-o", "wide"))

	p := start(t, "--etcd-servers="+etcd.Endpoint)
	if got := mustKubectl(t, p.URL, "api-versions"); got != kubeVersions {
		t.Errorf("read-only: kubectl api-versions:\n%s\nkube-apiserver:\n%s", got, kubeVersions)
	}
	mine := parseTable(t, mustKubectl(t, p.URL, "api-resources", "-o", "wide"))
	byName := map[string]map[string]string{}
	for _, r := range mine.rows {
		byName[r["APIVERSION"]+" "+r["NAME"]] = r
	}
	for _, kr := range kubeResources.rows {
		key := kr["APIVERSION"] + " " + kr["NAME"]
		r, ok := byName[key]
		delete(byName, key)
		if slices.Contains(notListedReadOnly, kr["NAME"]) {
			if ok {
				t.Errorf("read-only: api-resources lists %s", key)
			}
			continue
		}
		if !ok {
			t.Errorf("read-only: api-resources lacks %s", key)
			continue
		}
		want := maps.Clone(kr)
		if want["VERBS"] != "create" {
			want["VERBS"] = "get,list,watch"
		}
		if !maps.Equal(r, want) {
			t.Errorf("read-only: api-resources %s = %v, want %v", key, r, want)
		}
	}
	for key := range byName {
		t.Errorf("read-only: api-resources lists %s, kube-apiserver does not", key)
	}

	mineV3 := openAPIPaths(t, mustKubectl(t, p.URL, "get", "--raw", "/openapi/v3"))
	for path := range kubeV3 {
		_, ok := mineV3[path]
		delete(mineV3, path)
		if want := !strings.Contains(path, "openid"); ok != want {
			t.Errorf("read-only: /openapi/v3 lists %s: %v, want %v", path, ok, want)
		}
	}
	for path := range mineV3 {
		t.Errorf("read-only: /openapi/v3 lists %s, kube-apiserver does not", path)
	}
	for _, gv := range []string{"api/v1", "apis/apps/v1", "apis/authorization.k8s.io/v1"} {
		want := readPaths(t, kube("get", "--raw", "/openapi/v3/"+gv))
		got := readPaths(t, mustKubectl(t, p.URL, "get", "--raw", "/openapi/v3/"+gv))
		if !slices.Equal(got, want) {
			t.Errorf("read-only: /openapi/v3/%s has %d paths, want kube-apiserver's %d with a GET (or a self review's POST)", gv, len(got), len(want))
		}
	}

	t.Run("forwarding", func(t *testing.T) {
		help, _ := exec.Command(lazyapiBin, "--help").CombinedOutput()
		if !strings.Contains(string(help), "--upstream-kubeconfig") {
			t.Skip("this lazyapi has no --upstream-kubeconfig (forwarding not built)")
		}
		// /api, /apis and /openapi/v3 are kube-apiserver's, asked as the
		// caller with lazyapi's front-proxy client certificate; the
		// group versions are lazyapi's own.
		kc := t.TempDir() + "/upstream.kubeconfig"
		writeFile(t, kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: kube, cluster: {server: \""+k.url+"\", insecure-skip-tls-verify: true}}]\n"+
			"users: [{name: u, user: {client-certificate: "+k.dir+"/front-proxy/client.crt, client-key: "+k.dir+"/front-proxy/client.key}}]\n"+
			"contexts: [{name: kube, context: {cluster: kube, user: u}}]\ncurrent-context: kube\n"))
		p := start(t, "--etcd-servers="+etcd.Endpoint, "--upstream-kubeconfig="+kc)
		if got := mustKubectl(t, p.URL, "api-versions"); got != kubeVersions {
			t.Errorf("forwarding: kubectl api-versions:\n%s\nkube-apiserver:\n%s", got, kubeVersions)
		}
		if got, want := parseTable(t, mustKubectl(t, p.URL, "api-resources", "-o", "wide")), kubeResources; !slices.EqualFunc(got.rows, want.rows, maps.Equal) {
			t.Errorf("forwarding: kubectl api-resources -o wide differs from kube-apiserver's:\n%v\n%v", got.rows, want.rows)
		}
		got := openAPIPaths(t, mustKubectl(t, p.URL, "get", "--raw", "/openapi/v3"))
		if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(kubeV3))) {
			t.Errorf("forwarding: /openapi/v3 lists %v, kube-apiserver %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(kubeV3)))
		}
	})
}

// openAPIPaths returns the paths of an /openapi/v3 document.
func openAPIPaths(t *testing.T, js string) map[string]any {
	t.Helper()
	var d struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		t.Fatalf("/openapi/v3: %v", err)
	}
	return d.Paths
}

// readPaths returns the sorted paths of an OpenAPI v3 group-version
// document that have a GET operation, or a POST of a self review.
func readPaths(t *testing.T, js string) []string {
	t.Helper()
	var d struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal([]byte(js), &d); err != nil {
		t.Fatal(err)
	}
	var out []string
	for p, ops := range d.Paths {
		_, get := ops["get"]
		_, post := ops["post"]
		if get || post && strings.Contains(p, "/selfsubject") {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
