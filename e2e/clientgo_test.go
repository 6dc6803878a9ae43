package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"

	"github.com/lazyapi/lazyapi/internal/demo"
)

// TestClientGo uses client-go's typed (JSON and protobuf), dynamic and
// metadata clients, the pager and an informer against the lazyapi binary.
func TestClientGo(t *testing.T) {
	etcd, objs := seededEtcd(t)
	p := start(t, "--etcd-servers="+etcd.Endpoint, "--list-page-size=64")
	cms := configMaps(t, objs)
	revs := modRevisions(t, etcd.Client, "/registry/")
	cfg := &rest.Config{Host: p.URL, QPS: -1}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, proto := range []bool{false, true} {
		name := "typed json"
		c := rest.CopyConfig(cfg)
		if proto {
			name = "typed protobuf"
			c.ContentType = runtime.ContentTypeProtobuf
			c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		}
		t.Run(name, func(t *testing.T) {
			cs, err := kubernetes.NewForConfig(c)
			if err != nil {
				t.Fatal(err)
			}
			list, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list configmaps: %v", err)
			}
			if len(list.Items) != len(cms) {
				t.Errorf("list configmaps: %d items, want %d", len(list.Items), len(cms))
			}
			for i := range list.Items {
				checkConfigMap(t, &list.Items[i], cms, revs, true)
			}
			o := matching(objs, "configmaps", "team-b", nil)[3]
			got, err := cs.CoreV1().ConfigMaps("team-b").Get(ctx, o.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get configmap: %v", err)
			}
			checkConfigMap(t, got, cms, revs, true)

			dep, err := cs.AppsV1().Deployments(demo.AppNamespace).Get(ctx, demo.Deployment, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get deployment: %v", err)
			}
			if dep.Status.ReadyReplicas != demo.PodReplicas || *dep.Spec.Replicas != demo.PodReplicas || dep.Spec.Template.Spec.Containers[0].Image != "nginx:1.27" {
				t.Errorf("deployment = spec %+v status %+v", dep.Spec, dep.Status)
			}
			pods, err := cs.CoreV1().Pods(demo.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + demo.Deployment})
			if err != nil {
				t.Fatalf("list pods: %v", err)
			}
			if len(pods.Items) != demo.PodReplicas {
				t.Errorf("%d pods, want %d", len(pods.Items), demo.PodReplicas)
			}
			for _, pod := range pods.Items {
				if pod.Status.Phase != corev1.PodRunning || pod.Spec.NodeName != demo.NodeName || len(pod.OwnerReferences) != 1 {
					t.Errorf("pod %s: phase %s node %s owners %v", pod.Name, pod.Status.Phase, pod.Spec.NodeName, pod.OwnerReferences)
				}
			}
			node, err := cs.CoreV1().Nodes().Get(ctx, demo.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("get node: %v", err)
			}
			if node.Status.NodeInfo.KubeletVersion != "v1.37.2" {
				t.Errorf("node kubelet version %q", node.Status.NodeInfo.KubeletVersion)
			}
			svc, err := cs.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
			if err != nil || svc.Spec.ClusterIP != "10.96.0.1" {
				t.Errorf("get service default/kubernetes = %v, %v", svc, err)
			}

			_, err = cs.CoreV1().ConfigMaps("team-a").Get(ctx, "no-such-cm", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				t.Errorf("get missing configmap: %v, want NotFound", err)
			}
			_, err = cs.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			if !apierrors.IsMethodNotSupported(err) {
				t.Errorf("create configmap: %v, want MethodNotAllowed", err)
			}
		})
	}

	t.Run("limit and continue", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(cfg)
		var (
			seen  []string
			opts  = metav1.ListOptions{Limit: 100}
			rv    string
			pages int
		)
		for {
			list, err := cs.CoreV1().ConfigMaps("").List(ctx, opts)
			if err != nil {
				t.Fatalf("page %d: %v", pages, err)
			}
			pages++
			if rv == "" {
				rv = list.ResourceVersion
			} else if list.ResourceVersion != rv {
				t.Errorf("page %d resourceVersion %s, want the first page's %s", pages, list.ResourceVersion, rv)
			}
			if len(list.Items) > 100 {
				t.Errorf("page %d has %d items, limit 100", pages, len(list.Items))
			}
			if list.Continue != "" {
				if rem := list.RemainingItemCount; rem == nil || int(*rem) != len(cms)-len(seen)-len(list.Items) {
					t.Errorf("page %d remainingItemCount = %v, want %d", pages, rem, len(cms)-len(seen)-len(list.Items))
				}
			}
			for _, cm := range list.Items {
				seen = append(seen, cm.Namespace+"/"+cm.Name)
			}
			if list.Continue == "" {
				break
			}
			opts.Continue = list.Continue
		}
		if len(seen) != len(cms) || len(slices.Compact(slices.Clone(seen))) != len(seen) {
			t.Errorf("paged list returned %d items (distinct %d), want %d", len(seen), len(slices.Compact(slices.Clone(seen))), len(cms))
		}
		if pages != (len(cms)+99)/100 {
			t.Errorf("%d pages, want %d", pages, (len(cms)+99)/100)
		}
	})

	t.Run("pager", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(cfg)
		pg := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps("").List(ctx, opts)
		})
		pg.PageSize = 70
		n := 0
		err := pg.EachListItem(ctx, metav1.ListOptions{}, func(runtime.Object) error { n++; return nil })
		if err != nil || n != len(cms) {
			t.Errorf("pager saw %d items, err %v; want %d", n, err, len(cms))
		}
	})

	t.Run("dynamic", func(t *testing.T) {
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: demo.CRDGroup, Version: demo.CRDVersion, Resource: demo.CRDPlural}
		list, err := dc.Resource(gvr).Namespace(demo.AppNamespace).List(ctx, metav1.ListOptions{LabelSelector: "tier=gold"})
		if err != nil {
			t.Fatalf("list %s: %v", demo.CRDPlural, err)
		}
		want := matching(objs, demo.CRDPlural, demo.AppNamespace, map[string]string{"tier": "gold"})
		if len(list.Items) != len(want) || len(want) == 0 {
			t.Errorf("%d gold crontabs, want %d", len(list.Items), len(want))
		}
		for _, it := range list.Items {
			spec, _, _ := unstructured.NestedString(it.Object, "spec", "cronSpec")
			if it.GetKind() != demo.CRDKind || it.GetAPIVersion() != demo.CRDGroup+"/"+demo.CRDVersion || spec == "" {
				t.Errorf("crontab %s: kind %q apiVersion %q cronSpec %q", it.GetName(), it.GetKind(), it.GetAPIVersion(), spec)
			}
		}
		one, err := dc.Resource(gvr).Namespace(demo.AppNamespace).Get(ctx, "backup-00", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get crontab: %v", err)
		}
		key := "/registry/" + demo.CRDGroup + "/" + demo.CRDPlural + "/" + demo.AppNamespace + "/backup-00"
		if one.GetResourceVersion() != revs[key] {
			t.Errorf("crontab resourceVersion %q, want %q", one.GetResourceVersion(), revs[key])
		}
		deps, err := dc.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(demo.AppNamespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(deps.Items) != 1 || deps.Items[0].GetName() != demo.Deployment {
			t.Errorf("dynamic list deployments = %v, %v", deps, err)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		mc, err := metadata.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
		list, err := mc.Resource(gvr).Namespace("team-c").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("metadata list: %v", err)
		}
		if want := demo.Count(objs, "configmaps", "team-c"); len(list.Items) != want {
			t.Errorf("metadata list: %d items, want %d", len(list.Items), want)
		}
		for _, it := range list.Items {
			want := cms[it.Namespace+"/"+it.Name]
			if want == nil || it.UID != want.UID || it.ResourceVersion != revs["/registry/configmaps/"+it.Namespace+"/"+it.Name] || len(it.Labels) != len(want.Labels) {
				t.Errorf("metadata item %s/%s uid %s rv %s labels %v", it.Namespace, it.Name, it.UID, it.ResourceVersion, it.Labels)
			}
		}
		one, err := mc.Resource(gvr).Namespace("team-c").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		if err != nil || one.Name != "kube-root-ca.crt" || one.UID != cms["team-c/kube-root-ca.crt"].UID {
			t.Errorf("metadata get = %+v, %v", one, err)
		}
		// The metadata client accepts a full object too; check that the
		// server answers the Accept it sends with metadata only.
		for _, tt := range []struct{ path, as string }{
			{"/api/v1/namespaces/team-c/configmaps/kube-root-ca.crt", "PartialObjectMetadata"},
			{"/api/v1/namespaces/team-c/configmaps", "PartialObjectMetadataList"},
		} {
			body := httpGet(t, p.URL+tt.path, "application/json;as="+tt.as+";g=meta.k8s.io;v=v1")
			var got struct {
				Kind       string          `json:"kind"`
				APIVersion string          `json:"apiVersion"`
				Data       json.RawMessage `json:"data"`
				Items      []struct {
					Data json.RawMessage `json:"data"`
				} `json:"items"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("GET %s as=%s: %v\n%.300s", tt.path, tt.as, err, body)
			}
			hasData := got.Data != nil
			for _, it := range got.Items {
				hasData = hasData || it.Data != nil
			}
			if got.Kind != tt.as || got.APIVersion != "meta.k8s.io/v1" || hasData {
				t.Errorf("GET %s as=%s: kind %q apiVersion %q, data present: %v; want metadata only", tt.path, tt.as, got.Kind, got.APIVersion, hasData)
			}
		}
	})

	t.Run("informer", func(t *testing.T) {
		cs := kubernetes.NewForConfigOrDie(cfg)
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("team-a"))
		inf := f.Core().V1().ConfigMaps().Informer()
		stop := make(chan struct{})
		defer func() { close(stop); f.Shutdown() }()
		f.Start(stop)
		sctx, scancel := context.WithTimeout(ctx, 60*time.Second)
		defer scancel()
		if !cache.WaitForCacheSync(sctx.Done(), inf.HasSynced) {
			t.Fatal("configmap informer did not sync within 60s")
		}
		if got, want := len(inf.GetStore().List()), demo.Count(objs, "configmaps", "team-a"); got != want {
			t.Errorf("informer has %d configmaps, want %d", got, want)
		}
	})
}

// httpGet GETs url with an Accept header and returns the body of a 200.
func httpGet(t *testing.T, url, accept string) []byte {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (Accept %s): %s: %.300s", url, accept, resp.Status, body)
	}
	return body
}
