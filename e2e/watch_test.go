package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// putConfigMap writes cm into etcd as kube-apiserver would and returns the
// revision of the write.
func putConfigMap(t *testing.T, ctx context.Context, cli *clientv3.Client, cm *corev1.ConfigMap) int64 {
	t.Helper()
	val, err := storagefmt.Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(ctx, storagefmt.Key("/registry", "configmaps", cm.Namespace, cm.Name), string(val))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestWatch watches ConfigMaps through client-go while they are written to
// etcd behind lazyapi's back (as kube-apiserver would), runs an informer, and
// checks that SIGTERM ends open watches promptly.
func TestWatch(t *testing.T) {
	etcdSrv, _ := seededEtcd(t)
	p := start(t, "--etcd-servers="+etcdSrv.Endpoint)
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.URL, QPS: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kv := etcdSrv.Client

	t.Run("events", func(t *testing.T) { checkWatchEvents(t, ctx, cs, kv) })

	t.Run("informer", func(t *testing.T) {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("team-b"))
		inf := f.Core().V1().ConfigMaps().Informer()
		stop := make(chan struct{})
		defer func() { close(stop); f.Shutdown() }()
		f.Start(stop)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		putConfigMap(t, ctx, kv, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "informed", Namespace: "team-b", UID: "uid-informed"}})
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, ok, _ := inf.GetStore().GetByKey("team-b/informed"); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("informer did not see a ConfigMap written to etcd within 30s")
			}
			time.Sleep(50 * time.Millisecond) // polling the informer's store
		}
	})

	t.Run("SIGTERM ends watches", func(t *testing.T) {
		w, err := cs.CoreV1().ConfigMaps("").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		start := time.Now()
		if err := p.stop(20 * time.Second); err != nil {
			t.Fatalf("exit with an open watch: %v\nstderr:\n%s", err, p.stderr)
		}
		t.Logf("exited %s after SIGTERM with an open watch", time.Since(start).Round(time.Millisecond))
		for range w.ResultChan() {
			// drain until the server closes the stream
		}
	})
}

// checkWatchEvents watches ConfigMaps in team-a from a list's
// resourceVersion and writes, updates and deletes one in etcd.
func checkWatchEvents(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, kv *clientv3.Client) {
	next := func(t *testing.T, w watch.Interface) watch.Event {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			return ev
		case <-time.After(30 * time.Second):
			t.Fatal("no watch event within 30s")
		}
		return watch.Event{}
	}

	list, err := cs.CoreV1().ConfigMaps("team-a").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps("team-a").Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: "team-a", UID: "uid-watched", Labels: map[string]string{"app": "w"}},
		Data:       map[string]string{"v": "1"},
	}
	rev := putConfigMap(t, ctx, kv, cm)
	ev := next(t, w)
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || got.Name != "watched" || got.Data["v"] != "1" || got.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("event = %s %+v, want ADDED watched at rv %d", ev.Type, ev.Object, rev)
	}
	cm.Data["v"] = "2"
	rev = putConfigMap(t, ctx, kv, cm)
	ev = next(t, w)
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Modified || !ok || got.Data["v"] != "2" || got.ResourceVersion != strconv.FormatInt(rev, 10) {
		t.Errorf("event = %s %+v, want MODIFIED v=2 at rv %d", ev.Type, ev.Object, rev)
	}
	del, err := kv.Delete(ctx, storagefmt.Key("/registry", "configmaps", "team-a", "watched"))
	if err != nil {
		t.Fatal(err)
	}
	ev = next(t, w)
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Deleted || !ok || got.Name != "watched" || got.ResourceVersion != strconv.FormatInt(del.Header.Revision, 10) {
		t.Errorf("event = %s %+v, want DELETED watched at rv %d", ev.Type, ev.Object, del.Header.Revision)
	}
}

// TestWatchWithoutCache serves watches from etcd directly (--watch-cache=false).
func TestWatchWithoutCache(t *testing.T) {
	etcdSrv, _ := seededEtcd(t)
	p := start(t, "--etcd-servers="+etcdSrv.Endpoint, "--watch-cache=false")
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: p.URL, QPS: -1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	checkWatchEvents(t, ctx, cs, etcdSrv.Client)
	if m := string(httpGet(t, p.URL+"/metrics", "text/plain")); strings.Contains(m, "lazyapi_cache_budget_bytes") {
		t.Errorf("/metrics shows a watch cache with --watch-cache=false")
	}
}
