package bench

import (
	"context"
	"net/http/httptest"
	"sort"
	"strconv"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// seeded returns the kind's objects in etcd decoded with apimachinery, with
// resourceVersion set to the key's mod revision, sorted by namespace/name.
func seeded(t *testing.T, cli *clientv3.Client, k Kind, ns string) []runtime.Object {
	t.Helper()
	p := "/registry/" + k.KeyPrefix + "/"
	if ns != "" {
		p += ns + "/"
	}
	resp, err := cli.Get(context.Background(), p, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []runtime.Object
	for _, kv := range resp.Kvs {
		obj := decodeStored(t, k, kv.Value)
		obj.(metav1.Object).SetResourceVersion(strconv.FormatInt(kv.ModRevision, 10))
		out = append(out, obj)
	}
	return out
}

func TestRefServerAgainstClientGo(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	cm, _ := LookupKind("configmap")
	widget, _ := LookupKind("widget")
	if _, err := Seed(ctx, srv.Client, SeedConfig{Kind: cm, Count: 23, Namespaces: 3, Size: SizeDist{Kind: "uniform", Min: 500, Max: 3000}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Seed(ctx, srv.Client, SeedConfig{Kind: widget, Count: 9, Namespaces: 2, Size: SizeDist{Kind: "fixed", Size: 800}}); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(NewRefServer(srv.Client, "/registry"))
	t.Cleanup(hs.Close)

	want := seeded(t, srv.Client, cm, "")
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: hs.URL, ContentConfig: rest.ContentConfig{ContentType: ct}})
			list, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if len(list.Items) != len(want) {
				t.Fatalf("List returned %d items, want %d", len(list.Items), len(want))
			}
			for i := range want {
				w := want[i].(*corev1.ConfigMap).DeepCopy()
				w.TypeMeta = metav1.TypeMeta{}
				if !equality.Semantic.DeepEqual(&list.Items[i], w) {
					t.Errorf("item %d = %s/%s rv %s, want %s/%s rv %s (or contents differ)", i,
						list.Items[i].Namespace, list.Items[i].Name, list.Items[i].ResourceVersion, w.Namespace, w.Name, w.ResourceVersion)
				}
			}
			rev, err := srv.Client.Get(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			if list.ResourceVersion != strconv.FormatInt(rev.Header.Revision, 10) {
				t.Errorf("list resourceVersion %s, want the read revision %d", list.ResourceVersion, rev.Header.Revision)
			}

			// Paged through client-go's pager, one namespace.
			ns := NamespaceName(DefaultNamespacePrefix, 1)
			wantNS := seeded(t, srv.Client, cm, ns)
			var got []string
			p := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().ConfigMaps(ns).List(ctx, o)
			})
			p.PageSize = 3
			if err := p.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
				got = append(got, o.(*corev1.ConfigMap).Name)
				return nil
			}); err != nil {
				t.Fatalf("paged List: %v", err)
			}
			var wantNames []string
			for _, o := range wantNS {
				wantNames = append(wantNames, o.(*corev1.ConfigMap).Name)
			}
			if !equality.Semantic.DeepEqual(got, wantNames) {
				t.Errorf("paged names = %v, want %v", got, wantNames)
			}

			// GET of one object, and a 404.
			one := want[5].(*corev1.ConfigMap)
			g, err := cs.CoreV1().ConfigMaps(one.Namespace).Get(ctx, one.Name, metav1.GetOptions{})
			if err != nil || g.ResourceVersion != one.ResourceVersion || g.Data["application.properties"] != one.Data["application.properties"] {
				t.Errorf("Get %s/%s = rv %v, %v; want rv %s and equal data", one.Namespace, one.Name, g.ResourceVersion, err, one.ResourceVersion)
			}
			if _, err := cs.CoreV1().ConfigMaps("nope").Get(ctx, "nope", metav1.GetOptions{}); err == nil {
				t.Error("Get of a missing object succeeded")
			}
		})
	}

	t.Run("custom resource", func(t *testing.T) {
		dc := dynamic.NewForConfigOrDie(&rest.Config{Host: hs.URL})
		gvr := schema.GroupVersionResource{Group: CRGroup, Version: CRVersion, Resource: CRPlural}
		list, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: GroupLabel + " in (g1,g2)"})
		if err != nil {
			t.Fatal(err)
		}
		var got, wantNames []string
		for _, u := range list.Items {
			got = append(got, u.GetName())
			if u.GetKind() != CRKind {
				t.Errorf("custom resource list item kind %q, want %q", u.GetKind(), CRKind)
			}
		}
		for _, o := range seeded(t, srv.Client, widget, "") {
			m := o.(metav1.Object)
			if g := m.GetLabels()[GroupLabel]; g == "g1" || g == "g2" {
				wantNames = append(wantNames, m.GetName())
			}
		}
		sort.Strings(got)
		sort.Strings(wantNames)
		if len(wantNames) == 0 || !equality.Semantic.DeepEqual(got, wantNames) {
			t.Errorf("selected widgets = %v, want %v", got, wantNames)
		}
	})
}
