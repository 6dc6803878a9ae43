package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// widgetCRD is frontctl's Widget: namespaced, with a status subresource.
const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.frontctl.lazyapi.io"},
"spec":{"group":"frontctl.lazyapi.io","scope":"Namespaced",
 "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
 "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{}},
  "schema":{"openAPIV3Schema":{"type":"object","properties":{
   "spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
   "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}}`

// frontCtlRole is what frontctl needs (granted to bob, as whom it runs).
var frontCtlRole = &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "frontctl"}, Rules: []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{"frontctl.lazyapi.io"}, Resources: []string{"widgets"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"frontctl.lazyapi.io"}, Resources: []string{"widgets/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
}}

// ctlReplica is a running frontctl replica (the test binary re-run).
type ctlReplica struct {
	id     string
	cmd    *exec.Cmd
	stderr *lines
}

func startCtlReplica(t *testing.T, server, ns, id string) *ctlReplica {
	t.Helper()
	env, _ := json.Marshal(frontCtlConfig{Server: server, Token: frontBob, Namespace: ns, ID: id})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), frontCtlEnv+"="+string(env))
	dieWithParent(cmd)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &ctlReplica{id: id, cmd: cmd, stderr: newLines(pipe)}
	t.Cleanup(func() { r.kill() })
	return r
}

func (r *ctlReplica) kill() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// await waits for the replica's line "frontctl ID: what".
func (r *ctlReplica) await(t *testing.T, what string, within time.Duration) {
	t.Helper()
	if _, ok := r.stderr.wait(time.Now().Add(within), func(s string) bool { return s == "frontctl "+r.id+": "+what }); !ok {
		t.Fatalf("replica %s: no %q within %s; its output:\n%s", r.id, what, within, r.stderr)
	}
}

// reported returns the replica's lines that start with "frontctl ID: what".
func (r *ctlReplica) reported(what string) []string {
	var out []string
	for _, l := range strings.Split(r.stderr.String(), "\n") {
		if strings.HasPrefix(l, "frontctl "+r.id+": "+what) {
			out = append(out, l)
		}
	}
	return out
}

// ctlClients are alice's clients of one server.
type ctlClients struct {
	cs kubernetes.Interface
	dc dynamic.Interface
}

