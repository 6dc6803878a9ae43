package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestStartupLogNamesFlag: the cache names its budget by the Config field
// (MemoryBytes), as a library does; when the preload at start refuses a
// resource that does not fit, the operator's log line also names the flag
// to change, added by the logger cmd/lazyapi hands the cache (configs.go,
// the translation point).
func TestStartupLogNamesFlag(t *testing.T) {
	etcd := etcdtest.Start(t)
	for i, name := range []string{"big-1", "big-2"} {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), CreationTimestamp: metav1.Now()},
			Data:       map[string]string{"k": strings.Repeat("x", 256<<10+i)},
		}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Client.Put(context.Background(), storagefmt.Key("/registry", "configmaps", "ns", name), string(val)); err != nil {
			t.Fatal(err)
		}
	}
	r := startServing(t, io.Discard, "--etcd-servers="+etcd.Endpoint, freePortFlag(t),
		"--watch-cache-memory=64Ki", "--watch-cache-preload=configmaps")
	deadline := time.Now().Add(30 * time.Second)
	for {
		for l := range strings.Lines(r.sink.String()) {
			if !strings.Contains(l, "resource not cached: it does not fit the budget") {
				continue
			}
			if !strings.Contains(l, `"MemoryBytes": 65536`) || !strings.Contains(l, `"flag": "--watch-cache-memory"`) {
				t.Fatalf("the refusal does not name the Config field and the flag: %s", l)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged within 30s:\n%s", r.sink)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
