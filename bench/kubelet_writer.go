package bench

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// kubeletWriter writes the scenario's objects to etcd as kube-apiserver
// stores them (protobuf), and its write load.
type kubeletWriter struct {
	cli    *clientv3.Client
	cfg    KubeletConfig
	tp     kubeletTopology
	prefix string
	// Per Pod (index d*Replicas+j), touched only by the worker of its
	// shard: its generation (bumped by each replacement) and status
	// updates so far.
	gen, updates []int
	// Per node, touched only by its shard's worker: Lease renewals.
	renewals  []int
	rotations []atomic.Int64 // per Deployment: Secret rotations

	// acks, when set, records etcd's acknowledgement of every write
	// done by run (see kubeletAcks).
	acks *kubeletAcks

	mu  sync.Mutex
	err string
}

func newKubeletWriter(cli *clientv3.Client, cfg KubeletConfig, tp kubeletTopology) *kubeletWriter {
	pods := tp.deployments * cfg.Replicas
	return &kubeletWriter{cli: cli, cfg: cfg, tp: tp, prefix: strings.TrimSuffix(cfg.Prefix, "/"),
		gen: make([]int, pods), updates: make([]int, pods), renewals: make([]int, cfg.Nodes), rotations: make([]atomic.Int64, tp.deployments)}
}

func (w *kubeletWriter) fail(err error) {
	w.mu.Lock()
	if w.err == "" {
		w.err = err.Error()
	}
	w.mu.Unlock()
}

func (w *kubeletWriter) firstErr() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// stamp sets the write-time annotation on o, now, and returns the time.
func stamp(o metav1.Object) time.Time {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	now := time.Now()
	a[kubeletStampKey] = strconv.FormatInt(now.UnixNano(), 10)
	o.SetAnnotations(a)
	return now
}

// kv is one object to write: its etcd key (after the prefix) and value,
// and its stamp.
type kubeletKV struct {
	key, val string
	stamp    time.Time
}

func (w *kubeletWriter) encode(resource, ns string, o runtime.Object) (kubeletKV, error) {
	acc := o.(metav1.Object)
	at := stamp(acc)
	b, err := storagefmt.Protobuf(o)
	if err != nil {
		return kubeletKV{}, err
	}
	return kubeletKV{key: storagefmt.Key(w.prefix, resource, ns, acc.GetName()), val: string(b), stamp: at}, nil
}

// put writes o (a write of the given kind, for kubeletAcks) and records
// etcd's acknowledgement under the revision of its response, which is the
// object's new mod revision.
func (w *kubeletWriter) put(ctx context.Context, kind byte, resource, ns string, o runtime.Object) error {
	e, err := w.encode(resource, ns, o)
	if err != nil {
		return err
	}
	resp, err := w.cli.Put(ctx, e.key, e.val)
	if err != nil {
		return err
	}
	w.acks.acked(resp.Header.Revision, e.stamp, time.Now(), kind)
	return nil
}

// delete deletes key and records etcd's acknowledgement under the
// revision of its response (the deletion's, which the DELETED event
// carries), timed from just before the request.
func (w *kubeletWriter) delete(ctx context.Context, key string) error {
	start := time.Now()
	resp, err := w.cli.Delete(ctx, key)
	if err != nil {
		return err
	}
	if resp.Deleted > 0 {
		w.acks.acked(resp.Header.Revision, start, time.Now(), 'd')
	}
	return nil
}

// seed writes every object and returns etcd's revision after the last.
func (w *kubeletWriter) seed(ctx context.Context) (int64, error) {
	ch := make(chan func() (kubeletKV, error), 1024)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		for i := range kubeletNamespaces {
			ns := depNS(i)
			ch <- func() (kubeletKV, error) {
				return w.encode("namespaces", "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, UID: uid("ns", i)}})
			}
		}
		for n := range w.cfg.Nodes {
			ch <- func() (kubeletKV, error) { return w.encode("minions", "", kubeletNodeObject(n)) }
			ch <- func() (kubeletKV, error) { return w.encode("leases", kubeletLeaseNS, w.lease(n, 0)) }
		}
		for d := range w.tp.deployments {
			for i := range w.cfg.SecretsPerPod {
				ch <- func() (kubeletKV, error) { return w.encode("secrets", depNS(d), kubeletSecret(d, i, 0)) }
			}
			for i := range w.cfg.ConfigMapsPerPod {
				ch <- func() (kubeletKV, error) { return w.encode("configmaps", depNS(d), kubeletConfigMap(d, i)) }
			}
			for j := range w.cfg.Replicas {
				ch <- func() (kubeletKV, error) { return w.encode("pods", depNS(d), w.pod(d, j, 0, 0, false)) }
			}
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var ops []clientv3.Op
			flush := func() {
				if len(ops) == 0 {
					return
				}
				if _, err := w.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
				ops = ops[:0]
			}
			for f := range ch {
				e, err := f()
				if err != nil {
					select {
					case errc <- err:
					default:
					}
					continue
				}
				if ops = append(ops, clientv3.OpPut(e.key, e.val)); len(ops) == 64 {
					flush()
				}
			}
			flush()
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return 0, fmt.Errorf("cannot seed: %w", err)
	default:
	}
	resp, err := w.cli.Get(ctx, "lazybench-kubelet-revision")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func uid(kind string, i int) types.UID {
	return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", len(kind), i))
}

func kubeletNodeObject(n int) *corev1.Node {
	name := kubeletNode(n)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid("node", n), Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}},
		Spec:       corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", n/256, n%256)},
		Status: corev1.NodeStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: stormLocalAddr(n).String()}, {Type: corev1.NodeHostName, Address: name}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", ContainerRuntimeVersion: "containerd://2.1.0", OSImage: "Ubuntu 24.04", Architecture: "amd64", OperatingSystem: "linux"},
		},
	}
}