func newCtlClients(server string) ctlClients {
	cfg := &rest.Config{Host: server, BearerToken: frontAlice, QPS: -1, Timeout: time.Minute,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // loopback test servers
	return ctlClients{kubernetes.NewForConfigOrDie(cfg), dynamic.NewForConfigOrDie(cfg)}
}

// ctlState is what frontctl made of namespace ns, one sorted line per
// Deployment, Widget, distinct Event and the Lease, without the
// namespace's name, uids, resource versions or times.
func (c ctlClients) ctlState(ctx context.Context, ns string) ([]string, error) {
	var out []string
	deps, err := c.cs.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		st, _ := json.Marshal(d.Status)
		out = append(out, fmt.Sprintf("deployment %s generation=%d replicas=%d labels=%v status=%s", d.Name, d.Generation, *d.Spec.Replicas, d.Labels, st))
	}
	ws, err := c.dc.Resource(widgetGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, w := range ws.Items {
		spec, _ := json.Marshal(w.Object["spec"])
		st, _ := json.Marshal(w.Object["status"])
		out = append(out, fmt.Sprintf("widget %s generation=%d labels=%v spec=%s status=%s", w.GetName(), w.GetGeneration(), w.GetLabels(), spec, st))
	}
	evs, err := c.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, e := range evs.Items {
		if s := fmt.Sprintf("event %s %s/%s %s %s: %s", e.Source.Component, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Type, e.Reason, e.Message); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	l, err := c.cs.CoordinationV1().Leases(ns).Get(ctx, ctlLease, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out = append(out, fmt.Sprintf("lease holder=%s transitions=%d duration=%ds", *l.Spec.HolderIdentity, *l.Spec.LeaseTransitions, *l.Spec.LeaseDurationSeconds))
	slices.Sort(out)
	return out, nil
}

// ctlWant is the state frontctl must reach: each source's replicas and
// the generation its Deployment and Widget must have reached (1 + the
// spec changes), and the Events posted so far.
type ctlWant struct {
	sources map[string][2]int // replicas, generation
	events  []string
}

// missing says what of want state lacks ("" when none).
func (w ctlWant) missing(state []string) string {
	var miss []string
	derived := 0
	for _, l := range state {
		if strings.HasPrefix(l, "deployment ") || strings.HasPrefix(l, "widget ") {
			derived++
		}
	}
	if derived != 2*len(w.sources) {
		miss = append(miss, fmt.Sprintf("%d Deployments and Widgets, want %d", derived, 2*len(w.sources)))
	}
	for name, rg := range w.sources {
		r, gen := rg[0], rg[1]
		d := fmt.Sprintf(`deployment %s generation=%d replicas=%d labels=map[%s:%s] status={"observedGeneration":%d,"replicas":%d,`, name, gen, r, ctlOwnerLabel, name, gen, r)
		if !slices.ContainsFunc(state, func(l string) bool {
			return strings.HasPrefix(l, d) && strings.Contains(l, fmt.Sprintf(`"readyReplicas":%d,`, r))
		}) {
			miss = append(miss, d+"...")
		}
		wl := fmt.Sprintf(`widget %s generation=%d labels=map[%s:%s] spec={"replicas":%d,"source":%q} status={"deploymentGeneration":%d,"observedGeneration":%d,"phase":"Ready","readyReplicas":%d}`,
			name, gen, ctlOwnerLabel, name, r, name, gen, gen, r)
		if !slices.Contains(state, wl) {
			miss = append(miss, wl)
		}
	}
	for _, e := range w.events {
		if !slices.Contains(state, e) {
			miss = append(miss, e)
		}
	}
	return strings.Join(miss, "; ")
}

func ctlEvent(name string, r int) string {
	return fmt.Sprintf("event frontctl Widget/%s Normal Synced: %d replicas ready", name, r)
}

// awaitConverged polls c until namespace ns has want's state.
func (c ctlClients) awaitConverged(t *testing.T, ns string, want ctlWant) []string {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		state, err := c.ctlState(ctx, ns)
		miss := ""
		if err == nil {
			miss = want.missing(state)
		}
		if err == nil && miss == "" {
			return state
		}
		if time.Now().After(deadline) {
			t.Fatalf("namespace %s not converged: %v %s\n%s", ns, err, miss, strings.Join(state, "\n"))
		}
		time.Sleep(200 * time.Millisecond) // polling the servers' state to a deadline
	}
}

// source writes ConfigMap name with replicas r, labelled a source unless
// r is 0 (then unlabelled); create makes it.
func (c ctlClients) source(t *testing.T, ns, name string, r int, create bool) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ctlSourceLabel: "true"}},
		Data: map[string]string{"replicas": fmt.Sprint(r)}}
	if r == 0 {
		cm.Labels = map[string]string{"other": "true"}
		cm.Data["replicas"] = "7"
	}
	ctx := context.Background()
	var err error
	if create {
		_, err = c.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	} else {
		_, err = c.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", ns, name, err)
	}
}

// ctlRun is what a scenario run showed.
type ctlRun struct {
	state    []string // final, read through the server under test
	refused  []string
	conflict int
	takeover time.Duration // from the leader's kill to the next leading
}

