package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

var created = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func ometa(ns, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, UID: types.UID("uid-" + ns + "-" + name), CreationTimestamp: created,
		Annotations: map[string]string{"note": "x"}}
}

// fixture is one stored object and where.
type fixture struct {
	keyPrefix string
	obj       runtime.Object
	stored    []byte
	rev       int64
}

func seedMixed(t *testing.T, e *env) map[string]*fixture {
	t.Helper()
	replicas := int32(3)
	objs := []struct {
		keyPrefix string
		obj       runtime.Object
	}{
		{"configmaps", &corev1.ConfigMap{ObjectMeta: ometa("ns1", "cm-a", map[string]string{"app": "a", "tier": "web"}), Data: map[string]string{"k": "v", "json": `{"x":1}`}}},
		{"configmaps", &corev1.ConfigMap{ObjectMeta: ometa("ns1", "cm-b", map[string]string{"app": "b"}), BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}}}},
		{"configmaps", &corev1.ConfigMap{ObjectMeta: ometa("ns2", "cm-c", map[string]string{"app": "a"}), Data: map[string]string{"unicode": "héllo \u2028 <>&"}}},
		{"secrets", &corev1.Secret{ObjectMeta: ometa("ns1", "s1", nil), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("hunter2")}}},
		{"pods", &corev1.Pod{ObjectMeta: ometa("ns1", "p1", map[string]string{"app": "a"}), Spec: corev1.PodSpec{NodeName: "node-1",
			Containers: []corev1.Container{{Name: "c", Image: "nginx:1", Ports: []corev1.ContainerPort{{ContainerPort: 80, Protocol: "TCP"}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1"}}},
		{"pods", &corev1.Pod{ObjectMeta: ometa("ns1", "p2", map[string]string{"app": "b"}), Spec: corev1.PodSpec{NodeName: "node-2",
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}, Status: corev1.PodStatus{Phase: corev1.PodPending}}},
		{"deployments", &appsv1.Deployment{ObjectMeta: ometa("ns1", "d1", map[string]string{"app": "a"}), Spec: appsv1.DeploymentSpec{Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "a"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}}}}}},
		{"minions", &corev1.Node{ObjectMeta: ometa("", "node-1", map[string]string{"kubernetes.io/hostname": "node-1"}),
			Spec: corev1.NodeSpec{PodCIDR: "10.0.0.0/24"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.0"}}}},
		{"minions", &corev1.Node{ObjectMeta: ometa("", "node-2", nil), Spec: corev1.NodeSpec{Unschedulable: true}}},
		{"namespaces", &corev1.Namespace{ObjectMeta: ometa("", "ns1", nil), Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}},
		{"services/specs", &corev1.Service{ObjectMeta: ometa("ns1", "svc", nil), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: "TCP"}}}}},
	}
	out := map[string]*fixture{}
	for _, o := range objs {
		stored, err := storagefmt.Protobuf(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		acc, _ := meta.Accessor(o.obj)
		rev := e.putRaw(t, storagefmt.Key("/registry", o.keyPrefix, acc.GetNamespace(), acc.GetName()), stored)
		out[o.keyPrefix+"/"+acc.GetNamespace()+"/"+acc.GetName()] = &fixture{keyPrefix: o.keyPrefix, obj: o.obj, stored: stored, rev: rev}
	}
	return out
}

// same compares a served object with the oracle (the stored bytes decoded
// by apimachinery, RV = mod revision), ignoring TypeMeta which typed
// clients clear.
func same(t *testing.T, what string, got runtime.Object, f *fixture) {
	t.Helper()
	want := oracle(t, f.stored, f.rev)
	got = got.DeepCopyObject()
	got.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	want.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: served object differs from stored\n got: %+v\nwant: %+v", what, got, want)
	}
}

func TestTypedClients(t *testing.T) {
	e := startEnv(t)
	fx := seedMixed(t, e)
	ctx := context.Background()
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		t.Run(name, func(t *testing.T) {
			cm, err := cs.CoreV1().ConfigMaps("ns1").Get(ctx, "cm-a", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get configmap: %v", err)
			}
			same(t, "configmap", cm, fx["configmaps/ns1/cm-a"])
			if cm.ResourceVersion != strconv.FormatInt(fx["configmaps/ns1/cm-a"].rev, 10) {
				t.Errorf("RV = %s, want mod revision %d", cm.ResourceVersion, fx["configmaps/ns1/cm-a"].rev)
			}
			s, err := cs.CoreV1().Secrets("ns1").Get(ctx, "s1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get secret: %v", err)
			}
			same(t, "secret", s, fx["secrets/ns1/s1"])
			p, err := cs.CoreV1().Pods("ns1").Get(ctx, "p1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get pod: %v", err)
			}
			same(t, "pod", p, fx["pods/ns1/p1"])
			d, err := cs.AppsV1().Deployments("ns1").Get(ctx, "d1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get deployment: %v", err)
			}
			same(t, "deployment", d, fx["deployments/ns1/d1"])
			n, err := cs.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get node: %v", err)
			}
			same(t, "node", n, fx["minions//node-1"])
			nsObj, err := cs.CoreV1().Namespaces().Get(ctx, "ns1", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get namespace: %v", err)
			}
			same(t, "namespace", nsObj, fx["namespaces//ns1"])
			nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Active"})
			if err != nil || len(nss.Items) != 1 {
				t.Fatalf("List namespaces = %v, %v", nss, err)
			}
			svc, err := cs.CoreV1().Services("ns1").Get(ctx, "svc", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("Get service: %v", err)
			}
			same(t, "service", svc, fx["services/specs/ns1/svc"])

			// Lists: namespaced, across namespaces, cluster-scoped.
			cms, err := cs.CoreV1().ConfigMaps("ns1").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("List configmaps: %v", err)
			}
			if len(cms.Items) != 2 {
				t.Fatalf("List configmaps in ns1 = %d items, want 2", len(cms.Items))
			}
			same(t, "list cm-a", &cms.Items[0], fx["configmaps/ns1/cm-a"])
			same(t, "list cm-b", &cms.Items[1], fx["configmaps/ns1/cm-b"])
			listRV, _ := strconv.ParseInt(cms.ResourceVersion, 10, 64)
			if listRV < fx["services/specs/ns1/svc"].rev {
				t.Errorf("list RV = %d, want >= last write %d", listRV, fx["services/specs/ns1/svc"].rev)
			}
			all, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			if err != nil || len(all.Items) != 3 || all.Items[2].Name != "cm-c" {
				t.Fatalf("List configmaps across namespaces = %v, %v", all, err)
			}
			same(t, "list cm-c", &all.Items[2], fx["configmaps/ns2/cm-c"])
			secrets, err := cs.CoreV1().Secrets("ns1").List(ctx, metav1.ListOptions{})
			if err != nil || len(secrets.Items) != 1 {
				t.Fatalf("List secrets = %v, %v", secrets, err)
			}
			same(t, "list secret", &secrets.Items[0], fx["secrets/ns1/s1"])
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) != 2 {
				t.Fatalf("List pods = %v, %v", pods, err)
			}
			same(t, "list pod", &pods.Items[1], fx["pods/ns1/p2"])
			deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
			if err != nil || len(deps.Items) != 1 {
				t.Fatalf("List deployments = %v, %v", deps, err)
			}
			same(t, "list deployment", &deps.Items[0], fx["deployments/ns1/d1"])
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil || len(nodes.Items) != 2 {
				t.Fatalf("List nodes = %v, %v", nodes, err)
			}
			same(t, "list node", &nodes.Items[1], fx["minions//node-2"])
			svcs, err := cs.CoreV1().Services("ns1").List(ctx, metav1.ListOptions{})
			if err != nil || len(svcs.Items) != 1 {
				t.Fatalf("List services = %v, %v", svcs, err)
			}
			same(t, "list service", &svcs.Items[0], fx["services/specs/ns1/svc"])

			// A namespace that does not exist: 200, empty.
			none, err := cs.CoreV1().ConfigMaps("nope").List(ctx, metav1.ListOptions{})
			if err != nil || len(none.Items) != 0 || none.ResourceVersion == "" {
				t.Fatalf("List in missing namespace = %+v, %v; want empty list with RV", none, err)
			}

			// NotFound.
			_, err = cs.CoreV1().ConfigMaps("ns1").Get(ctx, "missing", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Fatalf("Get missing = %v, want NotFound", err)
			}
			if want := `configmaps "missing" not found`; err.Error() != want {
				t.Errorf("NotFound message = %q, want %q", err.Error(), want)
			}
			var se apierrors.APIStatus
			if ok := asStatus(err, &se); !ok || se.Status().Details == nil || se.Status().Details.Kind != "configmaps" || se.Status().Details.Name != "missing" {
				t.Errorf("NotFound details = %+v", se)
			}
			_, err = cs.AppsV1().Deployments("ns1").Get(ctx, "missing", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) || err.Error() != `deployments.apps "missing" not found` {
				t.Errorf("Get missing deployment = %v", err)
			}
		})
	}
}

