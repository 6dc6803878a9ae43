package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/internal/demo"
)

// table is kubectl's human-readable output split into header and rows.
type table struct {
	header []string
	rows   []map[string]string
}

// parseTable splits kubectl's default output. Columns are aligned (tabwriter),
// so each cell starts where its header starts; a cell may be empty.
func parseTable(t *testing.T, out string) table {
	t.Helper()
	var (
		tb     table
		starts []int
	)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		if tb.header == nil {
			for i := 0; i < len(line); {
				for i < len(line) && line[i] == ' ' {
					i++
				}
				if i == len(line) {
					break
				}
				j := strings.Index(line[i:], "  ")
				if j < 0 {
					j = len(line) - i
				}
				starts = append(starts, i)
				tb.header = append(tb.header, line[i:i+j])
				i += j
			}
			continue
		}
		row := map[string]string{}
		for k, h := range tb.header {
			from, to := starts[k], len(line)
			if k+1 < len(starts) {
				to = min(starts[k+1], len(line))
			}
			if from > len(line) {
				from = len(line)
			}
			row[h] = strings.TrimSpace(line[from:to])
		}
		if row[tb.header[0]] == "" {
			t.Fatalf("row %q does not line up with header %q", line, tb.header)
		}
		tb.rows = append(tb.rows, row)
	}
	return tb
}

func (tb table) names() []string {
	var out []string
	for _, r := range tb.rows {
		out = append(out, r["NAME"])
	}
	slices.Sort(out)
	return out
}

