package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/proxy"
)

const gadgetsPrefix = "/registry/example.com/gadgets/"

func gadgetCRD(t *testing.T, scope string) []byte {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "gadgets.example.com", "uid": "u-" + scope},
		"spec": map[string]any{
			"group": "example.com", "scope": scope,
			"names":    map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}},
		},
		"status": map[string]any{
			"conditions":    []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
		},
	}}
	v, err := storagefmt.JSON(crd)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func gadget(t *testing.T, ns, name string) []byte {
	t.Helper()
	md := map[string]any{"name": name}
	if ns != "" {
		md["namespace"] = ns
	}
	v, err := storagefmt.JSON(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": md}})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// cachedSpec returns the spec of the watch cache's resource at prefix, ok
// false when the cache has none.
func cachedSpec(c *cache.Cache, prefix string) (cache.Spec, bool) {
	for _, st := range c.Statuses() {
		if st.Prefix == prefix {
			return c.Resource(cache.Spec{Prefix: prefix}).Spec(), true
		}
	}
	return cache.Spec{}, false
}

// TestCRDChangesDropCache: a deleted CRD's watch cache (its etcd watch,
// history and budget) is dropped, and a CRD recreated with another scope
// gets a cache of its new shape, not the old one.
func TestCRDChangesDropCache(t *testing.T) {
	var c *cache.Cache
	e := startEnv(t, func(cfg *proxy.Config) {
		var err error
		c, err = cache.New(cache.Config{Client: cfg.Client, MemoryBytes: 64 << 20, Metrics: cfg.Metrics,
			ProgressInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cfg.Cache = c
	})
	const crdKey = "/registry/apiextensions.k8s.io/customresourcedefinitions/gadgets.example.com"
	served := func(namespaced bool) func() error {
		return func() error {
			r, ok := e.table.Lookup("example.com", "v1", "gadgets")
			if !ok || r.Namespaced != namespaced {
				return fmt.Errorf("gadgets.example.com/v1 not in the table as namespaced=%v", namespaced)
			}
			return nil
		}
	}
	get := func(path, want string) func() error {
		return func() error {
			if code, _, body := e.raw(t, "GET", path, ""); code != 200 || !bytes.Contains(body, []byte(`"name":"`+want+`"`)) {
				return fmt.Errorf("GET %s = %d %s, want 200 with %s", path, code, body, want)
			}
			return nil
		}
	}

	// A namespaced CRD, listed: its cache starts.
	e.putRaw(t, crdKey, gadgetCRD(t, "Namespaced"))
	e.putRaw(t, gadgetsPrefix+"ns/g1", gadget(t, "ns", "g1"))
	waitFor(t, "namespaced gadgets served", served(true))
	waitFor(t, "namespaced gadget listed", get("/apis/example.com/v1/namespaces/ns/gadgets", "g1"))
	if spec, ok := cachedSpec(c, gadgetsPrefix); !ok || !spec.Namespaced {
		t.Fatalf("cache spec of %s = %+v, %v; want a namespaced resource", gadgetsPrefix, spec, ok)
	}

	// Deleted: the cache is dropped.
	if _, err := e.cli.Delete(context.Background(), crdKey); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "cache of the deleted CRD dropped", func() error {
		if _, ok := cachedSpec(c, gadgetsPrefix); ok {
			return fmt.Errorf("the watch cache still holds %s", gadgetsPrefix)
		}
		return nil
	})

	// Created again as cluster-scoped (written over the old one in place,
	// so the table sees a change, not a deletion): the cache takes the new
	// shape.
	e.putRaw(t, crdKey, gadgetCRD(t, "Namespaced"))
	waitFor(t, "namespaced gadgets served again", served(true))
	waitFor(t, "namespaced gadget listed again", get("/apis/example.com/v1/namespaces/ns/gadgets", "g1"))
	if _, err := e.cli.Delete(context.Background(), gadgetsPrefix+"ns/g1"); err != nil {
		t.Fatal(err)
	}
	e.putRaw(t, crdKey, gadgetCRD(t, "Cluster"))
	e.putRaw(t, gadgetsPrefix+"c1", gadget(t, "", "c1"))
	waitFor(t, "cluster-scoped gadgets served", served(false))
	waitFor(t, "cluster-scoped gadget read", get("/apis/example.com/v1/gadgets/c1", "c1"))
	waitFor(t, "cluster-scoped gadget listed", get("/apis/example.com/v1/gadgets", "c1"))
	if spec, ok := cachedSpec(c, gadgetsPrefix); !ok || spec.Namespaced {
		t.Fatalf("cache spec of %s after the scope change = %+v, %v; want a cluster-scoped resource", gadgetsPrefix, spec, ok)
	}
}