func (w *kubeletWriter) lease(n, renewal int) *coordinationv1.Lease {
	name := kubeletNode(n)
	renew := metav1.NewMicroTime(time.Unix(1_800_000_000+int64(renewal)*10, 0))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: kubeletLeaseNS, UID: uid("lease", n),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: name, UID: uid("node", n)}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: ptrTo(int32(40)), RenewTime: &renew},
	}
}

func kubeletSecret(d, i, rotation int) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: depSecret(d, i), Namespace: depNS(d), UID: uid("secret", d*16+i)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{"password": fmt.Appendf(nil, "%032d", rotation), "tls.key": []byte(strings.Repeat("k", 1200))},
	}
}

func kubeletConfigMap(d, i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: depConfigMap(d, i), Namespace: depNS(d), UID: uid("configmap", d*16+i)},
		Data:       map[string]string{"app.yaml": strings.Repeat("setting: value\n", 60)},
	}
}

func ptrTo[T any](v T) *T { return &v }

// podName is replica j of Deployment d in generation gen.
func podName(d, j, gen int) string { return fmt.Sprintf("dep-%05d-g%d-%02d", d, gen, j) }

// pod is replica j of Deployment d, generation gen, after updates status
// updates; deleting marks it for deletion (its last state).
func (w *kubeletWriter) pod(d, j, gen, updates int, deleting bool) *corev1.Pod {
	node := kubeletNode(w.tp.podNode(d, j))
	var vols []corev1.Volume
	var mounts []corev1.VolumeMount
	for i := range w.cfg.SecretsPerPod {
		vols = append(vols, corev1.Volume{Name: fmt.Sprintf("secret-%d", i), VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: depSecret(d, i)}}})
		mounts = append(mounts, corev1.VolumeMount{Name: fmt.Sprintf("secret-%d", i), MountPath: fmt.Sprintf("/etc/secret-%d", i), ReadOnly: true})
	}
	for i := range w.cfg.ConfigMapsPerPod {
		vols = append(vols, corev1.Volume{Name: fmt.Sprintf("config-%d", i), VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: depConfigMap(d, i)}}}})
		mounts = append(mounts, corev1.VolumeMount{Name: fmt.Sprintf("config-%d", i), MountPath: fmt.Sprintf("/etc/config-%d", i)})
	}
	created := metav1.NewTime(time.Unix(1_800_000_000+int64(gen), 0))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(d, j, gen), Namespace: depNS(d), UID: uid("pod", (d*w.cfg.Replicas+j)*1000+gen%1000),
			Labels:            map[string]string{"app": fmt.Sprintf("dep-%05d", d), "pod-template-hash": fmt.Sprintf("g%d", gen)},
			CreationTimestamp: created,
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("dep-%05d-g%d", d, gen), UID: uid("rs", d*1000+gen%1000), Controller: ptrTo(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Volumes: vols, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:v1.2.3", VolumeMounts: mounts,
			Ports:     []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, HostIP: stormLocalAddr(w.tp.podNode(d, j)).String()},
	}
	if updates > 0 {
		started := metav1.NewTime(created.Add(time.Duration(updates) * time.Second))
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIP = fmt.Sprintf("10.%d.%d.%d", d%250, j, 1+gen%250)
		p.Status.PodIPs = []corev1.PodIP{{IP: p.Status.PodIP}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: int32(updates), Image: "registry.example/app:v1.2.3",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
	}
	if deleting {
		t := metav1.NewTime(created.Add(time.Hour))
		p.DeletionTimestamp = &t
		p.DeletionGracePeriodSeconds = ptrTo(int64(30))
	}
	return p
}

// kubeletOp is one scheduled write.
type kubeletOp struct {
	at    time.Duration
	kind  byte // 'l' lease, 'p' pod status, 'r' rollout of a replica, 's' secret rotation
	index int  // node, Pod, or Deployment
}