// TestKubectl runs kubectl against the lazyapi binary serving etcd seeded
// with the demo objects, and checks its output against the stored objects.
func TestKubectl(t *testing.T) {
	needKubectl(t)
	etcd, objs := seededEtcd(t)
	p := start(t, "--etcd-servers="+etcd.Endpoint)
	srv := p.URL
	cms := configMaps(t, objs)
	revs := modRevisions(t, etcd.Client, "/registry/")

	t.Run("get configmaps -A", func(t *testing.T) {
		tb := parseTable(t, mustKubectl(t, srv, "get", "configmaps", "-A"))
		if want := []string{"NAMESPACE", "NAME", "DATA", "AGE"}; !slices.Equal(tb.header, want) {
			t.Errorf("header = %q, want %q", tb.header, want)
		}
		if len(tb.rows) != len(cms) {
			t.Errorf("%d rows, want %d ConfigMaps", len(tb.rows), len(cms))
		}
		for _, r := range tb.rows {
			cm, ok := cms[r["NAMESPACE"]+"/"+r["NAME"]]
			if !ok {
				t.Errorf("unexpected row %v", r)
				continue
			}
			if want := strconv.Itoa(len(cm.Data) + len(cm.BinaryData)); r["DATA"] != want {
				t.Errorf("%s/%s DATA = %s, want %s", cm.Namespace, cm.Name, r["DATA"], want)
			}
		}
	})

	t.Run("get cm -n team-a -o yaml", func(t *testing.T) {
		var list struct {
			Kind  string             `json:"kind"`
			Items []corev1.ConfigMap `json:"items"`
		}
		if err := yaml.Unmarshal([]byte(mustKubectl(t, srv, "get", "cm", "-n", "team-a", "-o", "yaml")), &list); err != nil {
			t.Fatal(err)
		}
		want := demo.Count(objs, "configmaps", "team-a")
		if len(list.Items) != want {
			t.Fatalf("%d items, want %d", len(list.Items), want)
		}
		for _, got := range list.Items {
			// kubectl hides managedFields in -o yaml.
			checkConfigMap(t, &got, cms, revs, false)
		}
	})

	t.Run("get cm -l", func(t *testing.T) {
		sel := map[string]string{"env": "prod", "app": "svc-03"}
		tb := parseTable(t, mustKubectl(t, srv, "get", "cm", "-A", "-l", "env=prod,app=svc-03"))
		want := matching(objs, "configmaps", "", sel)
		if len(tb.rows) != len(want) || len(want) == 0 {
			t.Fatalf("%d rows for env=prod,app=svc-03, want %d", len(tb.rows), len(want))
		}
		for _, r := range tb.rows {
			cm := cms[r["NAMESPACE"]+"/"+r["NAME"]]
			if cm == nil || cm.Labels["env"] != "prod" || cm.Labels["app"] != "svc-03" {
				t.Errorf("row %v does not match the selector", r)
			}
		}
		// Set-based and negative selectors.
		tb = parseTable(t, mustKubectl(t, srv, "get", "cm", "-n", "team-b", "-l", "env in (staging,dev),app!=svc-01"))
		n := 0
		for _, o := range objs {
			if o.Resource == "configmaps" && o.Namespace == "team-b" && (o.Labels["env"] == "staging" || o.Labels["env"] == "dev") && o.Labels["app"] != "svc-01" {
				n++
			}
		}
		if len(tb.rows) != n {
			t.Errorf("%d rows for env in (staging,dev),app!=svc-01, want %d", len(tb.rows), n)
		}
	})

	t.Run("get cm --chunk-size=50", func(t *testing.T) {
		out, stderr, err := kubectl(t, srv, "get", "cm", "-A", "--chunk-size=50", "-v=6")
		if err != nil {
			t.Fatal(err)
		}
		tb := parseTable(t, out)
		if len(tb.rows) != len(cms) {
			t.Errorf("%d rows, want %d", len(tb.rows), len(cms))
		}
		seen := map[string]bool{}
		for _, r := range tb.rows {
			seen[r["NAMESPACE"]+"/"+r["NAME"]] = true
		}
		if len(seen) != len(cms) {
			t.Errorf("paginated list has duplicates or gaps: %d distinct ConfigMaps, want %d", len(seen), len(cms))
		}
		if pages := strings.Count(stderr, "limit=50"); pages < len(cms)/50 {
			t.Errorf("kubectl made %d requests with limit=50, want at least %d", pages, len(cms)/50)
		}
		if !strings.Contains(stderr, "continue=") {
			t.Errorf("kubectl never sent a continue token:\n%s", stderr)
		}
	})

	t.Run("api-resources", func(t *testing.T) {
		tb := parseTable(t, mustKubectl(t, srv, "api-resources"))
		want := map[string]string{ // name -> APIVERSION NAMESPACED KIND
			"configmaps":  "v1 true ConfigMap",
			"namespaces":  "v1 false Namespace",
			"nodes":       "v1 false Node",
			"pods":        "v1 true Pod",
			"deployments": "apps/v1 true Deployment",
			"replicasets": "apps/v1 true ReplicaSet",
			// Stored as v1beta1, served as v1 like kube-apiserver.
			"customresourcedefinitions": "apiextensions.k8s.io/v1 false CustomResourceDefinition",
			demo.CRDPlural:              demo.CRDGroup + "/" + demo.CRDVersion + " true " + demo.CRDKind,
		}
		got := map[string]string{}
		for _, r := range tb.rows {
			got[r["NAME"]] = r["APIVERSION"] + " " + r["NAMESPACED"] + " " + r["KIND"]
		}
		for name, w := range want {
			if got[name] != w {
				t.Errorf("api-resources %s = %q, want %q", name, got[name], w)
			}
		}
	})

	t.Run("get --raw", func(t *testing.T) {
		o := matching(objs, "configmaps", "team-a", nil)[0]
		raw := mustKubectl(t, srv, "get", "--raw", "/api/v1/namespaces/team-a/configmaps/"+o.Name)
		var got corev1.ConfigMap
		if err := json.Unmarshal([]byte(raw), &got); err != nil {
			t.Fatalf("--raw output is not a ConfigMap: %v\n%s", err, raw)
		}
		if got.APIVersion != "v1" || got.Kind != "ConfigMap" {
			t.Errorf("apiVersion, kind = %q, %q; want v1, ConfigMap", got.APIVersion, got.Kind)
		}
		checkConfigMap(t, &got, cms, revs, true)
	})

	t.Run("get deploy,rs,po", func(t *testing.T) {
		out := mustKubectl(t, srv, "get", "deploy,rs,po", "-n", demo.AppNamespace)
		// Three tables separated by blank lines.
		parts := strings.Split(strings.TrimSpace(out), "\n\n")
		if len(parts) != 3 {
			t.Fatalf("want tables of deployments, replicasets and pods:\n%s", out)
		}
		deploys, rss, pods := parseTable(t, parts[0]), parseTable(t, parts[1]), parseTable(t, parts[2])
		if len(deploys.rows) != 1 || deploys.rows[0]["NAME"] != "deployment.apps/"+demo.Deployment || deploys.rows[0]["READY"] != "3/3" ||
			deploys.rows[0]["UP-TO-DATE"] != "3" || deploys.rows[0]["AVAILABLE"] != "3" {
			t.Errorf("deployments table = %+v", deploys)
		}
		if len(rss.rows) != 1 || rss.rows[0]["NAME"] != "replicaset.apps/"+demo.ReplicaSet || rss.rows[0]["DESIRED"] != "3" ||
			rss.rows[0]["CURRENT"] != "3" || rss.rows[0]["READY"] != "3" {
			t.Errorf("replicasets table = %+v, want NAME DESIRED CURRENT READY AGE with 3 3 3", rss)
		}
		var wantPods []string
		for _, n := range demo.Names(objs, "pods", demo.AppNamespace) {
			wantPods = append(wantPods, "pod/"+n)
		}
		if got := pods.names(); !slices.Equal(got, wantPods) {
			t.Errorf("pods = %q, want %q", got, wantPods)
		}
		for _, r := range pods.rows {
			if r["READY"] != "1/1" || r["STATUS"] != "Running" || r["RESTARTS"] != "0" {
				t.Errorf("pod row %v, want READY 1/1, STATUS Running, RESTARTS 0", r)
			}
		}
	})

	t.Run("get svc,secrets", func(t *testing.T) {
		svcs := parseTable(t, mustKubectl(t, srv, "get", "svc", "-A"))
		got := map[string]string{}
		for _, r := range svcs.rows {
			got[r["NAMESPACE"]+"/"+r["NAME"]] = r["TYPE"] + " " + r["CLUSTER-IP"] + " " + r["PORT(S)"]
		}
		if want := map[string]string{"default/kubernetes": "ClusterIP 10.96.0.1 443/TCP", demo.AppNamespace + "/web": "ClusterIP 10.96.12.34 80/TCP"}; !maps.Equal(got, want) {
			t.Errorf("services = %v, want %v", got, want)
		}
		secrets := parseTable(t, mustKubectl(t, srv, "get", "secrets", "-n", demo.AppNamespace))
		for _, r := range secrets.rows {
			if r["NAME"] == "web-tls" && (r["TYPE"] != "kubernetes.io/tls" || r["DATA"] != "2") {
				t.Errorf("secret row %v, want TYPE kubernetes.io/tls DATA 2", r)
			}
		}
		if got, want := secrets.names(), demo.Names(objs, "secrets", demo.AppNamespace); !slices.Equal(got, want) {
			t.Errorf("secrets = %q, want %q", got, want)
		}
	})

	t.Run("get crontabs", func(t *testing.T) {
		tb := parseTable(t, mustKubectl(t, srv, "get", demo.CRDPlural, "-n", demo.AppNamespace))
		if want := []string{"NAME", "SPEC", "REPLICAS", "AGE"}; !slices.Equal(tb.header, want) {
			t.Fatalf("header = %q, want the CRD's printer columns %q", tb.header, want)
		}
		if got, want := tb.names(), demo.Names(objs, demo.CRDPlural, demo.AppNamespace); !slices.Equal(got, want) {
			t.Errorf("names = %q, want %q", got, want)
		}
		for _, r := range tb.rows {
			var i int
			fmt.Sscanf(r["NAME"], "backup-%d", &i)
			if want := strconv.Itoa(i%3 + 1); r["REPLICAS"] != want {
				t.Errorf("%s REPLICAS = %q, want %q", r["NAME"], r["REPLICAS"], want)
			}
			if r["SPEC"] == "" || !strings.Contains(r["SPEC"], "*") {
				t.Errorf("%s SPEC = %q, want a cron spec", r["NAME"], r["SPEC"])
			}
		}
		// Short name and -o json of a custom resource keep kind/apiVersion.
		var list struct {
			Items []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(mustKubectl(t, srv, "get", "ct", "-n", demo.AppNamespace, "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != demo.CRDCount || list.Items[0].APIVersion != demo.CRDGroup+"/"+demo.CRDVersion || list.Items[0].Kind != demo.CRDKind {
			t.Errorf("get ct -o json: %d items, first %+v", len(list.Items), list.Items)
		}
	})

	t.Run("get nodes and namespaces", func(t *testing.T) {
		nodes := parseTable(t, mustKubectl(t, srv, "get", "nodes"))
		if len(nodes.rows) != 1 || nodes.rows[0]["NAME"] != demo.NodeName || nodes.rows[0]["STATUS"] != "Ready" || nodes.rows[0]["VERSION"] != "v1.37.2" {
			t.Errorf("nodes = %+v", nodes.rows)
		}
		nss := parseTable(t, mustKubectl(t, srv, "get", "namespaces"))
		if got, want := nss.names(), slices.Sorted(slices.Values(demo.Namespaces)); !slices.Equal(got, want) {
			t.Errorf("namespaces = %q, want %q", got, want)
		}
		for _, r := range nss.rows {
			if r["STATUS"] != "Active" {
				t.Errorf("namespace %v, want Active", r)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, stderr, err := kubectl(t, srv, "get", "cm", "no-such-cm", "-n", "team-a")
		if err == nil || !strings.Contains(stderr, `configmaps "no-such-cm" not found`) {
			t.Errorf("get missing cm: err=%v stderr=%q, want NotFound", err, stderr)
		}
		out, stderr, err := kubectl(t, srv, "get", "cm", "-n", "no-such-ns")
		if err != nil || strings.TrimSpace(out) != "" || !strings.Contains(stderr, "No resources found") {
			t.Errorf("get cm in a missing namespace: err=%v out=%q stderr=%q, want an empty list", err, out, stderr)
		}
		name := matching(objs, "configmaps", "team-c", nil)[0].Name
		_, stderr, err = kubectl(t, srv, "delete", "cm", name, "-n", "team-c")
		if err == nil || !strings.Contains(stderr, "MethodNotAllowed") {
			t.Errorf("delete: err=%v stderr=%q, want MethodNotAllowed", err, stderr)
		}
	})
}

// checkConfigMap compares a ConfigMap served by lazyapi with the stored one
// decoded by apimachinery, and its resourceVersion with etcd's mod revision.
// managedFields are compared only when withManaged is set.
func checkConfigMap(t *testing.T, got *corev1.ConfigMap, cms map[string]*corev1.ConfigMap, revs map[string]string, withManaged bool) {
	t.Helper()
	want, ok := cms[got.Namespace+"/"+got.Name]
	if !ok {
		t.Errorf("unexpected ConfigMap %s/%s", got.Namespace, got.Name)
		return
	}
	if !maps.Equal(got.Data, want.Data) || !maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Annotations, want.Annotations) ||
		got.UID != want.UID || !got.CreationTimestamp.Equal(&want.CreationTimestamp) ||
		(withManaged && len(got.ManagedFields) != len(want.ManagedFields)) {
		t.Errorf("ConfigMap %s/%s differs from the stored object:\n got %+v\nwant %+v", got.Namespace, got.Name, got.ObjectMeta, want.ObjectMeta)
	}
	key := "/registry/configmaps/" + got.Namespace + "/" + got.Name
	if got.ResourceVersion != revs[key] {
		t.Errorf("%s resourceVersion = %q, want the mod revision %q", key, got.ResourceVersion, revs[key])
	}
}
