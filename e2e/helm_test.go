package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// helm runs helm against server with a kubeconfig of its own; it skips the
// test when helm is not on PATH.
func helm(t *testing.T, server string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not on PATH: skipping the Helm checks (go install helm.sh/helm/v3/cmd/helm@v3.21.4 builds it from the module proxy)")
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: lazyapi, cluster: {server: %q}}]\n"+
		"contexts: [{name: lazyapi, context: {cluster: lazyapi, user: nobody, namespace: default}}]\ncurrent-context: lazyapi\nusers: [{name: nobody, user: {}}]\n", server)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(args, "--kubeconfig", kubeconfig)...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelmValidate: Helm's client-side validation, which downloads the
// cluster's OpenAPI documents ("failed to download openapi" without them),
// passes against lazyapi: `helm template --validate` and `helm upgrade
// --install --dry-run=client`.
func TestHelmValidate(t *testing.T) {
	etcd := etcdtest.Start(t)
	p := start(t, "--etcd-servers="+etcd.Endpoint)
	chart, err := filepath.Abs("testdata/helmchart")
	if err != nil {
		t.Fatal(err)
	}
	out, err := helm(t, p.URL, "template", "demo", chart, "--validate")
	if err != nil || !strings.Contains(out, "kind: Deployment") {
		t.Errorf("helm template --validate: %v\n%s", err, out)
	}
	out, err = helm(t, p.URL, "upgrade", "--install", "demo", chart, "--dry-run=client", "--namespace", "default")
	if err != nil || !strings.Contains(out, "STATUS: pending-install") {
		t.Errorf("helm upgrade --install --dry-run=client: %v\n%s", err, out)
	}
}
