package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
)

// frontctl is a small client-go controller, one replica of which the
// test binary runs when frontCtlEnv is set (TestMain hands over to
// runFrontCtl before building anything): informers on ConfigMaps,
// Deployments and Widgets (a CRD with a status subresource) in one
// namespace, leader election on a coordination.k8s.io Lease, and, while
// leading, a reconcile of every ConfigMap labelled ctlSourceLabel=true
// into a Deployment and a Widget of its name, both with the status it
// computes (status subresource writes), and an Event on the Widget each
// time the Widget's status changes. Built-in kinds go as protobuf, the
// Widget as JSON, as controllers do.
//
// It reports on standard error, one line each: "frontctl ID: synced",
// "... leading", "... refused CODE METHOD URL" for every answer that
// refuses a request (401, 403, 405, 406, 413, 415, 429, 5xx, or no
// answer), "... conflict METHOD URL" for a 409.
const frontCtlEnv = "LAZYAPI_FRONTCTL"

// frontCtlConfig is a replica's configuration (frontCtlEnv's JSON).
type frontCtlConfig struct {
	Server, Token, Namespace, ID string
}

var widgetGVR = schema.GroupVersionResource{Group: "frontctl.lazyapi.io", Version: "v1", Resource: "widgets"}

const (
	ctlSourceLabel = "frontctl.lazyapi.io/source" // "true" on the ConfigMaps frontctl reconciles
	ctlOwnerLabel  = "frontctl.lazyapi.io/owner"  // on what it derives: the source's name
	ctlLease       = "frontctl"
)

// runFrontCtl runs a replica until it is killed (or loses its lease); it
// returns the process's exit code.
func runFrontCtl(env string) int {
	var c frontCtlConfig
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		fmt.Fprintf(os.Stderr, "frontctl: %s: %v\n", frontCtlEnv, err)
		return 2
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "frontctl "+c.ID+": "+format+"\n", args...)
	}
	cfg := &rest.Config{Host: c.Server, BearerToken: c.Token, QPS: 50, Burst: 100, UserAgent: "frontctl/" + c.ID,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // loopback test servers
		WrapTransport:   func(rt http.RoundTripper) http.RoundTripper { return refusalLog{rt, say} }}
	proto := rest.CopyConfig(cfg)
	proto.ContentType = "application/vnd.kubernetes.protobuf"
	proto.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cs := kubernetes.NewForConfigOrDie(proto)
	ctl := newFrontCtl(cs, dynamic.NewForConfigOrDie(cfg), c.Namespace, c.ID, say)
	ctx := context.Background()
	if !ctl.start(ctx) {
		say("informers did not sync")
		return 1
	}
	say("synced")
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Name: ctlLease, Namespace: c.Namespace},
		Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: c.ID}}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock: lock, Name: ctlLease, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { say("leading"); ctl.run(ctx) },
			OnStoppedLeading: func() { say("stopped leading") },
		},
	})
	return 1
}

// refusalLog reports refused requests and conflicts (see frontCtlEnv).
type refusalLog struct {
	rt  http.RoundTripper
	say func(string, ...any)
}

func (r refusalLog) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	switch {
	case err != nil:
		r.say("refused 0 %s %s: %v", req.Method, req.URL, err)
	case resp.StatusCode == http.StatusConflict:
		r.say("conflict %s %s", req.Method, req.URL)
	case resp.StatusCode >= 500, resp.StatusCode == 401, resp.StatusCode == 403, resp.StatusCode == 405,
		resp.StatusCode == 406, resp.StatusCode == 413, resp.StatusCode == 415, resp.StatusCode == 429:
		r.say("refused %d %s %s", resp.StatusCode, req.Method, req.URL)
	}
	return resp, err
}

