package demo

import (
	"crypto/sha1"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

type builder struct {
	prefix string
	now    time.Time
	out    []Object
	err    error
}

// uid returns a stable UUID-shaped id for a key.
func uid(key string) types.UID {
	h := sha1.Sum([]byte(key))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16]))
}

func (b *builder) ago(d time.Duration) metav1.Time { return metav1.NewTime(b.now.Add(-d)) }

// meta fills the object metadata kube-apiserver sets on create.
func (b *builder) meta(resourcePrefix, ns, name string, age time.Duration, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              name,
		Namespace:         ns,
		UID:               uid(storagefmt.Key(b.prefix, resourcePrefix, ns, name)),
		CreationTimestamp: b.ago(age),
		Labels:            labels,
	}
}

// managed returns a managedFields entry like the one kubectl apply leaves.
func (b *builder) managed(manager, apiVersion string, age time.Duration, fields string) []metav1.ManagedFieldsEntry {
	t := b.ago(age)
	return []metav1.ManagedFieldsEntry{{
		Manager:    manager,
		Operation:  metav1.ManagedFieldsOperationUpdate,
		APIVersion: apiVersion,
		Time:       &t,
		FieldsType: "FieldsV1",
		FieldsV1:   &metav1.FieldsV1{Raw: []byte(fields)},
	}}
}

// add encodes obj (protobuf for built-ins, JSON for *unstructured) and
// appends it.
func (b *builder) add(resource, resourcePrefix string, obj runtime.Object, m metav1.Object) {
	if b.err != nil {
		return
	}
	var (
		val []byte
		err error
	)
	if _, ok := obj.(*unstructured.Unstructured); ok {
		val, err = storagefmt.JSON(obj)
	} else {
		val, err = storagefmt.Protobuf(obj)
	}
	if err != nil {
		b.err = fmt.Errorf("cannot encode demo %s %s/%s: %w", resource, m.GetNamespace(), m.GetName(), err)
		return
	}
	b.out = append(b.out, Object{
		Resource:  resource,
		Namespace: m.GetNamespace(),
		Name:      m.GetName(),
		Labels:    m.GetLabels(),
		Key:       storagefmt.Key(b.prefix, resourcePrefix, m.GetNamespace(), m.GetName()),
		Value:     val,
	})
}

const day = 24 * time.Hour

func ptr[T any](v T) *T { return &v }
