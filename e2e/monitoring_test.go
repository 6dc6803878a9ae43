package e2e

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// deployRBAC returns the ClusterRoles and ClusterRoleBindings of
// deploy/rbac.yaml.
func deployRBAC(t *testing.T) []runtime.Object {
	t.Helper()
	data, err := os.ReadFile("../deploy/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("deploy/rbac.yaml: %v", err)
		}
		switch obj.(type) {
		case *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
			objs = append(objs, obj)
		}
	}
	return objs
}

// monitoringExprs returns the PromQL expressions of deploy/dashboard.json
// (every panel target) and deploy/alerts.yaml (every rule), keyed by where
// they are.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	exprs := map[string]string{}
	data, err := os.ReadFile("../deploy/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("deploy/dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			exprs["dashboard panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				exprs["dashboard variable "+v.Name] = s
			}
		}
	}
	data, err = os.ReadFile("../deploy/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("deploy/alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("deploy/alerts.yaml: rule %q lacks alert, expr, severity or summary", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("deploy/alerts.yaml: rule %q: for %q: %v", r.Alert, r.For, err)
				}
			}
			exprs["alert "+r.Alert] = r.Expr
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("found %d expressions in deploy/dashboard.json and deploy/alerts.yaml", len(exprs))
	}
	return exprs
}