// frontCtl is the controller of one replica.
type frontCtl struct {
	cs      kubernetes.Interface
	dc      dynamic.Interface
	ns, id  string
	say     func(string, ...any)
	cms     corelisters.ConfigMapLister
	deps    appslisters.DeploymentLister
	widgets cache.GenericLister
	queue   workqueue.TypedRateLimitingInterface[string] // source names
	synced  []cache.InformerSynced
	start   func(ctx context.Context) bool // starts the informers, waits for their sync
}

func newFrontCtl(cs kubernetes.Interface, dc dynamic.Interface, ns, id string, say func(string, ...any)) *frontCtl {
	c := &frontCtl{cs: cs, dc: dc, ns: ns, id: id, say: say,
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	dfactory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, ns, nil)
	cmInf, depInf, wInf := factory.Core().V1().ConfigMaps(), factory.Apps().V1().Deployments(), dfactory.ForResource(widgetGVR)
	c.cms, c.deps, c.widgets = cmInf.Lister(), depInf.Lister(), wInf.Lister()
	byName := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			if _, name, err := cache.SplitMetaNamespaceKey(key); err == nil {
				c.queue.Add(name)
			}
		}
	}
	byOwner := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, err := metaAccessor(obj); err == nil && m.GetLabels()[ctlOwnerLabel] != "" {
			c.queue.Add(m.GetLabels()[ctlOwnerLabel])
		}
	}
	handlers := func(f func(any)) cache.ResourceEventHandler {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n any) { f(n) }, DeleteFunc: f}
	}
	for _, h := range []struct {
		inf cache.SharedIndexInformer
		f   func(any)
	}{{cmInf.Informer(), byName}, {depInf.Informer(), byOwner}, {wInf.Informer(), byOwner}} {
		if _, err := h.inf.AddEventHandler(handlers(h.f)); err != nil {
			panic(err)
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	c.start = func(ctx context.Context) bool {
		factory.Start(ctx.Done())
		dfactory.Start(ctx.Done())
		return cache.WaitForCacheSync(ctx.Done(), c.synced...)
	}
	return c
}

func metaAccessor(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("cannot read metadata of %T", obj)
	}
	return m, nil
}

// run works the queue with two workers until ctx ends.
func (c *frontCtl) run(ctx context.Context) {
	go func() { <-ctx.Done(); c.queue.ShutDown() }()
	done := make(chan struct{}, 2)
	for range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				name, quit := c.queue.Get()
				if quit {
					return
				}
				if err := c.reconcile(ctx, name); err != nil {
					c.say("reconcile %s: %v", name, err)
					c.queue.AddRateLimited(name)
				} else {
					c.queue.Forget(name)
				}
				c.queue.Done(name)
			}
		}()
	}
	<-done
	<-done
}

// reconcile makes name's Deployment and Widget what its ConfigMap asks
// (data.replicas), or removes them when it is gone or no longer labelled.
func (c *frontCtl) reconcile(ctx context.Context, name string) error {
	cm, err := c.cms.ConfigMaps(c.ns).Get(name)
	if apierrors.IsNotFound(err) || err == nil && cm.Labels[ctlSourceLabel] != "true" {
		return c.remove(ctx, name)
	}
	if err != nil {
		return err
	}
	r, err := strconv.Atoi(cm.Data["replicas"])
	if err != nil {
		c.say("source %s: replicas %q: %v", name, cm.Data["replicas"], err)
		return nil
	}
	d, err := c.ensureDeployment(ctx, name, int32(r))
	if err != nil {
		return err
	}
	w, err := c.ensureWidget(ctx, name, int64(r))
	if err != nil {
		return err
	}
	return c.widgetStatus(ctx, w, d)
}

