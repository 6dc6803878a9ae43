package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// decodeStored decodes a stored value with apimachinery, the way
// kube-apiserver reads it.
func decodeStored(t *testing.T, k Kind, val []byte) runtime.Object {
	t.Helper()
	if k.Custom {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(val); err != nil {
			t.Fatalf("cannot decode custom resource: %v", err)
		}
		return u
	}
	var (
		obj runtime.Object
		err error
	)
	if bytes.HasPrefix(val, []byte("k8s\x00")) {
		obj, _, err = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(val, nil, nil)
	} else {
		obj, _, err = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, jsonserializer.SerializerOptions{}).Decode(val, nil, nil)
	}
	if err != nil {
		t.Fatalf("cannot decode stored %s: %v", k.Name, err)
	}
	return obj
}

func TestSeedFormatAndClean(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	kind := func(n string) Kind { k, _ := LookupKind(n); return k }
	tests := []struct {
		name     string
		cfg      SeedConfig
		wantType any
		protobuf bool
		minSize  int
		maxSize  int
	}{
		{"configmap protobuf fixed", SeedConfig{Kind: kind("configmap"), Count: 50, Namespaces: 3, Size: SizeDist{Kind: "fixed", Size: 6000}},
			&corev1.ConfigMap{}, true, 5800, 6200},
		{"secret json uniform", SeedConfig{Kind: kind("secret"), Count: 40, Namespaces: 2, JSON: true, Size: SizeDist{Kind: "uniform", Min: 2000, Max: 9000}, NamespacePrefix: "lzs-"},
			&corev1.Secret{}, false, 1900, 9300},
		{"pod protobuf lognormal", SeedConfig{Kind: kind("pod"), Count: 30, Namespaces: 4, Size: SizeDist{Kind: "lognormal", Size: 3000, Sigma: 0.5}, NamespacePrefix: "lzp-"},
			&corev1.Pod{}, true, 200, MaxObjectSize},
		{"widget json fixed", SeedConfig{Kind: kind("widget"), Count: 20, Namespaces: 2, Size: SizeDist{Kind: "fixed", Size: 3000}, NamespacePrefix: "lzw-", InFlight: 2},
			&unstructured.Unstructured{}, false, 2850, 3150},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Seed(ctx, srv.Client, tt.cfg)
			if err != nil {
				t.Fatalf("Seed: %v", err)
			}
			if res.Objects != tt.cfg.Count {
				t.Errorf("Seed wrote %d objects, want %d", res.Objects, tt.cfg.Count)
			}
			nsPrefix := tt.cfg.NamespacePrefix
			if nsPrefix == "" {
				nsPrefix = DefaultNamespacePrefix
			}
			resp, err := srv.Client.Get(ctx, "/registry/"+tt.cfg.Kind.KeyPrefix+"/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			perNS := map[string]int{}
			groups := map[string]int{}
			names := map[string]bool{}
			for _, kv := range resp.Kvs {
				if got := bytes.HasPrefix(kv.Value, []byte("k8s\x00")); got != tt.protobuf {
					t.Fatalf("%s: protobuf envelope = %v, want %v", kv.Key, got, tt.protobuf)
				}
				obj := decodeStored(t, tt.cfg.Kind, kv.Value)
				if wantT, gotT := typeName(tt.wantType), typeName(obj); wantT != gotT {
					t.Fatalf("%s decodes to %s, want %s", kv.Key, gotT, wantT)
				}
				acc, err := meta.Accessor(obj)
				if err != nil {
					t.Fatal(err)
				}
				if want := "/registry/" + tt.cfg.Kind.KeyPrefix + "/" + acc.GetNamespace() + "/" + acc.GetName(); string(kv.Key) != want {
					t.Errorf("key %s, object says %s", kv.Key, want)
				}
				if !strings.HasPrefix(acc.GetNamespace(), nsPrefix) {
					t.Errorf("%s: namespace %q lacks prefix %q", kv.Key, acc.GetNamespace(), nsPrefix)
				}
				if acc.GetUID() == "" || acc.GetCreationTimestamp().Time.IsZero() || acc.GetResourceVersion() != "" {
					t.Errorf("%s: uid %q created %v rv %q; want uid, timestamp, no rv", kv.Key, acc.GetUID(), acc.GetCreationTimestamp(), acc.GetResourceVersion())
				}
				if acc.GetLabels()["app"] == "" {
					t.Errorf("%s: no app label: %v", kv.Key, acc.GetLabels())
				}
				if n := len(kv.Value); n < tt.minSize || n > tt.maxSize {
					t.Errorf("%s: stored size %d outside [%d, %d]", kv.Key, n, tt.minSize, tt.maxSize)
				}
				if names[acc.GetName()] {
					t.Errorf("duplicate name %q", acc.GetName())
				}
				names[acc.GetName()] = true
				perNS[acc.GetNamespace()]++
				groups[acc.GetLabels()[GroupLabel]]++
			}
			if len(resp.Kvs) != tt.cfg.Count {
				t.Errorf("etcd holds %d %s, want %d", len(resp.Kvs), tt.cfg.Kind.Resource, tt.cfg.Count)
			}
			if len(perNS) != tt.cfg.Namespaces {
				t.Errorf("objects spread over %d namespaces, want %d: %v", len(perNS), tt.cfg.Namespaces, perNS)
			}
			if len(groups) != 10 {
				t.Errorf("group label has %d values, want 10: %v", len(groups), groups)
			}
			nsResp, err := srv.Client.Get(ctx, "/registry/namespaces/"+nsPrefix, clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(nsResp.Kvs) != tt.cfg.Namespaces {
				t.Errorf("%d Namespace objects, want %d", len(nsResp.Kvs), tt.cfg.Namespaces)
			}
			for _, kv := range nsResp.Kvs {
				if _, ok := decodeStored(t, Kind{Name: "namespace"}, kv.Value).(*corev1.Namespace); !ok {
					t.Errorf("%s is not a Namespace", kv.Key)
				}
			}
			if tt.cfg.Kind.Custom {
				crd, err := srv.Client.Get(ctx, "/registry/apiextensions.k8s.io/customresourcedefinitions/"+CRDName)
				if err != nil || len(crd.Kvs) != 1 {
					t.Fatalf("CRD not seeded: %v", err)
				}
				var m struct {
					APIVersion string `json:"apiVersion"`
					Kind       string `json:"kind"`
					Spec       struct {
						Group string `json:"group"`
						Names struct {
							Plural string `json:"plural"`
						} `json:"names"`
					} `json:"spec"`
				}
				if err := json.Unmarshal(crd.Kvs[0].Value, &m); err != nil {
					t.Fatalf("CRD is not JSON: %v", err)
				}
				if m.APIVersion != "apiextensions.k8s.io/v1beta1" || m.Kind != "CustomResourceDefinition" || m.Spec.Group != CRGroup || m.Spec.Names.Plural != CRPlural {
					t.Errorf("CRD = %+v", m)
				}
			}
		})
	}

	// Foreign objects must survive Clean.
	foreign := []string{"/registry/configmaps/default/keep-me", "/registry/namespaces/default", "/registry/configmaps/other/x"}
	for _, k := range foreign {
		if _, err := srv.Client.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	var seededKeys int64
	for _, p := range []string{"/registry/configmaps/", "/registry/secrets/", "/registry/pods/", "/registry/" + CRGroup + "/", "/registry/namespaces/", "/registry/apiextensions.k8s.io/"} {
		r, err := srv.Client.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		seededKeys += r.Count
	}
	seededKeys -= int64(len(foreign))
	var deleted int64
	for _, p := range []string{"", "lzs-", "lzp-", "lzw-"} {
		n, err := Clean(ctx, srv.Client, CleanConfig{NamespacePrefix: p})
		if err != nil {
			t.Fatalf("Clean(%q): %v", p, err)
		}
		deleted += n
	}
	if deleted != seededKeys {
		t.Errorf("Clean deleted %d keys, want %d", deleted, seededKeys)
	}
	all, err := srv.Client.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, kv := range all.Kvs {
		left = append(left, string(kv.Key))
	}
	sort.Strings(left)
	sort.Strings(foreign)
	if strings.Join(left, ",") != strings.Join(foreign, ",") {
		t.Errorf("after Clean etcd holds %v, want only %v", left, foreign)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *corev1.Secret:
		return "Secret"
	case *corev1.Pod:
		return "Pod"
	case *unstructured.Unstructured:
		return "Unstructured"
	}
	return "other"
}

func TestSizeDist(t *testing.T) {
	tests := []struct {
		in   string
		want SizeDist
	}{
		{"8KiB", SizeDist{Kind: "fixed", Size: 8192}},
		{"fixed:1500", SizeDist{Kind: "fixed", Size: 1500}},
		{"uniform:1KiB-64KiB", SizeDist{Kind: "uniform", Min: 1024, Max: 65536}},
		{"lognormal:16KiB", SizeDist{Kind: "lognormal", Size: 16384}},
		{"lognormal:1MiB:0.5", SizeDist{Kind: "lognormal", Size: 1 << 20, Sigma: 0.5}},
	}
	for _, tt := range tests {
		got, err := ParseSizeDist(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseSizeDist(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if again, err := ParseSizeDist(got.String()); err != nil || again != got {
			t.Errorf("ParseSizeDist(%q.String() = %q) = %+v, %v", tt.in, got.String(), again, err)
		}
	}
	for _, bad := range []string{"", "uniform:5", "lognormal:x", "zipf:1", "2MiB", "uniform:9-3"} {
		if _, err := ParseSizeDist(bad); err == nil {
			t.Errorf("ParseSizeDist(%q) succeeded, want an error", bad)
		}
	}
	// The median of lognormal draws is the configured median.
	d := SizeDist{Kind: "lognormal", Size: 10000}
	r := rand.New(rand.NewPCG(1, 1))
	draws := make([]int, 20001)
	for i := range draws {
		draws[i] = d.Draw(r)
	}
	sort.Ints(draws)
	if med := draws[len(draws)/2]; med < 9600 || med > 10400 {
		t.Errorf("lognormal median = %d, want about 10000", med)
	}
	u := SizeDist{Kind: "uniform", Min: 100, Max: 200}
	for range 1000 {
		if v := u.Draw(r); v < 100 || v > 200 {
			t.Fatalf("uniform draw %d outside 100..200", v)
		}
	}
}

func TestSeedRejectsBadConfig(t *testing.T) {
	_, err := Seed(context.Background(), nil, SeedConfig{Kind: Kinds[0], Count: 1, Size: SizeDist{Kind: "fixed", Size: 2 << 20}})
	if err == nil {
		t.Fatal("Seed with a 2 MiB object succeeded, want an error")
	}
}