// runCtlScenario runs two frontctl replicas as bob against server in
// namespace ns: a leads, sources are created, changed and deleted, a is
// killed (SIGKILL: its Lease is not released), b takes over and
// reconciles further changes.
func runCtlScenario(t *testing.T, server, ns string) ctlRun {
	t.Helper()
	c := newCtlClients(server)
	ctx := context.Background()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "frontctl"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "frontctl"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "bob"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := startCtlReplica(t, server, ns, "a")
	a.await(t, "leading", 60*time.Second)
	b := startCtlReplica(t, server, ns, "b")
	b.await(t, "synced", 60*time.Second)

	want := ctlWant{sources: map[string][2]int{"s1": {1, 1}, "s2": {2, 1}, "s3": {3, 1}}}
	for _, s := range []string{"s1", "s2", "s3"} {
		c.source(t, ns, s, want.sources[s][0], true)
		want.events = append(want.events, ctlEvent(s, want.sources[s][0]))
	}
	c.source(t, ns, "other", 0, true)
	c.awaitConverged(t, ns, want)

	c.source(t, ns, "s2", 4, false)
	if err := c.cs.CoreV1().ConfigMaps(ns).Delete(ctx, "s3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.source(t, ns, "other", 6, false)
	want.sources = map[string][2]int{"s1": {1, 1}, "s2": {4, 2}, "other": {6, 1}}
	want.events = append(want.events, ctlEvent("s2", 4), ctlEvent("other", 6))
	c.awaitConverged(t, ns, want)

	killed := time.Now()
	a.kill()
	b.await(t, "leading", 60*time.Second)
	takeover := time.Since(killed)

	c.source(t, ns, "s4", 5, true)
	c.source(t, ns, "s1", 2, false)
	c.source(t, ns, "s2", 0, false)
	want.sources = map[string][2]int{"s1": {2, 2}, "other": {6, 1}, "s4": {5, 1}}
	want.events = append(want.events, ctlEvent("s4", 5), ctlEvent("s1", 2))
	state := c.awaitConverged(t, ns, want)
	b.kill()

	run := ctlRun{state: state, takeover: takeover}
	for _, r := range []*ctlReplica{a, b} {
		run.refused = append(run.refused, r.reported("refused")...)
		run.conflict += len(r.reported("conflict"))
		if len(r.reported("stopped leading")) != 0 {
			run.refused = append(run.refused, r.id+" lost its lease while it ran")
		}
	}
	return run
}

// TestFrontControllerAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1):
// issue 25's "a client-go program with leader election, informers on 3
// kinds and status writes, pointed at lazyapi only, converges as when
// pointed at kube-apiserver". Two replicas of frontctl (frontctl_test.go:
// informers on ConfigMaps, Deployments and a CRD's Widgets; a Lease;
// Deployment and Widget status writes; Events), run as bob with an RBAC
// role of their needs, first against kube-apiserver v1.37.2 directly,
// then against lazyapi only (reads served from etcd, the rest forwarded):
// the leader is killed midway and the other takes the Lease over. Both
// runs converge to the same Deployments, Widgets (specs and statuses),
// Events and Lease (holder b, one transition); no request of either
// replica is refused; lazyapi's view of the converged state is
// kube-apiserver's.
func TestFrontControllerAgainstKubeAPIServer(t *testing.T) {
	f := startFront(t)
	f.k.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", widgetCRD)
	direct, fronted := newCtlClients(f.k.url), newCtlClients(f.lazyURL)
	ctx := context.Background()
	if _, err := direct.cs.RbacV1().ClusterRoles().Create(ctx, frontCtlRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The Widget kind is served by both (established, and read by lazyapi from etcd).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err1 := direct.dc.Resource(widgetGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		_, err2 := fronted.dc.Resource(widgetGVR).Namespace("default").List(ctx, metav1.ListOptions{})
		if err1 == nil && err2 == nil {
			break
		}
		if time.Now().After(deadline) || err1 != nil && !apierrors.IsNotFound(err1) || err2 != nil && !apierrors.IsNotFound(err2) {
			t.Fatalf("Widgets not served: kube-apiserver %v, lazyapi %v", err1, err2)
		}
	}

	want := runCtlScenario(t, f.k.url, "frontctl-direct")
	got := runCtlScenario(t, f.lazyURL, "frontctl-lazyapi")
	t.Logf("direct: %d conflicts, takeover in %s; through lazyapi: %d conflicts, takeover in %s",
		want.conflict, want.takeover.Round(time.Millisecond), got.conflict, got.takeover.Round(time.Millisecond))
	t.Logf("converged state (both runs):\n%s", strings.Join(got.state, "\n"))
	if g, w := strings.Join(got.state, "\n"), strings.Join(want.state, "\n"); g != w {
		t.Errorf("converged through lazyapi:\n%s\n\ndirect to kube-apiserver:\n%s", g, w)
	}
	if l := want.state[slices.IndexFunc(want.state, func(s string) bool { return strings.HasPrefix(s, "lease ") })]; !strings.HasPrefix(l, "lease holder=b transitions=1 ") {
		t.Errorf("direct run's Lease: %s, want b's after one transition", l)
	}
	for _, run := range []struct {
		name string
		r    ctlRun
	}{{"direct", want}, {"lazyapi", got}} {
		if len(run.r.refused) != 0 {
			t.Errorf("%s: refused requests:\n%s", run.name, strings.Join(run.r.refused, "\n"))
		}
	}
	truth, err := direct.ctlState(ctx, "frontctl-lazyapi")
	if err != nil {
		t.Fatal(err)
	}
	if g, w := strings.Join(got.state, "\n"), strings.Join(truth, "\n"); g != w {
		t.Errorf("lazyapi's view of its run:\n%s\n\nkube-apiserver's:\n%s", g, w)
	}
}
