package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// frontEnv is kube-apiserver v1.37.2 with --requestheader-* and
// --authorization-mode=Node,RBAC as kubeadm sets them (bench/kube-
// apiserver.sh --front-proxy) and lazyapi in front of it on the same etcd
// (--upstream-kubeconfig with the front-proxy client certificate, RBAC
// from etcd, the same token file), both serving HTTPS on loopback.
type frontEnv struct {
	k       *kubeAPIServer
	lazy    *process
	lazyURL string
	// tokens: the admin's (system:masters, kube-apiserver.sh's), alice's
	// (system:masters too: she may impersonate) and bob's (group dev,
	// granted edit in the test's namespaces by the test).
	hc *http.Client
}

const (
	frontAlice = "tok-alice"
	frontBob   = "tok-bob"
)

// startFront starts the pair; extra are lazyapi flags.
func startFront(t *testing.T, extra ...string) *frontEnv {
	t.Helper()
	return startFrontVia(t, nil, extra...)
}

// startFrontVia is startFront with lazyapi reaching etcd at via(etcd's
// endpoint) when via is not nil (a proxy the test controls), while
// kube-apiserver reaches etcd directly.
func startFrontVia(t *testing.T, via func(endpoint string) string, extra ...string) *frontEnv {
	t.Helper()
	script, _ := needKubeAPIServer(t)
	etcd := etcdtest.Start(t)
	lazyEtcd := etcd.Endpoint
	if via != nil {
		lazyEtcd = via(etcd.Endpoint)
	}
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	writeFile(t, tokens, []byte(frontAlice+",alice,uid-alice,\"system:masters,dev\"\n"+frontBob+",bob,uid-bob,\"dev\"\n"))
	k := startKubeAPIServer(t, script, etcd.Endpoint, "--front-proxy", "--authorization-mode", "Node,RBAC", "--extra-tokens", tokens)
	kc := filepath.Join(t.TempDir(), "upstream.kubeconfig")
	writeFile(t, kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: kube, cluster: {server: \""+k.url+"\", insecure-skip-tls-verify: true}}]\n"+
		"users: [{name: u, user: {client-certificate: "+k.dir+"/front-proxy/client.crt, client-key: "+k.dir+"/front-proxy/client.key}}]\n"+
		"contexts: [{name: kube, context: {cluster: kube, user: u}}]\ncurrent-context: kube\n"))
	port, err := bench.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	// kube-apiserver's self-signed serving certificate serves lazyapi too
	// (clients skip verification on loopback).
	args := append([]string{"--etcd-servers=" + lazyEtcd, "--upstream-kubeconfig=" + kc, "--token-auth-file=" + tokens,
		"--authorization-mode=RBAC", "--port=0", "--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + k.dir + "/certs/apiserver.crt", "--tls-private-key-file=" + k.dir + "/certs/apiserver.key"}, extra...)
	p := start(t, args...)
	return &frontEnv{k: k, lazy: p, lazyURL: "https://127.0.0.1:" + strconv.Itoa(port),
		hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} // loopback test servers
}

// frontAnswer is what lazyapi answered to frontEnv.do.
type frontAnswer struct {
	code       int
	retryAfter string
	body       string
	took       time.Duration
}

// do sends method path with body (JSON) to lazyapi as alice and returns
// the answer and how long it took.
func (f *frontEnv) do(t *testing.T, method, path, body string) frontAnswer {
	t.Helper()
	req, _ := http.NewRequest(method, f.lazyURL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+frontAlice)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := f.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return frontAnswer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b), time.Since(start)}
}

// kubectlRun is kubectl against server with token and env added to the
// environment; it returns stdout, stderr and the exit code.
func kubectlRun(t *testing.T, server, token string, env []string, args ...string) (string, string, int) {
	t.Helper()
	return kubectlRunIn(t, server, token, "", env, args...)
}

// kubectlRunIn is kubectlRun with stdin as kubectl's standard input.
func kubectlRunIn(t *testing.T, server, token, stdin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	path := needKubectl(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	writeFile(t, kubeconfig, []byte("apiVersion: v1\nkind: Config\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"--kubeconfig", kubeconfig, "--server", server, "--insecure-skip-tls-verify", "--token", token,
		"--cache-dir", filepath.Join(dir, "cache")}, args...)
	cmd := exec.CommandContext(ctx, path, full...)
	cmd.Env = append(append(os.Environ(), "HOME="+dir, "KUBECONFIG="+kubeconfig), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("kubectl %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// volatile matches what differs between two servers' answers to the same
// commands in two namespaces made the same way: resource versions, uids,
// timestamps (creation, managedFields, rollout restart's restartedAt,
// tables' AGE).
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`resourceVersion: "\d+"`), `resourceVersion: "RV"`},
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "UID"},
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "TIME"},
	{regexp.MustCompile(`(?m) +\d+[smhd](\d+[smh])?$`), " AGE"}, // a table's last column
}

