package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// helmV4 returns Helm v4's path ($LAZYAPI_HELM, /work/bin/helm, as
// deploy/helm/tool builds it, or helm on PATH when it is v4) or skips.
func helmV4(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LAZYAPI_HELM"), "/work/bin/helm"} {
		if _, err := os.Stat(p); p != "" && err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		if out, _ := exec.Command(p, "version", "--short").Output(); strings.HasPrefix(string(out), "v4") {
			return p
		}
	}
	t.Skip("no Helm v4 (LAZYAPI_HELM, /work/bin/helm or PATH): cd deploy/helm/tool && go build -o /work/bin/helm helm.sh/helm/v4/cmd/helm")
	return ""
}

// TestFrontHelmAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1, Helm v4):
// helm install, upgrade, rollback, history, uninstall as alice through
// lazyapi only (release Secrets listed by label from etcd, writes and
// server-side apply forwarded) and the same directly at kube-apiserver,
// each in a namespace of its own: the same release history (revision,
// status, chart, app version, description), the same values at each
// revision, the same objects, and nothing left after uninstall.
func TestFrontHelmAgainstKubeAPIServer(t *testing.T) {
	helmBin := helmV4(t)
	needKubectl(t)
	f := startFront(t)
	chart, err := filepath.Abs("testdata/helmchart")
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		history, values, replicas, afterUninstall string
	}
	run := func(server, ns string) outcome {
		dir := t.TempDir()
		kubeconfig := filepath.Join(dir, "kubeconfig")
		writeFile(t, kubeconfig, fmt.Appendf(nil, "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]\n"+
			"users: [{name: alice, user: {token: %s}}]\ncontexts: [{name: c, context: {cluster: c, user: alice, namespace: %s}}]\ncurrent-context: c\n", server, frontAlice, ns))
		h := func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, helmBin, append(args, "--kubeconfig", kubeconfig, "-n", ns)...)
			cmd.Env = append(os.Environ(), "HOME="+dir, "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
				"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_DATA_HOME="+filepath.Join(dir, "data"))
			out, err := cmd.Output()
			if err != nil {
				var stderr []byte
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = ee.Stderr
				}
				t.Fatalf("helm %s against %s: %v\n%s%s", strings.Join(args, " "), server, err, out, stderr)
			}
			return string(out)
		}
		h("install", "demo", chart, "--create-namespace")
		h("upgrade", "demo", chart, "--set", "replicas=3")
		h("upgrade", "demo", chart, "--set", "replicas=4", "--server-side=false")
		h("rollback", "demo", "2")
		var o outcome
		var hist []map[string]any
		if err := json.Unmarshal([]byte(h("history", "demo", "-o", "json")), &hist); err != nil {
			t.Fatal(err)
		}
		for _, r := range hist {
			delete(r, "updated")
		}
		b, _ := json.Marshal(hist)
		o.history = string(b)
		for rev := 1; rev <= 4; rev++ {
			o.values += h("get", "values", "demo", "--revision", fmt.Sprint(rev), "-o", "json")
		}
		o.replicas, _, _ = kubectlRun(t, f.k.url, frontAlice, nil, "get", "deployment", "-n", ns, "-o", "jsonpath={.items[*].spec.replicas}")
		h("uninstall", "demo")
		o.afterUninstall = h("list", "-o", "json")
		left, _, _ := kubectlRun(t, f.k.url, frontAlice, nil, "get", "configmaps,deployments,services", "-n", ns, "-o", "name")
		o.afterUninstall += left
		left, _, _ = kubectlRun(t, f.k.url, frontAlice, nil, "get", "secrets", "-n", ns, "-l", "owner=helm", "-o", "name")
		o.afterUninstall += left
		return o
	}
	through := run(f.lazyURL, "helm-front")
	direct := run(f.k.url, "helm-direct")
	if through != direct {
		t.Errorf("helm through lazyapi:\n%+v\ndirect at kube-apiserver:\n%+v", through, direct)
	}
	if !strings.Contains(through.history, `"revision":4`) || !strings.Contains(through.history, `"description":"Rollback to 2"`) ||
		through.replicas != "3" || strings.TrimSpace(through.afterUninstall) != "[]" {
		t.Errorf("helm through lazyapi: history %s, replicas %q after rollback to 2, after uninstall %q", through.history, through.replicas, through.afterUninstall)
	}
}
