package proxy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// TestScaleSubresource: GET .../scale answers the autoscaling/v1 Scale
// kube-apiserver's registries build (status.selector as a string,
// spec.replicas defaulted to 1), byte for byte what kube-apiserver v1.37.2
// answered for the same stored objects; typed clients read it in JSON and
// protobuf.
func TestScaleSubresource(t *testing.T) {
	e := startEnv(t)
	r := int32(3)
	dRV := e.put(t, "deployments", &appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "a", UID: "u-d", CreationTimestamp: metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"web", "api"}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 2, ReadyReplicas: 1}})
	ssRV := e.put(t, "statefulsets", &appsv1.StatefulSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "ss", Namespace: "a", UID: "u-ss"},
		Spec:       appsv1.StatefulSetSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ss"}}},
		Status:     appsv1.StatefulSetStatus{Replicas: 1}})
	rsRV := e.put(t, "replicasets", &appsv1.ReplicaSet{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "rs", Namespace: "a", UID: "u-rs"},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "rs"}}}})
	rcRV := e.put(t, "controllers", &corev1.ReplicationController{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ReplicationController"},
		ObjectMeta: metav1.ObjectMeta{Name: "rc", Namespace: "a", UID: "u-rc"},
		Spec:       corev1.ReplicationControllerSpec{Replicas: &r, Selector: map[string]string{"b": "2", "a": "1"}}})
	for _, tt := range []struct {
		path string
		want string
	}{
		// kube-apiserver v1.37.2's answers (resourceVersion aside).
		{"/apis/apps/v1/namespaces/a/deployments/d/scale", fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"d","namespace":"a","uid":"u-d","resourceVersion":"%d","creationTimestamp":"2026-01-02T03:04:05Z"},"spec":{"replicas":3},"status":{"replicas":2,"selector":"app=d,tier in (api,web)"}}`, dRV)},
		{"/apis/apps/v1/namespaces/a/statefulsets/ss/scale", fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"ss","namespace":"a","uid":"u-ss","resourceVersion":"%d"},"spec":{"replicas":3},"status":{"replicas":1,"selector":"app=ss"}}`, ssRV)},
		{"/apis/apps/v1/namespaces/a/replicasets/rs/scale", fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"rs","namespace":"a","uid":"u-rs","resourceVersion":"%d"},"spec":{"replicas":1},"status":{"replicas":0,"selector":"app=rs"}}`, rsRV)},
		{"/api/v1/namespaces/a/replicationcontrollers/rc/scale", fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"rc","namespace":"a","uid":"u-rc","resourceVersion":"%d"},"spec":{"replicas":3},"status":{"replicas":0,"selector":"a=1,b=2"}}`, rcRV)},
	} {
		code, hdr, body := e.raw(t, "GET", tt.path, "application/json")
		if code != 200 || hdr.Get("Content-Type") != "application/json" || string(body) != tt.want+"\n" {
			t.Errorf("GET %s = %d %s\n%s\nwant\n%s", tt.path, code, hdr.Get("Content-Type"), body, tt.want)
		}
	}
	ctx := context.Background()
	for _, cs := range []struct {
		name string
		get  func() (int32, string, error)
	}{
		{"json", func() (int32, string, error) {
			s, err := e.cs.AppsV1().Deployments("a").GetScale(ctx, "d", metav1.GetOptions{})
			if err != nil {
				return 0, "", err
			}
			return s.Spec.Replicas, s.Status.Selector, nil
		}},
		{"protobuf", func() (int32, string, error) {
			s, err := e.pcs.AppsV1().Deployments("a").GetScale(ctx, "d", metav1.GetOptions{})
			if err != nil {
				return 0, "", err
			}
			return s.Spec.Replicas, s.Status.Selector, nil
		}},
	} {
		n, sel, err := cs.get()
		if err != nil || n != 3 || sel != "app=d,tier in (api,web)" {
			t.Errorf("client-go GetScale (%s) = %d %q %v", cs.name, n, sel, err)
		}
	}
	if code, _, body := e.raw(t, "GET", "/apis/apps/v1/namespaces/a/daemonsets/x/scale", "application/json"); code != 404 ||
		!strings.Contains(string(body), "could not find the requested resource") {
		t.Errorf("GET daemonsets/x/scale = %d %s, want 404 (no scale subresource)", code, body)
	}
}

// TestCustomResourceScale: a custom resource whose CRD version declares
// subresources.scale answers its Scale from the CRD's JSON paths, as
// apiextensions-apiserver; without subresources.status, .../status is 404.
func TestCustomResourceScale(t *testing.T) {
	e := startEnv(t)
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gizmos.example.com", "uid": "u-gizmos"},
		"spec": map[string]any{
			"group": "example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"subresources": map[string]any{"scale": map[string]any{"specReplicasPath": ".spec.size",
					"statusReplicasPath": ".status.size", "labelSelectorPath": ".status.selector"}}}},
		},
		"status": map[string]any{
			"conditions":    []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
		},
	}}
	v, err := storagefmt.JSON(crd)
	if err != nil {
		t.Fatal(err)
	}
	e.putRaw(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/gizmos.example.com", v)
	g, err := storagefmt.JSON(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gizmo",
		"metadata": map[string]any{"name": "g", "namespace": "a", "uid": "u-g"},
		"spec":     map[string]any{"size": int64(4)},
		"status":   map[string]any{"size": int64(2), "selector": "app=g"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	rev := e.putRaw(t, "/registry/example.com/gizmos/a/g", g)
	want := fmt.Sprintf(`{"kind":"Scale","apiVersion":"autoscaling/v1","metadata":{"name":"g","namespace":"a","uid":"u-g","resourceVersion":"%d"},"spec":{"replicas":4},"status":{"replicas":2,"selector":"app=g"}}`+"\n", rev)
	waitFor(t, "gizmos scale", func() error {
		if code, _, body := e.raw(t, "GET", "/apis/example.com/v1/namespaces/a/gizmos/g/scale", "application/json"); code != 200 || string(body) != want {
			return fmt.Errorf("GET gizmos/g/scale = %d %s, want %s", code, body, want)
		}
		return nil
	})
	if code, _, _ := e.raw(t, "GET", "/apis/example.com/v1/namespaces/a/gizmos/g/status", "application/json"); code != 404 {
		t.Errorf("GET gizmos/g/status = %d, want 404 (no subresources.status)", code)
	}
}
