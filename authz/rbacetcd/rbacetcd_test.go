package rbacetcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/authz/rbacetcd"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

func put(t *testing.T, cli *clientv3.Client, key string, obj runtime.Object, json bool) int64 {
	t.Helper()
	enc := storagefmt.Protobuf
	if json {
		enc = storagefmt.JSON
	}
	val, err := enc(obj)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(context.Background(), key, string(val))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// waitRev polls until the source has applied rev.
func waitRev(t *testing.T, src *rbacetcd.Source, rev int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); src.Revision() < rev; {
		if time.Now().After(deadline) {
			t.Fatalf("source at revision %d, want %d", src.Revision(), rev)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}

// TestSource: objects stored as protobuf and as JSON
// (--storage-media-type=application/json) are read at start and followed;
// a value that does not decode grants nothing and is counted; a deleted
// role's grants end.
func TestSource(t *testing.T) {
	etcd := etcdtest.Start(t)
	cli := etcd.Client
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader"}, Rules: []rbacv1.PolicyRule{
		{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}
	put(t, cli, "/registry/clusterroles/reader", cr, true)
	rb := func(ns, user string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "b"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: user}}}
	}
	put(t, cli, "/registry/rolebindings/ns1/b", rb("ns1", "alice"), false)
	r := authz.NewRBAC()
	ms := metrics.NewSet()
	src, err := rbacetcd.Start(context.Background(), rbacetcd.Config{Client: cli, RBAC: r, Metrics: ms})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	allowed := func(user, ns string) bool {
		d, _, _ := r.Authorize(&authz.Attributes{User: user, Verb: "get", ResourceRequest: true, Namespace: ns, Resource: "configmaps", Name: "x"})
		return d == authz.Allow
	}
	if !allowed("alice", "ns1") || allowed("alice", "ns2") || allowed("bob", "ns1") {
		t.Fatal("initial objects not in effect")
	}
	waitRev(t, src, put(t, cli, "/registry/rolebindings/ns2/b", rb("ns2", "bob"), true))
	if !allowed("bob", "ns2") {
		t.Error("JSON RoleBinding written after start not in effect")
	}
	// A corrupt value replaces alice's binding: it grants nothing.
	resp, err := cli.Put(context.Background(), "/registry/rolebindings/ns1/b", "k8s\x00garbage")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, src, resp.Header.Revision)
	if allowed("alice", "ns1") {
		t.Error("a binding that does not decode still grants")
	}
	if n := ms.GetOrCreateCounter("lazyapi_rbac_decode_errors_total").Get(); n != 1 {
		t.Errorf("decode errors = %d, want 1", n)
	}
	// Deleting the ClusterRole revokes bob's grant.
	dresp, err := cli.Delete(context.Background(), "/registry/clusterroles/reader")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, src, dresp.Header.Revision)
	if allowed("bob", "ns2") {
		t.Error("grant of a deleted ClusterRole still in effect")
	}
	if _, cr, rb, _ := r.Stats(); cr != 0 || rb != 1 {
		t.Errorf("Stats: %d ClusterRoles, %d RoleBindings; want 0, 1", cr, rb)
	}
}