// remove deletes name's Deployment and Widget if the informers have them.
func (c *frontCtl) remove(ctx context.Context, name string) error {
	if _, err := c.deps.Deployments(c.ns).Get(name); err == nil {
		if err := c.cs.AppsV1().Deployments(c.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if _, err := c.widgets.ByNamespace(c.ns).Get(name); err == nil {
		if err := c.dc.Resource(widgetGVR).Namespace(c.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// ensureDeployment creates or scales name's Deployment to r replicas and
// writes its status (no kube-controller-manager runs: frontctl plays the
// Deployment controller's part and reports r replicas ready).
func (c *frontCtl) ensureDeployment(ctx context.Context, name string, r int32) (*appsv1.Deployment, error) {
	api := c.cs.AppsV1().Deployments(c.ns)
	d, err := c.deps.Deployments(c.ns).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		labels := map[string]string{"app": name}
		d, err = api.Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{ctlOwnerLabel: name}},
			Spec: appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10"}}}}},
		}, metav1.CreateOptions{FieldManager: "frontctl"})
	case err == nil && *d.Spec.Replicas != r:
		d = d.DeepCopy()
		d.Spec.Replicas = &r
		d, err = api.Update(ctx, d, metav1.UpdateOptions{FieldManager: "frontctl"})
	}
	if err != nil {
		return nil, err
	}
	if d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == r {
		return d, nil
	}
	d = d.DeepCopy()
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: r, UpdatedReplicas: r, ReadyReplicas: r, AvailableReplicas: r}
	return api.UpdateStatus(ctx, d, metav1.UpdateOptions{FieldManager: "frontctl"})
}

// ensureWidget creates name's Widget or sets its spec.replicas to r.
func (c *frontCtl) ensureWidget(ctx context.Context, name string, r int64) (*unstructured.Unstructured, error) {
	api := c.dc.Resource(widgetGVR).Namespace(c.ns)
	obj, err := c.widgets.ByNamespace(c.ns).Get(name)
	if apierrors.IsNotFound(err) {
		return api.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "frontctl.lazyapi.io/v1", "kind": "Widget",
			"metadata": map[string]any{"name": name, "labels": map[string]any{ctlOwnerLabel: name}},
			"spec":     map[string]any{"source": name, "replicas": r},
		}}, metav1.CreateOptions{FieldManager: "frontctl"})
	}
	if err != nil {
		return nil, err
	}
	w := obj.(*unstructured.Unstructured)
	if have, _, _ := unstructured.NestedInt64(w.Object, "spec", "replicas"); have == r {
		return w, nil
	}
	w = w.DeepCopy()
	if err := unstructured.SetNestedField(w.Object, r, "spec", "replicas"); err != nil {
		return nil, err
	}
	return api.Update(ctx, w, metav1.UpdateOptions{FieldManager: "frontctl"})
}

// widgetStatus writes w's status from d's (the Widget's status
// subresource) and posts an Event on w when it changed.
func (c *frontCtl) widgetStatus(ctx context.Context, w *unstructured.Unstructured, d *appsv1.Deployment) error {
	want := map[string]any{"phase": "Ready", "readyReplicas": int64(d.Status.ReadyReplicas),
		"observedGeneration": w.GetGeneration(), "deploymentGeneration": d.Generation}
	if have, _, _ := unstructured.NestedMap(w.Object, "status"); reflect.DeepEqual(have, want) {
		return nil
	}
	w = w.DeepCopy()
	if err := unstructured.SetNestedMap(w.Object, want, "status"); err != nil {
		return err
	}
	w, err := c.dc.Resource(widgetGVR).Namespace(c.ns).UpdateStatus(ctx, w, metav1.UpdateOptions{FieldManager: "frontctl"})
	if err != nil {
		return err
	}
	now := metav1.Now()
	_, err = c.cs.CoreV1().Events(c.ns).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", w.GetName(), time.Now().UnixNano())},
		InvolvedObject: corev1.ObjectReference{APIVersion: "frontctl.lazyapi.io/v1", Kind: "Widget", Namespace: c.ns,
			Name: w.GetName(), UID: w.GetUID(), ResourceVersion: w.GetResourceVersion()},
		Reason: "Synced", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "frontctl"},
		Message:        fmt.Sprintf("%d replicas ready", d.Status.ReadyReplicas),
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	return err
}