// normalise makes out comparable across servers: ns (the namespace of the
// run) reads NS and volatile values read their kind.
func normalise(out, ns string) string {
	if ns != "" {
		out = strings.ReplaceAll(out, ns, "NS")
	}
	for _, v := range volatile {
		out = v.re.ReplaceAllString(out, v.with)
	}
	return out
}

// kubectlScript is the "must show" list of issue 25 as kubectl commands in
// namespace NS, each followed by a read of what it wrote: apply
// (client-side, twice, and --server-side, and a server-side conflict),
// create, edit (KUBE_EDITOR), label, annotate, scale, rollout restart,
// patch of each kubectl type, dry-run, delete, errors (AlreadyExists,
// NotFound), auth can-i --as.
var kubectlScript = [][]string{
	{"create", "namespace", "NS"},
	{"create", "rolebinding", "bob-edit", "--clusterrole=edit", "--user=bob", "-n", "NS"},
	{"create", "configmap", "cm1", "-n", "NS", "--from-literal=a=b"},
	{"get", "configmap", "cm1", "-n", "NS", "-o", "yaml"},
	{"apply", "-n", "NS", "-f", "MANIFESTS/cm2.yaml"},
	{"apply", "-n", "NS", "-f", "MANIFESTS/cm2b.yaml"},
	{"get", "configmap", "cm2", "-n", "NS", "-o", "yaml"},
	{"apply", "--server-side", "-n", "NS", "-f", "MANIFESTS/cm3.yaml"},
	{"apply", "--server-side", "--field-manager=other", "-n", "NS", "-f", "MANIFESTS/cm3b.yaml"},
	{"apply", "--server-side", "--field-manager=other", "--force-conflicts", "-n", "NS", "-f", "MANIFESTS/cm3b.yaml"},
	{"get", "configmap", "cm3", "-n", "NS", "-o", "yaml", "--show-managed-fields"},
	{"create", "deployment", "d1", "--image=registry.k8s.io/pause:3.10", "-n", "NS"},
	{"edit", "configmap", "cm1", "-n", "NS"},
	{"get", "configmap", "cm1", "-n", "NS", "-o", "yaml"},
	{"label", "configmap", "cm1", "-n", "NS", "team=a"},
	{"label", "configmap", "cm1", "-n", "NS", "team=b"},
	{"label", "configmap", "cm1", "-n", "NS", "team=b", "--overwrite"},
	{"annotate", "configmap", "cm1", "-n", "NS", "note=x"},
	{"get", "configmap", "cm1", "-n", "NS", "-o", "yaml"},
	{"scale", "deployment", "d1", "-n", "NS", "--replicas=3"},
	{"scale", "deployment", "d1", "-n", "NS", "--replicas=2", "--current-replicas=1"},
	{"rollout", "restart", "deployment", "d1", "-n", "NS"},
	{"get", "deployment", "d1", "-n", "NS", "-o", "yaml"},
	{"patch", "configmap", "cm1", "-n", "NS", "--type=json", "-p", `[{"op":"add","path":"/data/j","value":"1"}]`},
	{"patch", "configmap", "cm1", "-n", "NS", "--type=json", "-p", `[{"op":"test","path":"/data/j","value":"2"}]`},
	{"patch", "configmap", "cm1", "-n", "NS", "--type=merge", "-p", `{"data":{"m":"2"}}`},
	{"patch", "deployment", "d1", "-n", "NS", "--type=strategic", "-p", `{"spec":{"template":{"spec":{"containers":[{"name":"pause","image":"registry.k8s.io/pause:3.9"}]}}}}`},
	{"patch", "configmap", "cm1", "-n", "NS", "--type=merge", "--dry-run=server", "-o", "yaml", "-p", `{"data":{"dry":"run"}}`},
	{"get", "configmap", "cm1", "-n", "NS", "-o", "yaml"},
	{"get", "deployment", "d1", "-n", "NS", "-o", "yaml"},
	{"create", "configmap", "cm1", "-n", "NS"},
	{"create", "configmap", "cm9", "-n", "NS", "--dry-run=server", "-o", "yaml"},
	{"get", "configmap", "cm9", "-n", "NS"},
	{"delete", "configmap", "cm2", "-n", "NS"},
	{"get", "configmap", "cm2", "-n", "NS"},
	{"delete", "configmap", "nope", "-n", "NS"},
	{"auth", "can-i", "create", "configmaps", "-n", "NS", "--as=bob"},
	{"auth", "can-i", "create", "pods", "-n", "kube-system", "--as=bob"},
	{"auth", "can-i", "get", "secrets", "-n", "NS", "--as=carol", "--as-group=dev"},
	{"auth", "can-i", "--list", "-n", "NS", "--as=bob"},
	{"get", "configmaps", "-n", "NS"},
	{"delete", "deployment", "d1", "-n", "NS"},
}

