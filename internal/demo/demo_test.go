package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestObjectsDecode decodes every demo object with apimachinery, as
// kube-apiserver would, and checks it sits under the right key.
func TestObjectsDecode(t *testing.T) {
	objs, err := Objects("/registry", now)
	if err != nil {
		t.Fatal(err)
	}
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	seen := map[string]bool{}
	for _, o := range objs {
		if seen[o.Key] {
			t.Errorf("duplicate key %q", o.Key)
		}
		seen[o.Key] = true
		var m metav1.Object
		if bytes.HasPrefix(o.Value, []byte("k8s\x00")) {
			obj, _, err := pb.Decode(o.Value, nil, nil)
			if err != nil {
				t.Errorf("decode %q: %v", o.Key, err)
				continue
			}
			m = obj.(metav1.Object)
		} else {
			if o.Resource != "customresourcedefinitions" && o.Resource != CRDPlural {
				t.Errorf("%q is JSON, want protobuf for built-in %s", o.Key, o.Resource)
			}
			u := &unstructured.Unstructured{}
			if err := json.Unmarshal(o.Value, &u.Object); err != nil {
				t.Errorf("decode %q: %v", o.Key, err)
				continue
			}
			m = u
		}
		if m.GetName() != o.Name || m.GetNamespace() != o.Namespace || m.GetUID() == "" || m.GetCreationTimestamp().Time.IsZero() {
			t.Errorf("%q decodes to %s/%s uid=%q created=%v", o.Key, m.GetNamespace(), m.GetName(), m.GetUID(), m.GetCreationTimestamp())
		}
		if m.GetResourceVersion() != "" {
			t.Errorf("%q stores resourceVersion %q; kube-apiserver clears it", o.Key, m.GetResourceVersion())
		}
		if !strings.HasPrefix(o.Key, "/registry/") || !strings.HasSuffix(o.Key, "/"+o.Name) {
			t.Errorf("key %q for %s/%s", o.Key, o.Namespace, o.Name)
		}
	}
	for _, tt := range []struct {
		resource string
		want     int
	}{
		{"configmaps", ConfigMapsGenerated + len(Namespaces)},
		{"namespaces", len(Namespaces)},
		{"nodes", 1},
		{"deployments", 1},
		{"replicasets", 1},
		{"pods", PodReplicas},
		{"customresourcedefinitions", 1},
		{CRDPlural, CRDCount},
	} {
		if got := Count(objs, tt.resource, ""); got != tt.want {
			t.Errorf("Count(%s) = %d, want %d", tt.resource, got, tt.want)
		}
	}
	for _, key := range []string{
		"/registry/minions/" + NodeName,
		"/registry/services/specs/default/kubernetes",
		"/registry/apiextensions.k8s.io/customresourcedefinitions/" + CRDName,
		"/registry/" + CRDGroup + "/" + CRDPlural + "/" + AppNamespace + "/backup-00",
	} {
		if !seen[key] {
			t.Errorf("no object at %q", key)
		}
	}
	again, err := Objects("/registry", now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range objs {
		if !bytes.Equal(objs[i].Value, again[i].Value) {
			t.Fatalf("Objects is not deterministic at %q", objs[i].Key)
		}
	}
}

func TestCRDStoredAsV1beta1JSON(t *testing.T) {
	objs, err := Objects("/registry", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Resource != "customresourcedefinitions" {
			continue
		}
		var crd struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Spec       struct {
				Group   string `json:"group"`
				Columns []struct {
					JSONPath string `json:"JSONPath"`
				} `json:"additionalPrinterColumns"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(o.Value, &crd); err != nil {
			t.Fatalf("CRD is not JSON: %v", err)
		}
		if crd.APIVersion != "apiextensions.k8s.io/v1beta1" || crd.Kind != "CustomResourceDefinition" ||
			crd.Spec.Group != CRDGroup || len(crd.Spec.Columns) != 3 || crd.Spec.Columns[0].JSONPath != ".spec.cronSpec" {
			t.Errorf("stored CRD = %s", o.Value)
		}
		return
	}
	t.Fatal("no CRD in the demo objects")
}

func TestSeed(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	empty, err := Empty(ctx, srv.Client, "/registry")
	if err != nil || !empty {
		t.Fatalf("Empty before seeding = %v, %v; want true", empty, err)
	}
	n, err := Seed(ctx, srv.Client, "/registry", now)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Count) != n {
		t.Errorf("etcd has %d keys after Seed returned %d", resp.Count, n)
	}
	// One put per object: as many distinct revisions as objects.
	revs := map[int64]bool{}
	all, err := srv.Client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range all.Kvs {
		revs[kv.ModRevision] = true
	}
	if len(revs) != n {
		t.Errorf("%d distinct mod revisions for %d objects", len(revs), n)
	}
	if empty, err := Empty(ctx, srv.Client, "/registry"); err != nil || empty {
		t.Errorf("Empty after seeding = %v, %v; want false", empty, err)
	}
	if empty, err := Empty(ctx, srv.Client, "/other"); err != nil || !empty {
		t.Errorf("Empty(/other) = %v, %v; want true", empty, err)
	}
}
