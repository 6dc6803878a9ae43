package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// Informer transforms (StormConfig.InformerTransform): what the storm's
// client-go informers keep of each object, set with
// SharedIndexInformer.SetTransform before Run, as memory-conscious
// controllers do (controller-runtime's cache strips managedFields and large
// data the same way). The server's side is unchanged: every informer still
// lists or watches, receives and decodes the whole collection.
const (
	// InformerTransformNone keeps the decoded objects whole (client-go's
	// default): every informer holds the collection in the harness.
	InformerTransformNone = ""
	// InformerTransformStripData counts each object's bytes of data (its
	// values read, so a decode that lost them shows as a wrong count) and
	// keeps its metadata only (without managedFields).
	InformerTransformStripData = "strip-data"
)

// CheckInformerTransform returns an error for an unknown transform name.
func CheckInformerTransform(name string) error {
	switch name {
	case InformerTransformNone, InformerTransformStripData:
		return nil
	}
	return fmt.Errorf("unknown informer transform %q (want %q or none)", name, InformerTransformStripData)
}

// stripData returns the strip-data transform: it adds each object's data
// bytes (dataBytes) to read, then drops everything but the metadata in
// place. It is idempotent, as client-go requires: with the WatchList
// client (v0.37's default) the reflector applies the informer's transform
// to each event as it enters the WatchList's temporary store, and the
// FIFO applies it again to the whole list at the initial-events-end
// bookmark (RealFIFO's Replace); the second call finds no data and adds 0.
// An object is counted once per resourceVersion (a later version replaces
// its count): a reflector that lists again after its stream was cut (a
// watch the server ended, a 429) receives the objects again, and its count
// stays what its store holds.
// So no informer holds an untransformed object beyond the one being
// decoded.
func stripData(read *atomic.Int64) cache.TransformFunc {
	type version struct {
		rv string
		n  int64
	}
	var mu sync.Mutex
	counted := map[string]version{} // by namespace/name
	return func(obj any) (any, error) {
		if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return obj, nil
		}
		n, err := dataBytes(obj)
		if err != nil {
			return nil, err
		}
		acc, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		key := acc.GetNamespace() + "/" + acc.GetName()
		mu.Lock()
		if prev, ok := counted[key]; !ok || prev.rv != acc.GetResourceVersion() {
			read.Add(n - prev.n)
			counted[key] = version{acc.GetResourceVersion(), n}
		}
		mu.Unlock()
		switch o := obj.(type) {
		case *corev1.Secret:
			o.Data, o.StringData, o.ManagedFields = nil, nil, nil
		case *corev1.ConfigMap:
			o.Data, o.BinaryData, o.ManagedFields = nil, nil, nil
		case *corev1.Pod:
			o.Spec, o.Status, o.ManagedFields = corev1.PodSpec{}, corev1.PodStatus{}, nil
		case *unstructured.Unstructured:
			for k := range o.Object {
				if k != "apiVersion" && k != "kind" && k != "metadata" {
					delete(o.Object, k)
				}
			}
			o.SetManagedFields(nil)
		}
		return obj, nil
	}
}

// dataBytes is what an object holds besides its metadata, in bytes: a
// Secret's or a ConfigMap's keys and values, a Pod's spec and status
// (their protobuf size), a custom resource's strings outside metadata.
func dataBytes(obj any) (int64, error) {
	var n int64
	switch o := obj.(type) {
	case *corev1.Secret:
		for k, v := range o.Data {
			n += int64(len(k) + len(v))
		}
		for k, v := range o.StringData {
			n += int64(len(k) + len(v))
		}
	case *corev1.ConfigMap:
		for k, v := range o.Data {
			n += int64(len(k) + len(v))
		}
		for k, v := range o.BinaryData {
			n += int64(len(k) + len(v))
		}
	case *corev1.Pod:
		n = int64(o.Spec.Size() + o.Status.Size())
	case *unstructured.Unstructured:
		for k, v := range o.Object {
			if k != "apiVersion" && k != "kind" && k != "metadata" {
				n += int64(len(k)) + stringBytes(v)
			}
		}
	default:
		return 0, fmt.Errorf("no data count for %T", obj)
	}
	return n, nil
}

// stringBytes adds the lengths of the strings (keys and values) in a
// decoded JSON value.
func stringBytes(v any) int64 {
	var n int64
	switch x := v.(type) {
	case string:
		n = int64(len(x))
	case map[string]any:
		for k, e := range x {
			n += int64(len(k)) + stringBytes(e)
		}
	case []any:
		for _, e := range x {
			n += stringBytes(e)
		}
	}
	return n
}

// storedDataBytes decodes every stored object of k in namespace ns (as
// kube-apiserver would, RefServer.decode) and adds their dataBytes: what
// each strip-data informer must count once synced.
func storedDataBytes(ctx context.Context, cli *clientv3.Client, prefix string, k Kind, ns string) (int64, error) {
	rs := NewRefServer(cli, prefix)
	key := rs.collectionKey(refRequest{kind: k, namespace: ns})
	end := clientv3.GetPrefixRangeEnd(key)
	var total int64
	var rev int64
	for start := key; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(32)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := cli.Get(ctx, start, opts...)
		if err != nil {
			return 0, fmt.Errorf("cannot read %s: %w", key, err)
		}
		rev = resp.Header.Revision
		for _, kv := range resp.Kvs {
			obj, err := rs.decode(k, kv.Value, kv.ModRevision)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", kv.Key, err)
			}
			n, err := dataBytes(obj)
			if err != nil {
				return 0, err
			}
			total += n
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return total, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