// schedule lists the window's writes in time order.
func (w *kubeletWriter) schedule(dur time.Duration) []kubeletOp {
	var ops []kubeletOp
	n := w.cfg.Nodes
	for k := 0; ; k++ {
		base := time.Duration(k) * w.cfg.LeaseEvery
		if base >= dur {
			break
		}
		for i := range n {
			if at := base + time.Duration(i)*w.cfg.LeaseEvery/time.Duration(n); at < dur {
				ops = append(ops, kubeletOp{at: at, kind: 'l', index: i})
			}
		}
	}
	pods := len(w.gen)
	step := w.cfg.PodUpdateEvery / time.Duration(pods)
	for i := 0; step > 0 && time.Duration(i)*step < dur; i++ {
		ops = append(ops, kubeletOp{at: time.Duration(i) * step, kind: 'p', index: (i * 7919) % pods})
	}
	for k := 0; ; k++ {
		at := w.cfg.RolloutEvery/2 + time.Duration(k)*w.cfg.RolloutEvery
		if at >= dur {
			break
		}
		d := (k * 104729) % w.tp.deployments
		for j := range w.cfg.Replicas {
			ops = append(ops, kubeletOp{at: at, kind: 'r', index: d*w.cfg.Replicas + j})
		}
		ops = append(ops, kubeletOp{at: at, kind: 's', index: d})
	}
	sort.SliceStable(ops, func(a, b int) bool { return ops[a].at < ops[b].at })
	return ops
}

const kubeletWriters = 16

// windowWrites is how many etcd writes the window of dur does.
func (w *kubeletWriter) windowWrites(dur time.Duration) int {
	n := 0
	for _, op := range w.schedule(dur) {
		switch op.kind {
		case 'r':
			n += 3
		case 's':
			if w.cfg.SecretsPerPod > 0 {
				n++
			}
		default:
			n++
		}
	}
	return n
}

// run performs the window's writes on schedule and returns how many it
// wrote and the watch events they must deliver.
func (w *kubeletWriter) run(ctx context.Context, dur time.Duration) (writes, expected int64) {
	ops := w.schedule(dur)
	var nw, ne atomic.Int64
	chans := make([]chan kubeletOp, kubeletWriters)
	var wg sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan kubeletOp, 4096)
		wg.Go(func() {
			for op := range chans[i] {
				wr, ev, err := w.do(ctx, op)
				if err != nil && ctx.Err() == nil {
					w.fail(err)
				}
				nw.Add(wr)
				ne.Add(ev)
			}
		})
	}
	start := time.Now()
	w.acks.begin(start)
	for _, op := range ops {
		if d := op.at - time.Since(start); d > time.Millisecond {
			sleepCtx(ctx, d)
		}
		if ctx.Err() != nil {
			break
		}
		shard := op.index
		if op.kind == 's' {
			shard = op.index * 31
		}
		chans[shard%kubeletWriters] <- op
	}
	for _, c := range chans {
		close(c)
	}
	wg.Wait()
	return nw.Load(), ne.Load()
}

// do performs one op: the writes done and the events they must deliver.
func (w *kubeletWriter) do(ctx context.Context, op kubeletOp) (writes, events int64, err error) {
	switch op.kind {
	case 'l':
		w.renewals[op.index]++
		return 1, 1, w.put(ctx, 'l', "leases", kubeletLeaseNS, w.lease(op.index, w.renewals[op.index]))
	case 'p':
		d, j := op.index/w.cfg.Replicas, op.index%w.cfg.Replicas
		w.updates[op.index]++
		return 1, 1, w.put(ctx, 'p', "pods", depNS(d), w.pod(d, j, w.gen[op.index], w.updates[op.index], false))
	case 'r':
		// The Pod is marked for deletion (MODIFIED), deleted (DELETED)
		// and replaced by a new one on the same node (ADDED).
		d, j := op.index/w.cfg.Replicas, op.index%w.cfg.Replicas
		gen, upd := w.gen[op.index], w.updates[op.index]
		if err := w.put(ctx, 'm', "pods", depNS(d), w.pod(d, j, gen, upd, true)); err != nil {
			return 0, 0, err
		}
		if err := w.delete(ctx, storagefmt.Key(w.prefix, "pods", depNS(d), podName(d, j, gen))); err != nil {
			return 1, 1, err
		}
		w.gen[op.index]++
		w.updates[op.index] = 0
		return 3, 3, w.put(ctx, 'c', "pods", depNS(d), w.pod(d, j, gen+1, 0, false))
	case 's':
		r := int(w.rotations[op.index].Add(1))
		i := r % max(1, w.cfg.SecretsPerPod)
		if w.cfg.SecretsPerPod == 0 {
			return 0, 0, nil
		}
		return 1, int64(w.tp.mountedBy()), w.put(ctx, 's', "secrets", depNS(op.index), kubeletSecret(op.index, i, r))
	}
	return 0, 0, fmt.Errorf("unknown op %c", op.kind)
}
