package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestKubectlOpenAPI: kubectl explain (OpenAPI v3) works for built-in
// kinds and for a CRD whose stored value kube-apiserver wrote;
// `kubectl get --raw /openapi/v3/apis/apps/v1` equals kube-apiserver's
// document less its write operations (read-only); kubectl's client-side validation (create --dry-run=client
// --validate, which downloads the OpenAPI documents as Helm's
// `template --validate` does) accepts a Deployment.
func TestKubectlOpenAPI(t *testing.T) {
	needKubectl(t)
	etcd := etcdtest.Start(t)
	b, err := os.ReadFile("../openapi/testdata/kube-apiserver/crds.stored.json")
	if err != nil {
		t.Fatal(err)
	}
	var stored []json.RawMessage
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	for _, s := range stored {
		var m struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if err := json.Unmarshal(s, &m); err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Client.Put(context.Background(), crdKey(m.Metadata.Name), string(s)); err != nil {
			t.Fatal(err)
		}
	}
	p := start(t, "--etcd-servers="+etcd.Endpoint)

	out := mustKubectl(t, p.URL, "explain", "deployments.spec.replicas")
	if !strings.Contains(out, "FIELD: replicas <integer>") || !strings.Contains(out, "Number of desired pods") {
		t.Errorf("kubectl explain deployments.spec.replicas:\n%s", out)
	}
	out = mustKubectl(t, p.URL, "explain", "crontabs.spec.cronSpec")
	if !strings.Contains(out, "FIELD: cronSpec <string>") || !strings.Contains(out, "stable.example.com") {
		t.Errorf("kubectl explain crontabs.spec.cronSpec:\n%s", out)
	}
	out = mustKubectl(t, p.URL, "explain", "widgets.spec")
	if !strings.Contains(out, "size\t<string>") || !strings.Contains(out, "How big.") {
		t.Errorf("kubectl explain widgets.spec:\n%s", out)
	}

	got := mustKubectl(t, p.URL, "get", "--raw", "/openapi/v3/apis/apps/v1")
	// kube-apiserver's document, as internal/testing/kubecapture recorded it.
	gz, err := os.ReadFile("../openapi/data/v3-apis~apps~v1.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	want, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	// lazyapi is read-only (no --upstream-kubeconfig): kube-apiserver's
	// paths with their GET operations only.
	paths := w.(map[string]any)["paths"].(map[string]any)
	for p, item := range paths {
		ops := item.(map[string]any)
		for op := range ops {
			if op != "get" && op != "parameters" {
				delete(ops, op)
			}
		}
		if _, ok := ops["get"]; !ok {
			delete(paths, p)
		}
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("kubectl get --raw /openapi/v3/apis/apps/v1 differs from kube-apiserver's document (GET operations only)")
	}

	dir := t.TempDir()
	manifest := filepath.Join(dir, "deploy.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out = mustKubectl(t, p.URL, "create", "--dry-run=client", "--validate=true", "-f", manifest)
	if !strings.Contains(out, "deployment.apps/web created (dry run)") {
		t.Errorf("kubectl create --dry-run=client --validate=true: %s", out)
	}
}