func asStatus(err error, out *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*out = s
	}
	return ok
}

func TestSelectors(t *testing.T) {
	e := startEnv(t)
	seedMixed(t, e)
	ctx := context.Background()
	names := func(l *corev1.PodList) (out []string) {
		for _, p := range l.Items {
			out = append(out, p.Name)
		}
		return out
	}
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		t.Run(name, func(t *testing.T) {
			tests := []struct {
				ls, fs string
				want   string
			}{
				{"app=a", "", "[p1]"},
				{"app in (a,b)", "", "[p1 p2]"},
				{"app notin (a)", "", "[p2]"},
				{"!app", "", "[]"},
				{"app,app!=b", "", "[p1]"},
				{"", "spec.nodeName=node-2", "[p2]"},
				{"", "spec.host=node-1", "[p1]"},
				{"", "status.phase!=Running", "[p2]"},
				{"", "metadata.name=p2", "[p2]"},
				{"", "metadata.namespace=ns1,metadata.name!=p2", "[p1]"},
				{"app=b", "spec.nodeName=node-1", "[]"},
			}
			for _, tt := range tests {
				for _, ns := range []string{"ns1", ""} {
					l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: tt.ls, FieldSelector: tt.fs})
					if err != nil {
						t.Errorf("List(ns=%q, ls=%q, fs=%q): %v", ns, tt.ls, tt.fs, err)
						continue
					}
					if got := fmt.Sprint(names(l)); got != tt.want {
						t.Errorf("List(ns=%q, ls=%q, fs=%q) = %s, want %s", ns, tt.ls, tt.fs, got, tt.want)
					}
					if l.RemainingItemCount != nil || l.Continue != "" {
						t.Errorf("List(%q,%q): continue %q remaining %v without limit", tt.ls, tt.fs, l.Continue, l.RemainingItemCount)
					}
				}
			}
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "spec.unschedulable=true"})
			if err != nil || len(nodes.Items) != 1 || nodes.Items[0].Name != "node-2" {
				t.Errorf("nodes spec.unschedulable=true = %v, %v", nodes, err)
			}
			_, err = cs.CoreV1().Pods("ns1").List(ctx, metav1.ListOptions{FieldSelector: "spec.bogus=1"})
			if !apierrors.IsBadRequest(err) {
				t.Errorf("unsupported field selector = %v, want BadRequest", err)
			}
			_, err = cs.CoreV1().Pods("ns1").List(ctx, metav1.ListOptions{LabelSelector: "app in (a"})
			if !apierrors.IsBadRequest(err) {
				t.Errorf("bad label selector = %v, want BadRequest", err)
			}
		})
	}
}
