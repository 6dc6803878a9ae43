package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/internal/etcdtest"
)

// putRBAC stores RBAC objects in etcd as kube-apiserver does.
func putRBAC(t *testing.T, etcd *etcdtest.Server, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		var key string
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			key = "/registry/clusterroles/" + o.Name
		case *rbacv1.ClusterRoleBinding:
			key = "/registry/clusterrolebindings/" + o.Name
		case *rbacv1.Role:
			key = "/registry/roles/" + o.Namespace + "/" + o.Name
		case *rbacv1.RoleBinding:
			key = "/registry/rolebindings/" + o.Namespace + "/" + o.Name
		default:
			t.Fatalf("putRBAC: %T", o)
		}
		if _, err := etcd.Client.Put(context.Background(), key, string(mustProtobuf(t, o))); err != nil {
			t.Fatal(err)
		}
	}
}

// discoveryRBAC is kube-apiserver's bootstrap system:discovery and
// system:public-info-viewer access: discovery and version for everyone.
func discoveryRBAC() []runtime.Object {
	return []runtime.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"}, Rules: []rbacv1.PolicyRule{{
			Verbs: []string{"get"}, NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:discovery"},
			Subjects: []rbacv1.Subject{{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:authenticated"},
				{Kind: "Group", APIGroup: rbacv1.GroupName, Name: "system:unauthenticated"}}},
	}
}

// readerRBAC lets subjects read ConfigMaps in namespace ns.
func readerRBAC(ns string, subjects ...rbacv1.Subject) []runtime.Object {
	return []runtime.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cm-reader"}, Rules: []rbacv1.PolicyRule{{
			Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-readers"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cm-reader"},
			Subjects: subjects},
	}
}

func group(name string) rbacv1.Subject {
	return rbacv1.Subject{Kind: "Group", APIGroup: rbacv1.GroupName, Name: name}
}

// TestAuthzRBACE2E: with authentication on, --authorization-mode defaults
// to RBAC; what RBAC does not grant is 403 Forbidden with kube-apiserver's
// message, for client-go and kubectl.
func TestAuthzRBACE2E(t *testing.T) {
	s := newAuthnSetup(t)
	url, p := s.startProcess(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: url, BearerToken: "token-reader",
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.servingCA.File}})
	if list, err := cs.CoreV1().ConfigMaps("authn").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 3 {
		t.Errorf("granted list = %v, %v", list, err)
	}
	_, err := cs.CoreV1().Secrets("authn").List(ctx, metav1.ListOptions{})
	const want = `secrets is forbidden: User "reader" cannot list resource "secrets" in API group "" in the namespace "authn"`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Errorf("list secrets: %v; want Forbidden %q", err, want)
	}
	if _, err := cs.CoreV1().ConfigMaps("other").Get(ctx, "one", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get in another namespace: %v; want Forbidden", err)
	}
	if !strings.Contains(p.stderr.String(), `"RBAC objects read"`) {
		t.Errorf("no start-up entry for the RBAC objects:\n%s", p.stderr)
	}

	needKubectl(t)
	_, stderr, err := kubectl(t, url, "--certificate-authority="+s.servingCA.File, "--token=token-reader", "get", "secrets", "-n", "authn")
	if err == nil || !strings.Contains(stderr, "Error from server (Forbidden): "+want) {
		t.Errorf("kubectl get secrets: err %v, stderr %q", err, stderr)
	}
}
