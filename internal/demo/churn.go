package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// DefaultChurnInterval is Churn's tick: a ConfigMap change every tick, an
// Event every second tick, a Deployment status change every third, the
// node Lease renewed every fifth (10 s, as a kubelet).
const DefaultChurnInterval = 2 * time.Second

// ChurnConfigMaps are the ConfigMaps Churn changes, in AppNamespace.
var ChurnConfigMaps = []string{generatedConfigMap(3), generatedConfigMap(7), generatedConfigMap(11)}

// generatedConfigMap is the name of the i-th generated ConfigMap
// (configMaps).
func generatedConfigMap(i int) string {
	return fmt.Sprintf("svc-%02d-%s-config-%04d", i%20, []string{"prod", "staging", "dev"}[i%3], i)
}

// eventTTL is kube-apiserver's default --event-ttl: its events are stored
// with an etcd lease of this length.
const eventTTL = time.Hour

// Churn keeps the demo cluster alive until ctx ends, writing as
// kube-apiserver would for a kubectl apply, a controller and a kubelet:
// every interval a ConfigMap of ChurnConfigMaps changes (its LOG_LEVEL and
// an annotation), every second interval an Event about the Deployment's
// Pods is created (under an etcd lease of an hour, as --event-ttl), every
// third the Deployment's status flips between all and all but one replica
// ready, and every fifth the node's Lease is renewed. Each update reads the
// object and writes it back only if unchanged since (as kube-apiserver's
// GuaranteedUpdate); an object that is gone is skipped. It returns ctx's
// error, or the first etcd error.
func Churn(ctx context.Context, cli *clientv3.Client, prefix string, interval time.Duration) error {
	if interval <= 0 {
		interval = DefaultChurnInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var lease clientv3.LeaseID
	var leaseAt time.Time
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		now := time.Now().UTC()
		cm := ChurnConfigMaps[tick%len(ChurnConfigMaps)]
		err := update(ctx, cli, storagefmt.Key(prefix, "configmaps", AppNamespace, cm), func(o runtime.Object) {
			c := o.(*corev1.ConfigMap)
			c.Data["LOG_LEVEL"] = []string{"info", "debug", "warn"}[tick%3]
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations["demo.lazyapi.io/churned-at"] = now.Format(time.RFC3339)
		})
		if err == nil && tick%2 == 1 {
			// kube-apiserver reuses a lease for events written close
			// together; a new one every ten minutes here.
			if lease == 0 || now.Sub(leaseAt) > 10*time.Minute {
				l, gerr := cli.Grant(ctx, int64(eventTTL/time.Second))
				if gerr != nil {
					return fmt.Errorf("cannot grant an event lease: %w", gerr)
				}
				lease, leaseAt = l.ID, now
			}
			err = putEvent(ctx, cli, prefix, lease, tick, now)
		}
		if err == nil && tick%3 == 2 {
			err = update(ctx, cli, storagefmt.Key(prefix, "deployments", AppNamespace, Deployment), func(o runtime.Object) {
				d := o.(*appsv1.Deployment)
				ready := int32(PodReplicas)
				if d.Status.ReadyReplicas == PodReplicas {
					ready--
				}
				d.Status.ReadyReplicas, d.Status.AvailableReplicas = ready, ready
				d.Status.UnavailableReplicas = PodReplicas - ready
			})
		}
		if err == nil && tick%5 == 4 {
			err = update(ctx, cli, storagefmt.Key(prefix, "leases", "kube-node-lease", NodeName), func(o runtime.Object) {
				o.(*coordinationv1.Lease).Spec.RenewTime = &metav1.MicroTime{Time: now}
			})
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// update reads key, applies change to its object and writes it back if the
// key is unchanged since; a missing key is skipped.
func update(ctx context.Context, cli *clientv3.Client, key string, change func(runtime.Object)) error {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	kv := resp.Kvs[0]
	obj, err := storagefmt.DecodeProtobuf(kv.Value)
	if err != nil {
		return fmt.Errorf("cannot decode %s: %w", key, err)
	}
	change(obj)
	val, err := storagefmt.Protobuf(obj)
	if err != nil {
		return err
	}
	_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(clientv3.OpPut(key, string(val))).Commit()
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", key, err)
	}
	return nil
}

// putEvent creates an Event about one of the Deployment's Pods, as a
// kubelet's, under the etcd lease.
func putEvent(ctx context.Context, cli *clientv3.Client, prefix string, lease clientv3.LeaseID, tick int, now time.Time) error {
	pod := fmt.Sprintf("%s-%s", ReplicaSet, []string{"7xkqp", "b2n4m", "zq9tw"}[tick%PodReplicas])
	var suffix [8]byte
	rand.Read(suffix[:])
	name := pod + "." + hex.EncodeToString(suffix[:])
	reasons := []struct{ reason, msg string }{
		{"Pulled", `Container image "nginx:1.27" already present on machine`},
		{"Started", "Started container nginx"},
		{"Unhealthy", "Readiness probe failed: HTTP probe failed with statuscode: 503"},
	}
	r := reasons[(tick/2)%len(reasons)]
	typ := corev1.EventTypeNormal
	if r.reason == "Unhealthy" {
		typ = corev1.EventTypeWarning
	}
	t := metav1.NewTime(now)
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: AppNamespace, UID: uid(name), CreationTimestamp: t},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: AppNamespace, Name: pod, APIVersion: "v1", FieldPath: "spec.containers{nginx}"},
		Reason:         r.reason, Message: r.msg, Type: typ,
		Source:         corev1.EventSource{Component: "kubelet", Host: NodeName},
		FirstTimestamp: t, LastTimestamp: t, Count: 1,
		ReportingController: "kubelet", ReportingInstance: NodeName,
	}
	val, err := storagefmt.Protobuf(ev)
	if err != nil {
		return err
	}
	key := storagefmt.Key(prefix, "events", AppNamespace, name)
	if _, err := cli.Put(ctx, key, string(val), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("cannot write %s: %w", key, err)
	}
	return nil
}
