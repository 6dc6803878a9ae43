package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// runInformers starts s.Concurrency independent informers (each with its
// own client and connection) for s.Kind and measures the time each takes to
// sync. They stop once all have synced or the phase ends.
func runInformers(ctx context.Context, t Target, s *Scenario, expected int64) (*InformerResult, error) {
	base, err := t.RESTConfig()
	if err != nil {
		return nil, err
	}
	switch s.Accept {
	case "protobuf":
		if s.Kind.Custom {
			return nil, fmt.Errorf("custom resources have no protobuf encoding")
		}
		base.ContentType = "application/vnd.kubernetes.protobuf"
		base.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	case "table":
		return nil, fmt.Errorf("informers cannot use --accept=table")
	}
	ir := &InformerResult{Informers: s.Concurrency}
	h := NewHistogram()
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	for range s.Concurrency {
		cfg := rest.CopyConfig(base)
		inf, err := newInformer(cfg, s)
		if err != nil {
			return ir, err
		}
		go inf.Run(stop)
		wg.Go(func() {
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				return
			}
			d := time.Since(start)
			n := len(inf.GetStore().ListKeys())
			mu.Lock()
			defer mu.Unlock()
			h.Record(d)
			ir.Synced++
			if s.LabelSelector != "" || expected < 0 || int64(n) == expected {
				ir.Complete++
			}
		})
	}
	wg.Wait()
	ir.SyncTime = h.Summary() // informers not synced by the end of the phase are counted in Informers only
	return ir, nil
}

func newInformer(cfg *rest.Config, s *Scenario) (cache.SharedIndexInformer, error) {
	tweak := func(o *metav1.ListOptions) {
		if s.LabelSelector != "" {
			o.LabelSelector = s.LabelSelector
		}
	}
	if s.Kind.Custom {
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("cannot create dynamic client: %w", err)
		}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 0, s.Namespace, tweak)
		gvr := schema.GroupVersionResource{Group: s.Kind.Group, Version: s.Kind.Version, Resource: s.Kind.Resource}
		return f.ForResource(gvr).Informer(), nil
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot create clientset: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(s.Namespace), informers.WithTweakListOptions(tweak))
	switch s.Kind.Name {
	case "configmap":
		return f.Core().V1().ConfigMaps().Informer(), nil
	case "secret":
		return f.Core().V1().Secrets().Informer(), nil
	case "pod":
		return f.Core().V1().Pods().Informer(), nil
	}
	return nil, fmt.Errorf("no informer for %s", s.Kind.Name)
}
