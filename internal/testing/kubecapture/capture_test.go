package kubecapture

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// repo is the repository root, relative to this package's directory.
const repo = "../../.."

// kube is a running kube-apiserver.
type kube struct {
	t   *testing.T
	url string
	hc  *http.Client
}

func (k *kube) do(method, path, accept string, body []byte) (int, http.Header, []byte) {
	k.t.Helper()
	req, err := http.NewRequest(method, k.url+path, bytes.NewReader(body))
	if err != nil {
		k.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bench.KubeAPIServerToken)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return k.send(req)
}

// send sends req with the bearer token and returns the answer.
func (k *kube) send(req *http.Request) (int, http.Header, []byte) {
	k.t.Helper()
	method, path := req.Method, req.URL.Path
	req.Header.Set("Authorization", "Bearer "+bench.KubeAPIServerToken)
	resp, err := k.hc.Do(req)
	if err != nil {
		k.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		k.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// get returns the body of a 200 answer to GET path.
func (k *kube) get(path, accept string) []byte {
	k.t.Helper()
	code, _, b := k.do("GET", path, accept, nil)
	if code != 200 {
		k.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	return b
}

// v3Paths returns the paths listed by /openapi/v3.
func (k *kube) v3Paths() map[string]string {
	var d struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(k.get("/openapi/v3", "application/json"), &d); err != nil {
		k.t.Fatal(err)
	}
	m := map[string]string{}
	for p, u := range d.Paths {
		m[p] = u.ServerRelativeURL
	}
	return m
}

func TestCapture(t *testing.T) {
	if os.Getenv("LAZYAPI_CAPTURE") != "1" {
		t.Skip("set LAZYAPI_CAPTURE=1 to capture kube-apiserver's documents (needs bench/kube-apiserver.sh build)")
	}
	script, err := filepath.Abs(filepath.Join(repo, "bench", "kube-apiserver.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bench.KubeAPIServerBinary(context.Background(), script); err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	p, err := bench.StartKubeAPIServer(script, etcd.Endpoint, "/registry", t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitReady(context.Background(), "/readyz", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	k := &kube{t: t, url: p.Target.URL, hc: &http.Client{Timeout: time.Minute,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}

	captureOpenAPI(t, k)
	captureDiscovery(t, k)
	captureCRDs(t, k, etcd)
	captureTables(t, k, etcd)
}

// captureOpenAPI writes kube-apiserver's built-in OpenAPI documents (no
// CRDs exist yet) into openapi/data: v2.json.gz and v3-<path>.json.gz per
// path of /openapi/v3 ("/" written as "~").
func captureOpenAPI(t *testing.T, k *kube) {
	dir := filepath.Join(repo, "openapi", "data")
	must(t, os.RemoveAll(dir))
	must(t, os.MkdirAll(dir, 0o755))
	etags := map[string]string{}
	getDoc := func(name, path string) {
		code, h, b := k.do("GET", path, "application/json", nil)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", path, code, b)
		}
		etag := fmt.Sprintf("%X", sha512.Sum512(b))
		if got := h.Get("Etag"); got != `"`+etag+`"` {
			t.Fatalf("GET %s: ETag %s, want the SHA-512 of the body %s", path, got, etag)
		}
		etags[name] = etag
		writeGz(t, filepath.Join(dir, name), b)
	}
	getDoc("v2.json.gz", "/openapi/v2")
	for p, u := range k.v3Paths() {
		getDoc("v3-"+strings.ReplaceAll(p, "/", "~")+".json.gz", u)
	}
	b, err := json.MarshalIndent(etags, "", "\t")
	must(t, err)
	writeFile(t, filepath.Join(dir, "etags.json"), b)
	writeFile(t, filepath.Join(repo, "openapi", "testdata", "kube-apiserver", "v3-discovery.json"), k.get("/openapi/v3", "application/json"))
}

// captureDiscovery writes kube-apiserver's legacy and aggregated discovery
// documents into resource/testdata/kube-apiserver.
func captureDiscovery(t *testing.T, k *kube) {
	dir := filepath.Join(repo, "resource", "testdata", "kube-apiserver")
	must(t, os.RemoveAll(dir))
	must(t, os.MkdirAll(dir, 0o755))
	const agg = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	writeFile(t, filepath.Join(dir, "api.json"), k.get("/api", "application/json"))
	writeFile(t, filepath.Join(dir, "api~v1.json"), k.get("/api/v1", "application/json"))
	writeFile(t, filepath.Join(dir, "aggregated-api.json"), k.get("/api", agg))
	apis := k.get("/apis", "application/json")
	writeFile(t, filepath.Join(dir, "apis.json"), apis)
	writeFile(t, filepath.Join(dir, "aggregated-apis.json"), k.get("/apis", agg))
	var gl struct {
		Groups []struct {
			Name     string `json:"name"`
			Versions []struct {
				GroupVersion string `json:"groupVersion"`
			} `json:"versions"`
		} `json:"groups"`
	}
	must(t, json.Unmarshal(apis, &gl))
	for _, g := range gl.Groups {
		writeFile(t, filepath.Join(dir, "apis~"+g.Name+".json"), k.get("/apis/"+g.Name, "application/json"))
		for _, v := range g.Versions {
			writeFile(t, filepath.Join(dir, "apis~"+strings.ReplaceAll(v.GroupVersion, "/", "~")+".json"),
				k.get("/apis/"+v.GroupVersion, "application/json"))
		}
	}
}

// captureCRDs creates the template and test CRDs, waits until
// kube-apiserver publishes their OpenAPI, and writes the template
// documents into openapi/data and, for the test CRDs, the values
// kube-apiserver stored in etcd and the documents it serves into
// openapi/testdata/kube-apiserver.
func captureCRDs(t *testing.T, k *kube, etcd *etcdtest.Server) {
	v2Before := k.get("/openapi/v2", "application/json")
	crds := map[string]string{
		"template-spaced":  templateCRD(TemplateSpacedKind, TemplateSpacedPlural, "Namespaced"),
		"template-cluster": templateCRD(TemplateClusterKind, TemplateClusterPlrl, "Cluster"),
	}
	for name, c := range testCRDs {
		crds[name] = c
	}
	for name, c := range crds {
		code, _, b := k.do("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "application/json", []byte(c))
		if code != 201 {
			t.Fatalf("create CRD %s: %d %s", name, code, b)
		}
	}
	want := []string{"apis/" + TemplateGroup + "/" + TemplateVersion, "apis/stable.example.com/v1",
		"apis/stable.example.com/v1beta1", "apis/example.com/v1"}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		paths := k.v3Paths()
		missing := slices.DeleteFunc(slices.Clone(want), func(p string) bool { _, ok := paths[p]; return ok })
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver did not publish %q", missing)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The v2 document is rebuilt asynchronously: wait until it names
	// every CRD kind.
	var v2After []byte
	for {
		v2After = k.get("/openapi/v2", "application/json")
		if bytes.Contains(v2After, []byte("com.example.v1.Gadget\"")) && bytes.Contains(v2After, []byte("com.example.stable.v1.CronTab\"")) &&
			bytes.Contains(v2After, []byte("tld.zzdomain.zzgroup.zzversion.Zzclusterkind\"")) && bytes.Contains(v2After, []byte("com.example.v1.Widget\"")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver's /openapi/v2 does not name the CRDs' kinds")
		}
		time.Sleep(200 * time.Millisecond)
	}
	paths := k.v3Paths()
	data := filepath.Join(repo, "openapi", "data")
	writeGz(t, filepath.Join(data, "crd-template-v3.json.gz"), k.get(paths[want[0]], "application/json"))
	writeGz(t, filepath.Join(data, "crd-template-v2.json.gz"), v2Diff(t, v2Before, v2After, "/apis/"+TemplateGroup+"/", "zztld.zzdomain.zzgroup."))

	td := filepath.Join(repo, "openapi", "testdata", "kube-apiserver")
	must(t, os.MkdirAll(td, 0o755))
	for _, p := range want[1:] {
		writeFile(t, filepath.Join(td, "v3-"+strings.ReplaceAll(p, "/", "~")+".json"), k.get(paths[p], "application/json"))
	}
	writeFile(t, filepath.Join(td, "v2-crds.json"), v2Diff(t, v2Before, v2After, "/apis/", "com.example."))
	resp, err := etcd.Client.Get(context.Background(), "/registry/apiextensions.k8s.io/customresourcedefinitions/", clientv3.WithPrefix())
	must(t, err)
	var stored []json.RawMessage
	for _, kv := range resp.Kvs {
		if bytes.Contains(kv.Key, []byte("example.com")) {
			stored = append(stored, json.RawMessage(kv.Value))
		}
	}
	b, err := json.Marshal(stored)
	must(t, err)
	writeFile(t, filepath.Join(td, "crds.stored.json"), b)
}

// v2Diff returns {"paths":..., "definitions":...} with the paths of after
// that start with pathPrefix and the definitions of after that are not in
// before and start with defPrefix.
func v2Diff(t *testing.T, before, after []byte, pathPrefix, defPrefix string) []byte {
	type doc struct {
		Paths       map[string]json.RawMessage `json:"paths"`
		Definitions map[string]json.RawMessage `json:"definitions"`
	}
	var b, a doc
	must(t, json.Unmarshal(before, &b))
	must(t, json.Unmarshal(after, &a))
	out := doc{Paths: map[string]json.RawMessage{}, Definitions: map[string]json.RawMessage{}}
	for p, v := range a.Paths {
		if _, ok := b.Paths[p]; !ok && strings.HasPrefix(p, pathPrefix) {
			out.Paths[p] = v
		}
	}
	for d, v := range a.Definitions {
		if _, ok := b.Definitions[d]; !ok && strings.HasPrefix(d, defPrefix) {
			out.Definitions[d] = v
		}
	}
	j, err := json.Marshal(out)
	must(t, err)
	return j
}

func writeGz(t *testing.T, path string, b []byte) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	must(t, err)
	_, err = zw.Write(b)
	must(t, err)
	must(t, zw.Close())
	writeFile(t, path, buf.Bytes())
}

func writeFile(t *testing.T, path string, b []byte) {
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, b, 0o644))
	t.Logf("wrote %s (%d bytes)", path, len(b))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