// runKubectlScript runs kubectlScript through server in namespace ns as
// alice and returns each command's normalised stdout, stderr and exit code.
func runKubectlScript(t *testing.T, server, ns, manifests string, env []string) []string {
	t.Helper()
	var out []string
	for _, cmd := range kubectlScript {
		args := make([]string, len(cmd))
		for i, a := range cmd {
			args[i] = strings.ReplaceAll(strings.ReplaceAll(a, "NS", ns), "MANIFESTS", manifests)
		}
		stdout, stderr, code := kubectlRun(t, server, frontAlice, env, args...)
		out = append(out, "$ kubectl "+strings.Join(cmd, " ")+"\n"+normalise(stdout, ns)+"stderr: "+normalise(stderr, ns)+"exit "+strconv.Itoa(code))
	}
	return out
}

// TestForwardAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1): the kubectl
// commands of issue 25's "must show" through lazyapi only answer as the
// same commands sent to kube-apiserver directly (in a namespace of their
// own, resource versions, uids and timestamps normalised), and
// kube-apiserver's audit log names the real user of every write lazyapi
// forwarded (never its front-proxy certificate's name) and has as many
// writes, verb by verb, as the direct run.
func TestForwardAgainstKubeAPIServer(t *testing.T) {
	needKubectl(t)
	f := startFront(t)
	manifests := t.TempDir()
	writeFile(t, manifests+"/cm2.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm2}\ndata: {x: y}\n"))
	writeFile(t, manifests+"/cm2b.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm2, labels: {l: v}}\ndata: {x: z}\n"))
	writeFile(t, manifests+"/cm3.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm3}\ndata: {s: one}\n"))
	writeFile(t, manifests+"/cm3b.yaml", []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm3}\ndata: {s: two}\n"))
	editor := manifests + "/editor.sh"
	if err := os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/^  a: b$/  a: edited/' \"$1\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBE_EDITOR=" + editor}

	const direct, fronted = "front-via-kubeapi", "front-via-lazyapi"
	want := runKubectlScript(t, f.k.url, direct, manifests, env)
	got := runKubectlScript(t, f.lazyURL, fronted, manifests, env)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("through lazyapi:\n%s\n\ndirect to kube-apiserver:\n%s", got[i], want[i])
		}
	}

	// kube-apiserver's audit log: every write in the fronted namespace is
	// alice's (bob's role binding is hers too), as in the direct run.
	writes := map[string]map[string]int{direct: {}, fronted: {}}
	audit, err := os.ReadFile(f.k.dir + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(audit)) {
		if strings.Contains(line, "front-proxy-client") {
			t.Errorf("audit event names the front-proxy certificate: %s", line)
		}
		var ev struct {
			Stage     string
			Verb      string
			User      struct{ Username, UID string }
			SourceIPs []string
			ObjectRef struct{ Namespace, Name, Resource string }
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit log: %v: %s", err, line)
		}
		ns := ev.ObjectRef.Namespace
		if ev.ObjectRef.Resource == "namespaces" {
			ns = ev.ObjectRef.Name
		}
		if ev.Stage != "ResponseComplete" || writes[ns] == nil {
			continue
		}
		switch ev.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			continue
		}
		writes[ns][ev.Verb]++
		if ns == fronted && (ev.User.Username != "alice" || ev.User.UID != "uid-alice" || len(ev.SourceIPs) == 0 || ev.SourceIPs[0] != "127.0.0.1") {
			t.Errorf("audit event of a forwarded write not alice's from 127.0.0.1: %s", line)
		}
	}
	if len(writes[fronted]) == 0 || !equalCounts(writes[fronted], writes[direct]) {
		t.Errorf("audited writes by verb: through lazyapi %v, direct %v", writes[fronted], writes[direct])
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// rawAnswer is a raw request's answer: code and body, normalised. Its
// User-Agent is agent (to find its audit events).
func (f *frontEnv) rawAnswer(t *testing.T, server, agent, method, path, token string, header http.Header, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, server+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", agent)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var compact bytes.Buffer
	if json.Compact(&compact, b) == nil {
		b = compact.Bytes()
	}
	return strconv.Itoa(resp.StatusCode) + " " + normalise(string(b), "")
}

// TestForwardIdentityAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1): a
// caller's own front-proxy headers (X-Remote-User, -Group, -Uid,
// -Extra-*), impersonation without the right, and anonymous requests with
// forged identity headers get from lazyapi what kube-apiserver gives them
// directly (code and Status), and kube-apiserver audits the forwarded ones
// as it audits them sent directly (user, impersonated user, verb, code):
// never another identity; reads lazyapi serves itself answer as
// kube-apiserver 1.37's constrained impersonation does.
func TestForwardIdentityAgainstKubeAPIServer(t *testing.T) {
	f := startFront(t, "--anonymous-auth=true") // kube-apiserver's default
	forged := http.Header{
		"X-Remote-User":        {"lazybench"},
		"X-Remote-Group":       {"system:masters"},
		"X-Remote-Uid":         {"lazybench-uid"},
		"X-Remote-Extra-Scope": {"all"},
	}
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"forged"}}`
	cases := []struct {
		name, method, path, token string
		header                    http.Header
		body                      string
	}{
		{"bob with X-Remote-* writes kube-system", "POST", "/api/v1/namespaces/kube-system/configmaps", frontBob, forged, cm},
		{"bob with X-Remote-* reads secrets", "GET", "/api/v1/namespaces/kube-system/secrets", frontBob, forged, ""},
		{"anonymous with X-Remote-* writes", "POST", "/api/v1/namespaces/default/configmaps", "", forged, cm},
		{"anonymous with X-Remote-* reads", "GET", "/api/v1/namespaces/default/configmaps", "", forged, ""},
		{"anonymous self review", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", "", forged,
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`},
		{"bob with X-Remote-* self review", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", frontBob, forged,
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`},
		{"bob impersonates alice, write", "POST", "/api/v1/namespaces/default/configmaps", frontBob,
			http.Header{"Impersonate-User": {"alice"}}, cm},
		{"bob impersonates alice, read", "GET", "/api/v1/namespaces/default/configmaps", frontBob,
			http.Header{"Impersonate-User": {"alice"}}, ""},
		{"alice impersonates bob, read", "GET", "/api/v1/namespaces/kube-system/secrets", frontAlice,
			http.Header{"Impersonate-User": {"bob"}}, ""},
		{"bob impersonates system:masters, write", "POST", "/api/v1/namespaces/default/configmaps", frontBob,
			http.Header{"Impersonate-User": {"bob"}, "Impersonate-Group": {"system:masters"}}, cm},
		{"alice impersonates bob with X-Remote-Group", "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", frontAlice,
			http.Header{"Impersonate-User": {"bob"}, "X-Remote-Group": {"system:masters"}},
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`},
		{"alice impersonates bob, write kube-system", "POST", "/api/v1/namespaces/kube-system/configmaps", frontAlice,
			http.Header{"Impersonate-User": {"bob"}}, cm},
	}
	const direct, fronted = "identity-test/direct", "identity-test/lazyapi"
	for _, c := range cases {
		want := f.rawAnswer(t, f.k.url, direct, c.method, c.path, c.token, c.header, c.body)
		got := f.rawAnswer(t, f.lazyURL, fronted, c.method, c.path, c.token, c.header, c.body)
		if got != want {
			t.Errorf("%s: through lazyapi\n%s\ndirect to kube-apiserver\n%s", c.name, got, want)
		}
	}
	// kube-apiserver's audit events of the forwarded requests are those of
	// the direct ones: same users, impersonated users, verbs and codes.
	audit, err := os.ReadFile(f.k.dir + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	events := map[string][]string{}
	for line := range strings.Lines(string(audit)) {
		var ev struct {
			Stage, Verb, UserAgent, RequestURI string
			User                               struct{ Username string }
			ImpersonatedUser                   *struct{ Username string }
			ResponseStatus                     struct{ Code int }
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("audit log: %v: %s", err, line)
		}
		if ev.Stage != "ResponseComplete" || ev.UserAgent != direct && ev.UserAgent != fronted {
			continue
		}
		imp := ""
		if ev.ImpersonatedUser != nil {
			imp = " as " + ev.ImpersonatedUser.Username
		}
		events[ev.UserAgent] = append(events[ev.UserAgent], ev.Verb+" "+ev.RequestURI+" by "+ev.User.Username+imp+": "+strconv.Itoa(ev.ResponseStatus.Code))
	}
	// The reads lazyapi serves reach kube-apiserver's log only directly.
	var forwarded []string
	for _, e := range events[direct] {
		if !strings.HasPrefix(e, "get ") && !strings.HasPrefix(e, "list ") {
			forwarded = append(forwarded, e)
		}
	}
	if strings.Join(events[fronted], "\n") != strings.Join(forwarded, "\n") || len(forwarded) == 0 {
		t.Errorf("kube-apiserver's audit of the forwarded requests:\n%s\nof the same sent directly (less reads):\n%s",
			strings.Join(events[fronted], "\n"), strings.Join(forwarded, "\n"))
	}
}
