// Package storagefmt encodes Kubernetes objects the way kube-apiserver writes
// them to etcd. It is the oracle side of tests and the writer of demo and
// bench data; lazyapi's read path never uses it.
package storagefmt

import (
	"bytes"
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

var (
	protoSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	jsonSerializer  = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
)

// prepare clears what kube-apiserver clears before storage and sets the
// object's apiVersion and kind from the scheme when they are empty.
func prepare(obj runtime.Object) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	if acc, err := meta.Accessor(obj); err == nil {
		acc.SetResourceVersion("")
		acc.SetSelfLink("")
	}
	if obj.GetObjectKind().GroupVersionKind().Empty() {
		gvks, _, err := scheme.Scheme.ObjectKinds(obj)
		if err != nil {
			return nil, fmt.Errorf("cannot find kind of %T: %w", obj, err)
		}
		obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	return obj, nil
}

// Protobuf returns obj as kube-apiserver stores a built-in object:
// "k8s\x00" followed by a runtime.Unknown holding its protobuf bytes.
func Protobuf(obj runtime.Object) ([]byte, error) {
	obj, err := prepare(obj)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := protoSerializer.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("cannot encode %T as protobuf: %w", obj, err)
	}
	return buf.Bytes(), nil
}

// JSON returns obj as kube-apiserver stores it with
// --storage-media-type=application/json, and as it stores custom resources
// (pass an *unstructured.Unstructured for those).
func JSON(obj runtime.Object) ([]byte, error) {
	obj, err := prepare(obj)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := jsonSerializer.Encode(obj, &buf); err != nil {
		return nil, fmt.Errorf("cannot encode %T as JSON: %w", obj, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Key returns the etcd key of an object: prefix/resourcePrefix/namespace/name,
// without the namespace for cluster-scoped objects. resourcePrefix is the
// resource's key segment, e.g. "configmaps", "services/specs", or
// "example.com/widgets" for a custom resource.
func Key(prefix, resourcePrefix, namespace, name string) string {
	if namespace == "" {
		return path.Join(prefix, resourcePrefix, name)
	}
	return path.Join(prefix, resourcePrefix, namespace, name)
}

// DecodeProtobuf decodes a value Protobuf wrote (a built-in object as
// kube-apiserver stores it); for the demo's writers, which update what
// they read.
func DecodeProtobuf(val []byte) (runtime.Object, error) {
	obj, _, err := protoSerializer.Decode(val, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("cannot decode a stored protobuf value: %w", err)
	}
	return obj, nil
}
