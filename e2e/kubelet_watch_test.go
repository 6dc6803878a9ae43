package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// kubeletWatch is one watch a simulated kubelet holds, with the events the
// writes so far must deliver to it (computed from the objects' states as
// kube-apiserver's watch cache computes them: a change is MODIFIED when the
// object matched before and after, ADDED when it starts to match, DELETED
// with its previous state when it stops).
type kubeletWatch struct {
	desc     string
	resource string // the etcd key segment: pods, minions, leases, secrets, configmaps
	match    func(runtime.Object) bool
	w        watch.Interface
	want     []kubeletEvent
}

type kubeletEvent struct {
	typ       watch.EventType
	ns, name  string
	seq       string // the "seq" label of the state the event carries
	rv        int64
	fromState string // what the event was computed from, for failure messages
}

// kubeletWorld writes objects to etcd as kube-apiserver stores them
// (protobuf) and keeps their states to derive the events each watch must get.
type kubeletWorld struct {
	t       *testing.T
	etcd    *etcdtest.Server
	seq     int
	state   map[string]runtime.Object // by etcd key
	watches []*kubeletWatch
}

func (k *kubeletWorld) key(resource string, o metav1.Object) string {
	return storagefmt.Key("/registry", resource, o.GetNamespace(), o.GetName())
}

// put stamps o with the next seq label, stores it and records the event
// every watch of its resource must get; it returns the write's revision.
func (k *kubeletWorld) put(resource string, o runtime.Object) int64 {
	k.t.Helper()
	acc, err := meta.Accessor(o)
	if err != nil {
		k.t.Fatal(err)
	}
	k.seq++
	labels := map[string]string{}
	for l, v := range acc.GetLabels() {
		labels[l] = v
	}
	labels["seq"] = strconv.Itoa(k.seq)
	acc.SetLabels(labels)
	val, err := storagefmt.Protobuf(o)
	if err != nil {
		k.t.Fatal(err)
	}
	key := k.key(resource, acc)
	resp, err := k.etcd.Client.Put(context.Background(), key, string(val))
	if err != nil {
		k.t.Fatal(err)
	}
	k.record(resource, key, o, resp.Header.Revision)
	return resp.Header.Revision
}

// del deletes the object at resource/ns/name and records the events.
func (k *kubeletWorld) del(resource, ns, name string) {
	k.t.Helper()
	key := storagefmt.Key("/registry", resource, ns, name)
	resp, err := k.etcd.Client.Delete(context.Background(), key)
	if err != nil || resp.Deleted != 1 {
		k.t.Fatalf("delete %s: %v (%d deleted)", key, err, resp.Deleted)
	}
	k.record(resource, key, nil, resp.Header.Revision)
}

func (k *kubeletWorld) record(resource, key string, cur runtime.Object, rev int64) {
	old := k.state[key]
	for _, w := range k.watches {
		if w.resource != resource {
			continue
		}
		was := old != nil && w.match(old)
		is := cur != nil && w.match(cur)
		var typ watch.EventType
		from := cur
		switch {
		case was && is:
			typ = watch.Modified
		case is:
			typ = watch.Added
		case was:
			typ, from = watch.Deleted, old
		default:
			continue
		}
		acc, _ := meta.Accessor(from)
		w.want = append(w.want, kubeletEvent{typ: typ, ns: acc.GetNamespace(), name: acc.GetName(), seq: acc.GetLabels()["seq"], rv: rev})
	}
	if cur == nil {
		delete(k.state, key)
	} else {
		k.state[key] = cur.DeepCopyObject()
	}
}

