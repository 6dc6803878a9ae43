package e2e

import (
	"context"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/demo"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// The oracle: what kube-apiserver's codecs make of the stored bytes.

var pbSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// decodeStored decodes a stored built-in object with apimachinery.
func decodeStored(t *testing.T, o demo.Object) runtime.Object {
	t.Helper()
	obj, _, err := pbSerializer.Decode(o.Value, nil, nil)
	if err != nil {
		t.Fatalf("oracle cannot decode %q: %v", o.Key, err)
	}
	return obj
}

// configMaps returns the demo ConfigMaps decoded, by namespace/name.
func configMaps(t *testing.T, objs []demo.Object) map[string]*corev1.ConfigMap {
	t.Helper()
	out := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		if o.Resource == "configmaps" {
			out[o.Namespace+"/"+o.Name] = decodeStored(t, o).(*corev1.ConfigMap)
		}
	}
	return out
}

// modRevisions returns the etcd mod revision, as a resourceVersion string,
// of every key under prefix.
func modRevisions(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = strconv.FormatInt(kv.ModRevision, 10)
	}
	return out
}

// matching returns the objects of resource (in ns unless empty) whose labels
// contain every pair in sel.
func matching(objs []demo.Object, resource, ns string, sel map[string]string) []demo.Object {
	var out []demo.Object
	for _, o := range objs {
		if o.Resource != resource || (ns != "" && o.Namespace != ns) {
			continue
		}
		ok := true
		for k, v := range sel {
			if o.Labels[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, o)
		}
	}
	return out
}

// mustProtobuf encodes obj as kube-apiserver stores it.
func mustProtobuf(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	val, err := storagefmt.Protobuf(obj)
	if err != nil {
		t.Fatal(err)
	}
	return val
}
