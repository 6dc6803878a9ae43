package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// The key space: every kind in two namespaces, a few names each, so that
// writers collide (mod_revision compares fail as in kube-apiserver's
// GuaranteedUpdate) and every key sees many versions.
var (
	namespaces = []string{"ns-a", "ns-b"}
	tiers      = []string{"a", "b", "c"}
)

const namesPerNamespace = 12

// kinds are bench's kinds: ConfigMaps, Secrets and Pods in protobuf, the
// Widget custom resource in JSON.
var kinds = bench.Kinds

func kindKeyPrefix(prefix string, k bench.Kind) string { return prefix + "/" + k.KeyPrefix + "/" }

// acked is the highest revision of a write etcd acknowledged.
type acked struct{ rev atomic.Int64 }

func (a *acked) add(rev int64) {
	for {
		cur := a.rev.Load()
		if rev <= cur || a.rev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

// writer writes as kube-apiserver does: one key per transaction, creates
// guarded by create_revision == 0, updates and deletes by the mod_revision
// read before (GuaranteedUpdate's compare-and-swap).
type writer struct {
	id     int
	cli    *clientv3.Client
	prefix string
	rng    *rand.Rand
	acked  *acked
	stats  *stats
	seq    int
	big    bool // sizes up to 1 MiB (else up to 64 KiB)
}

func (w *writer) run(ctx context.Context) {
	for ctx.Err() == nil {
		k := kinds[w.rng.IntN(len(kinds))]
		ns := namespaces[w.rng.IntN(len(namespaces))]
		name := fmt.Sprintf("obj-%02d", w.rng.IntN(namesPerNamespace))
		roll := w.rng.Float64()
		size := w.size()
		tier := tiers[w.rng.IntN(len(tiers))]
		pause := time.Duration(5+w.rng.IntN(40)) * time.Millisecond
		w.once(ctx, k, ns, name, roll, size, tier)
		select {
		case <-ctx.Done():
		case <-time.After(pause): // the traffic's pace
		}
	}
}

// size draws a payload size: mostly small, some tens of KiB, a few large.
func (w *writer) size() int {
	switch r := w.rng.Float64(); {
	case r < 0.75:
		return 16 + w.rng.IntN(2048)
	case r < 0.97 || !w.big:
		return 2048 + w.rng.IntN(62<<10)
	default:
		return 256<<10 + w.rng.IntN(768<<10)
	}
}

// once writes key once: create when absent, else delete (one in six) or
// update (a label change one time in two: tier moves objects in and out
// of tier selectors).
func (w *writer) once(ctx context.Context, k bench.Kind, ns, name string, roll float64, size int, tier string) {
	key := kindKeyPrefix(w.prefix, k) + ns + "/" + name
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	get, err := w.cli.Get(cctx, key)
	if err != nil {
		w.stats.writeErrors.Add(1)
		return
	}
	var cmp clientv3.Cmp
	var op clientv3.Op
	switch {
	case len(get.Kvs) == 0:
		cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		op = w.put(k, key, ns, name, tier, size)
	case roll < 1.0/6:
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)
		op = clientv3.OpDelete(key)
	default:
		old, _ := storedMeta(get.Kvs[0].Value)
		if roll < 0.55 && old != nil {
			tier = old["tier"] // same labels, new content
		}
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", get.Kvs[0].ModRevision)
		op = w.put(k, key, ns, name, tier, size)
	}
	resp, err := w.cli.Txn(cctx).If(cmp).Then(op).Commit()
	switch {
	case err != nil:
		w.stats.writeErrors.Add(1)
	case !resp.Succeeded:
		w.stats.writeConflicts.Add(1)
	default:
		w.acked.add(resp.Header.Revision)
		w.stats.writes.Add(1)
	}
}

func (w *writer) put(k bench.Kind, key, ns, name, tier string, size int) clientv3.Op {
	w.seq++
	meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("uid-%s-%s-%s", k.Name, ns, name)),
		CreationTimestamp: metav1.NewTime(time.Unix(1764892800, 0)),
		Labels:            map[string]string{"app": "robustness", "tier": tier},
		Annotations:       map[string]string{writeAnnotation: fmt.Sprintf("w%d.%d", w.id, w.seq)}}
	pad := strings.Repeat("x", size)
	var obj runtime.Object
	switch k.Resource {
	case "configmaps":
		obj = &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"config": pad}}
	case "secrets":
		obj = &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"secret": []byte(pad)}}
	case "pods":
		meta.Annotations["pad"] = pad
		obj = &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	default:
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.Group + "/" + k.Version, "kind": k.ObjectKind,
			"spec": map[string]any{"replicas": int64(size % 7), "pad": pad}}}
		u.SetName(name)
		u.SetNamespace(ns)
		u.SetUID(meta.UID)
		u.SetLabels(meta.Labels)
		u.SetAnnotations(meta.Annotations)
		u.SetCreationTimestamp(meta.CreationTimestamp)
		obj = u
	}
	var val []byte
	var err error
	if k.Custom {
		val, err = storagefmt.JSON(obj)
	} else {
		val, err = storagefmt.Protobuf(obj)
	}
	if err != nil {
		panic(fmt.Sprintf("BUG: cannot encode %s: %v", key, err))
	}
	return clientv3.OpPut(key, string(val))
}