// check reads every watch's expected events (in order, nothing else
// before the last) within timeout.
func (k *kubeletWorld) check(timeout time.Duration) {
	k.t.Helper()
	deadline := time.Now().Add(timeout)
	var mu sync.Mutex
	var failures []string
	total, got := 0, 0
	var wg sync.WaitGroup
	for _, w := range k.watches {
		total += len(w.want)
		wg.Go(func() {
			n, err := w.read(deadline)
			mu.Lock()
			defer mu.Unlock()
			got += n
			if err != nil {
				failures = append(failures, err.Error())
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		if len(failures) > 10 {
			failures = append(failures[:10], fmt.Sprintf("... and %d more", len(failures)-10))
		}
		k.t.Fatalf("%d of %d watches wrong; %d of %d events delivered as expected:\n%s", len(failures), len(k.watches), got, total, strings.Join(failures, "\n"))
	}
	k.t.Logf("%d watches, %d events, each as expected", len(k.watches), total)
}

// read reads the watch's events; n is how many matched the expectation
// before the first mismatch.
func (w *kubeletWatch) read(deadline time.Time) (n int, err error) {
	for i, want := range w.want {
		var ev watch.Event
		ok := true
		for ok && (ev.Type == "" || ev.Type == watch.Bookmark) { // bookmarks (asked for, as reflectors do) may come any time
			select {
			case ev, ok = <-w.w.ResultChan():
			case <-time.After(time.Until(deadline)):
				return i, fmt.Errorf("%s: %d of %d events; next wanted %s %s/%s seq %s at rv %d, none came", w.desc, i, len(w.want), want.typ, want.ns, want.name, want.seq, want.rv)
			}
		}
		if !ok {
			return i, fmt.Errorf("%s: watch closed after %d of %d events", w.desc, i, len(w.want))
		}
		acc, aerr := meta.Accessor(ev.Object)
		if aerr != nil {
			return i, fmt.Errorf("%s: event %d: %s %T (%v)", w.desc, i, ev.Type, ev.Object, ev.Object)
		}
		got := kubeletEvent{typ: ev.Type, ns: acc.GetNamespace(), name: acc.GetName(), seq: acc.GetLabels()["seq"]}
		got.rv, _ = strconv.ParseInt(acc.GetResourceVersion(), 10, 64)
		if got != want {
			return i, fmt.Errorf("%s: event %d of %d = %s %s/%s seq %s rv %d, want %s %s/%s seq %s rv %d", w.desc, i, len(w.want),
				got.typ, got.ns, got.name, got.seq, got.rv, want.typ, want.ns, want.name, want.seq, want.rv)
		}
	}
	return len(w.want), nil
}

func kubeletPod(ns, name, node, phase string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPhase(phase), PodIPs: []corev1.PodIP{{IP: "10.1.2.3"}}},
	}
}

// TestKubeletWatches: the watches of 20 simulated kubelets, served by the
// lazyapi binary from its watch cache over client-go (protobuf as kubelets
// read, JSON for half the nodes): each node's Pods by
// fieldSelector=spec.nodeName (cluster-wide), its Node and its Lease by
// metadata.name, and the Secrets and ConfigMaps its Pods mount, one watch
// each by metadata.name, shared between nodes. Objects are written to etcd
// as kube-apiserver stores them (protobuf). Every watch gets exactly the
// events of its objects, in order, with their states and resourceVersions:
// ADDED when a Pod is bound to (or moves onto) the node, MODIFIED for each
// status update, DELETED with the last state when it is deleted or moves
// off, renewals of its Lease, its Node's status, rotations of the Secrets
// it mounts; and nothing of other nodes' or unmounted objects. (A trial of
// issue 26 saw such Pod watches get 0 of 272 events at 20 nodes.)
func TestKubeletWatches(t *testing.T) {
	const nodes, deployments = 20, 5
	etcdSrv := etcdtest.Start(t)
	k := &kubeletWorld{t: t, etcd: etcdSrv, state: map[string]runtime.Object{}}
	node := func(i int) string { return fmt.Sprintf("node-%d", i) }
	podNS := func(i int) string { return []string{"ns-a", "ns-b"}[i%2] }
	// Deployment d mounts Secrets sec-d-0, sec-d-1 and ConfigMap cm-d in
	// namespace apps; node i runs Pods of deployments i%5 and (i+1)%5.
	mounts := func(i int) []int { return []int{i % deployments, (i + 1) % deployments} }
	for d := range deployments {
		for j := range 2 {
			k.put("secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sec-%d-%d", d, j), Namespace: "apps"}, Data: map[string][]byte{"k": []byte("v0")}})
		}
		k.put("configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", d), Namespace: "apps"}, Data: map[string]string{"k": "v0"}})
	}
	for i := range nodes {
		k.put("minions", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node(i)}, Status: corev1.NodeStatus{Phase: corev1.NodeRunning}})
		k.put("leases", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node(i), Namespace: "kube-node-lease"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr(node(i))}})
	}
	r0 := k.put("pods", kubeletPod("ns-a", "before-watches", node(0), "Running"))

	p := start(t, "--etcd-servers="+etcdSrv.Endpoint)
	for _, res := range []string{"pods", "nodes", "leases.coordination.k8s.io", "secrets", "configmaps"} {
		deadline := time.Now().Add(60 * time.Second)
		for scrape(p.URL, `lazyapi_cache_state{resource="`+res+`"}`) != 2 {
			if time.Now().After(deadline) {
				t.Fatalf("%s not cached within 60s", res)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	protoCS := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.URL, QPS: -1, ContentConfig: rest.ContentConfig{
		ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/vnd.kubernetes.protobuf"}})
	jsonCS := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.URL, QPS: -1})
	nameIs := func(ns, name string) func(runtime.Object) bool {
		return func(o runtime.Object) bool {
			acc, _ := meta.Accessor(o)
			return acc.GetNamespace() == ns && acc.GetName() == name
		}
	}
	opts := func(sel string) metav1.ListOptions {
		return metav1.ListOptions{ResourceVersion: strconv.FormatInt(r0, 10), FieldSelector: sel, AllowWatchBookmarks: true}
	}
	add := func(desc, resource string, match func(runtime.Object) bool, w watch.Interface, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		t.Cleanup(w.Stop)
		k.watches = append(k.watches, &kubeletWatch{desc: desc, resource: resource, match: match, w: w})
	}
	for i := range nodes {
		cs, format := protoCS, "protobuf"
		if i%2 == 1 {
			cs, format = jsonCS, "json"
		}
		n := node(i)
		w, err := cs.CoreV1().Pods("").Watch(ctx, opts("spec.nodeName="+n))
		add(format+" pods spec.nodeName="+n, "pods", func(o runtime.Object) bool { return o.(*corev1.Pod).Spec.NodeName == n }, w, err)
		w, err = cs.CoreV1().Nodes().Watch(ctx, opts("metadata.name="+n))
		add(format+" node "+n, "minions", nameIs("", n), w, err)
		w, err = cs.CoordinationV1().Leases("kube-node-lease").Watch(ctx, opts("metadata.name="+n))
		add(format+" lease "+n, "leases", nameIs("kube-node-lease", n), w, err)
		for _, d := range mounts(i) {
			for j := range 2 {
				name := fmt.Sprintf("sec-%d-%d", d, j)
				w, err = cs.CoreV1().Secrets("apps").Watch(ctx, opts("metadata.name="+name))
				add(format+" "+n+" secret "+name, "secrets", nameIs("apps", name), w, err)
			}
			name := fmt.Sprintf("cm-%d", d)
			w, err = cs.CoreV1().ConfigMaps("apps").Watch(ctx, opts("metadata.name="+name))
			add(format+" "+n+" configmap "+name, "configmaps", nameIs("apps", name), w, err)
		}
	}
	// Every watch is registered with the cache's index (none falls back to
	// a scan of every change).
	want := map[string]int{"pods": nodes, "nodes": nodes, "leases.coordination.k8s.io": nodes, "secrets": nodes * 4, "configmaps": nodes * 2}
	for res, n := range want {
		deadline := time.Now().Add(30 * time.Second)
		for scrape(p.URL, `lazyapi_cache_watchers_indexed{resource="`+res+`"}`) != float64(n) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v indexed watchers, want %d", res, scrape(p.URL, `lazyapi_cache_watchers_indexed{resource="`+res+`"}`), n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Pods: created unscheduled and bound by the scheduler, created bound,
	// status updates, one moved to the next node, deleted; Pods on a node
	// nobody watches.
	for i := range nodes {
		ns, a, b := podNS(i), fmt.Sprintf("p-%d-a", i), fmt.Sprintf("p-%d-b", i)
		k.put("pods", kubeletPod(ns, a, "", "Pending"))
		k.put("pods", kubeletPod(ns, a, node(i), "Pending"))
		k.put("pods", kubeletPod(ns, b, node(i), "Pending"))
		k.put("pods", kubeletPod(ns, fmt.Sprintf("p-%d-elsewhere", i), "node-unwatched", "Pending"))
	}
	for i := range nodes {
		ns := podNS(i)
		k.put("pods", kubeletPod(ns, fmt.Sprintf("p-%d-a", i), node(i), "Running"))
		k.put("pods", kubeletPod(ns, fmt.Sprintf("p-%d-b", i), node(i), "Running"))
		k.put("minions", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node(i)}, Status: corev1.NodeStatus{Phase: corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	}
	for renewal := range 2 {
		for i := range nodes {
			k.put("leases", &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node(i), Namespace: "kube-node-lease"},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr(node(i)), LeaseDurationSeconds: ptr(int32(40 + renewal))}})
		}
	}
	for i := range nodes {
		k.put("pods", kubeletPod(podNS(i), fmt.Sprintf("p-%d-b", i), node((i+1)%nodes), "Running")) // off node i, onto i+1
	}
	for d := range deployments { // a rotation, and objects nobody mounts
		k.put("secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sec-%d-0", d), Namespace: "apps"}, Data: map[string][]byte{"k": []byte("v1")}})
		k.put("configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", d), Namespace: "apps"}, Data: map[string]string{"k": "v1"}})
		k.put("secrets", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sec-%d-0", d), Namespace: "other"}})
		k.put("configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unmounted-%d", d), Namespace: "apps"}})
	}
	for i := range nodes {
		ns := podNS(i)
		k.put("pods", kubeletPod(ns, fmt.Sprintf("p-%d-a", i), node(i), "Succeeded"))
		k.del("pods", ns, fmt.Sprintf("p-%d-a", i))
		k.del("pods", ns, fmt.Sprintf("p-%d-b", i))
	}
	k.del("secrets", "apps", "sec-0-1")
	k.check(60 * time.Second)
}

func ptr[T any](v T) *T { return &v }
