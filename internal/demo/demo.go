// Package demo builds a small, realistic cluster's worth of objects and
// writes them into etcd exactly as kube-apiserver stores them.
//
// Built-in objects are protobuf in the k8s\x00 envelope; the
// CustomResourceDefinition is JSON at apiextensions.k8s.io/v1beta1 (what
// kube-apiserver's apiextensions storage writes: a JSON LegacyCodec with a
// v1beta1 encode versioner); custom resources are JSON.
package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Names of the demo data, for tests and the printed hints.
const (
	// AppNamespace holds the Deployment, its ReplicaSet and Pods, the
	// Service and the custom resources.
	AppNamespace = "demo-app"
	// ConfigMapsGenerated is the number of generated ConfigMaps, spread over
	// TeamNamespaces and AppNamespace; every namespace also has its
	// kube-root-ca.crt ConfigMap.
	ConfigMapsGenerated = 1000

	CRDName     = "crontabs.stable.example.com"
	CRDGroup    = "stable.example.com"
	CRDVersion  = "v1"
	CRDPlural   = "crontabs"
	CRDKind     = "CronTab"
	CRDCount    = 20
	NodeName    = "demo-node-1"
	Deployment  = "web"
	ReplicaSet  = "web-5d8f7c9b6d"
	PodReplicas = 3
)

// TeamNamespaces hold most of the ConfigMaps and Secrets.
var TeamNamespaces = []string{"team-a", "team-b", "team-c"}

// Namespaces lists every demo namespace, system ones included.
var Namespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease", AppNamespace, "team-a", "team-b", "team-c"}

// Object is one demo object as stored in etcd.
type Object struct {
	// Resource is the plural resource, e.g. "configmaps", "crontabs".
	Resource  string
	Namespace string // empty for cluster-scoped objects
	Name      string
	Labels    map[string]string
	Key       string // full etcd key under the prefix
	Value     []byte // stored bytes
}

// Objects returns the demo objects under prefix (e.g. "/registry"), with
// creation times before now. The result is the same for the same now.
func Objects(prefix string, now time.Time) ([]Object, error) {
	b := &builder{prefix: prefix, now: now.UTC().Truncate(time.Second)}
	b.namespaces()
	b.node()
	b.nodeLease()
	b.configMaps()
	b.secrets()
	b.serviceAccounts()
	b.services()
	b.workload()
	b.crd()
	b.customResources()
	if b.err != nil {
		return nil, b.err
	}
	return b.out, nil
}

// Empty reports whether etcd has no key under prefix.
func Empty(ctx context.Context, cli *clientv3.Client, prefix string) (bool, error) {
	resp, err := cli.Get(ctx, strings.TrimSuffix(prefix, "/")+"/", clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return false, fmt.Errorf("cannot read etcd prefix %q: %w", prefix, err)
	}
	return len(resp.Kvs) == 0, nil
}

// Seed writes the demo objects under prefix, one put per object (so each has
// its own resourceVersion, as through the API), namespaces and the CRD first.
// It overwrites existing keys; callers check Empty first. It returns the
// number of objects written.
func Seed(ctx context.Context, cli *clientv3.Client, prefix string, now time.Time) (int, error) {
	objs, err := Objects(prefix, now)
	if err != nil {
		return 0, err
	}
	first, rest := objs[:0:0], objs[:0:0]
	for _, o := range objs {
		if o.Resource == "namespaces" || o.Resource == "customresourcedefinitions" {
			first = append(first, o)
		} else {
			rest = append(rest, o)
		}
	}
	if err := put(ctx, cli, first); err != nil {
		return 0, err
	}
	if err := put(ctx, cli, rest); err != nil {
		return 0, err
	}
	return len(objs), nil
}

// put writes objs with a few concurrent workers.
func put(ctx context.Context, cli *clientv3.Client, objs []Object) error {
	const workers = 16
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan Object)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range next {
				if _, err := cli.Put(ctx, o.Key, string(o.Value)); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("cannot write %q: %w", o.Key, err)
					}
					mu.Unlock()
					cancel()
				}
			}
		}()
	}
feed:
	for _, o := range objs {
		select {
		case next <- o:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// Count returns how many objs have the resource and, if ns is not empty,
// that namespace.
func Count(objs []Object, resource, ns string) int {
	n := 0
	for _, o := range objs {
		if o.Resource == resource && (ns == "" || o.Namespace == ns) {
			n++
		}
	}
	return n
}

// Names returns the sorted names of objs with the resource in ns ("" = all).
func Names(objs []Object, resource, ns string) []string {
	var out []string
	for _, o := range objs {
		if o.Resource == resource && (ns == "" || o.Namespace == ns) {
			out = append(out, o.Name)
		}
	}
	sort.Strings(out)
	return out
}