var (
	metricRef   = regexp.MustCompile(`\b((?:lazyapi|go|process)_[a-z0-9_]+)(\{[^}]*\})?`)
	selectorLbl = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	byClause    = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	sampleLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

// scrapeNames returns the metric names of a Prometheus text exposition
// with the label names each carries.
func scrapeNames(text string) map[string]map[string]bool {
	names := map[string]map[string]bool{}
	for _, l := range strings.Split(text, "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		end := strings.IndexAny(l, "{ ")
		if end < 0 {
			continue
		}
		name := l[:end]
		if names[name] == nil {
			names[name] = map[string]bool{}
		}
		if l[end] == '{' {
			if close := strings.LastIndex(l, "}"); close > end {
				for _, m := range sampleLabel.FindAllStringSubmatch(l[end:close], -1) {
					names[name][m[1]] = true
				}
			}
		}
	}
	return names
}

// checkExpr returns what expr names that the scrape lacks: metrics, label
// names in selectors, label names in by clauses.
func checkExpr(expr string, scraped map[string]map[string]bool) []string {
	var missing []string
	union := map[string]bool{"instance": true, "job": true}
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		name, sel := m[1], m[2]
		labels, ok := scraped[name]
		if !ok {
			missing = append(missing, "metric "+name)
			continue
		}
		for l := range labels {
			union[l] = true
		}
		for _, lm := range selectorLbl.FindAllStringSubmatch(sel, -1) {
			if l := lm[1]; l != "instance" && l != "job" && !labels[l] {
				missing = append(missing, "label "+l+" of "+name)
			}
		}
	}
	for _, b := range byClause.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(b[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !union[l] {
				missing = append(missing, "by label "+l)
			}
		}
	}
	return missing
}

// TestMonitoringMetricsExported checks that every metric (and label) the
// Grafana dashboard and the alerting rules in deploy/ name is one a running
// lazyapi exports, and that --profiling serves /debug/pprof/ authenticated
// like /metrics (and nothing without it).
func TestMonitoringMetricsExported(t *testing.T) {
	etcd, _ := seededEtcd(t)
	// deploy/rbac.yaml's roles, stored as kube-apiserver stores them: the
	// Prometheus ServiceAccount may read /metrics and /debug/pprof, the
	// reader ServiceAccount ConfigMaps but not Secrets.
	putRBAC(t, etcd, deployRBAC(t)...)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("s3cret,system:serviceaccount:monitoring:prometheus,uid-1\n"+
		"reader-token,system:serviceaccount:monitoring:lazyapi-reader,uid-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Over TLS: tokens are refused on the plain port, and profiles are
	// served over TLS only.
	ca := testpki.NewCA(t, "serving")
	serving := ca.Server(t)
	securePort := freePort(t)
	start(t, "--etcd-servers="+etcd.Endpoint, "--etcd-preferred-server="+etcd.Endpoint,
		"--token-auth-file="+tokens, "--profiling", "--memory-limit=512Mi", "--secure-port="+strconv.Itoa(securePort),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	secureURL := "https://127.0.0.1:" + strconv.Itoa(securePort)
	get := func(path, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", secureURL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap?debug=1"} {
		if code, _ := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token = %d, want 401 (as /metrics)", path, code)
		}
	}
	if code, body := get("/debug/pprof/", "s3cret"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ with --profiling = %d, want 200 and the profile index", code)
	}
	if code, body := get("/debug/pprof/heap?debug=1", "s3cret"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("GET /debug/pprof/heap?debug=1 = %d, want 200 and a heap profile", code)
	}
	// Traffic that makes the per-request and per-resource series appear:
	// GET, LIST, a watch (the configmaps cache fills), a 404, a 403.
	for path, want := range map[string]int{
		"/api/v1/namespaces/team-a/configmaps/kube-root-ca.crt": 200,
		"/api/v1/configmaps?limit=10":                           200,
		"/api/v1/configmaps?watch=1&timeoutSeconds=1":           200,
		"/api/v1/namespaces/team-a/configmaps/nope":             404,
		"/api/v1/secrets":                                       403,
	} {
		if code, body := get(path, "reader-token"); code != want {
			t.Errorf("reader (deploy/rbac.yaml) GET %s = %d, want %d: %.200s", path, code, want, body)
		}
	}
	if code, _ := get("/metrics", "reader-token"); code != 403 {
		t.Errorf("reader GET /metrics = %d, want 403 (only the metrics role may)", code)
	}

	exprs := monitoringExprs(t)
	var missing map[string][]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, text := get("/metrics", "s3cret")
		if code != 200 {
			t.Fatalf("GET /metrics = %d", code)
		}
		scraped := scrapeNames(text)
		missing = map[string][]string{}
		for where, e := range exprs {
			if m := checkExpr(e, scraped); len(m) > 0 {
				missing[where] = m
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		// The cache's series appear once its first list is done: re-watch.
		get("/api/v1/configmaps?watch=1&timeoutSeconds=1", "reader-token")
	}
	var where []string
	for w := range missing {
		where = append(where, w)
	}
	sort.Strings(where)
	for _, w := range where {
		t.Errorf("%s names what lazyapi does not export: %s", w, strings.Join(missing[w], ", "))
	}
	t.Logf("%d expressions checked against a scrape", len(exprs))

	// Without --profiling there is no /debug/pprof.
	q := start(t, "--etcd-servers="+etcd.Endpoint, "--token-auth-file="+tokens, "--plain-port-tokens")
	req, _ := http.NewRequest("GET", q.URL+"/debug/pprof/", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/ without --profiling = %d, want 404", resp.StatusCode)
	}
}

// TestCheckExpr checks the checker: a metric, a selector label or a by
// label the scrape lacks is reported.
func TestCheckExpr(t *testing.T) {
	scraped := scrapeNames("# HELP x\nlazyapi_a_total{verb=\"GET\",code=\"200\"} 1\nlazyapi_b_bucket{le=\"0.1\"} 2\nprocess_resident_memory_bytes 3\n")
	for _, tc := range []struct {
		expr string
		want string
	}{
		{`sum by (verb) (rate(lazyapi_a_total{code=~"5.."}[5m]))`, ""},
		{`histogram_quantile(0.9, sum by (le) (rate(lazyapi_b_bucket[5m])))`, ""},
		{`process_resident_memory_bytes / go_memlimit_bytes`, "metric go_memlimit_bytes"},
		{`lazyapi_a_total{resource="x"}`, "label resource of lazyapi_a_total"},
		{`sum by (instance, reason) (lazyapi_a_total)`, "by label reason"},
	} {
		if got := strings.Join(checkExpr(tc.expr, scraped), ", "); got != tc.want {
			t.Errorf("checkExpr(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}
