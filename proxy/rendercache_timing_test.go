package proxy_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// configText returns n bytes of config-file-like text (newlines, quotes,
// some non-ASCII), as issue 15's cost runs serve.
func configText(r *rand.Rand, n int) string {
	words := []string{"timeout", "replicas", "endpoint", "retry", "buffer", "cache", "region", "shard", "pool",
		"limit", "window", "backoff", "threshold", "feature", "enabled", "interval", "level", "format", "queue", "batch"}
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(8) {
		case 0:
			fmt.Fprintf(&b, "%s.%s = \"%s %s\"\n", words[r.IntN(len(words))], words[r.IntN(len(words))],
				words[r.IntN(len(words))], words[r.IntN(len(words))])
		case 1:
			fmt.Fprintf(&b, "# %s für %s\n", words[r.IntN(len(words))], words[r.IntN(len(words))])
		default:
			fmt.Fprintf(&b, "%s.%s.%s = %d\n", words[r.IntN(len(words))], words[r.IntN(len(words))],
				words[r.IntN(len(words))], r.IntN(100000))
		}
	}
	return b.String()[:n]
}

// BenchmarkCachedConfigText: issue 15's cost data (200 ConfigMaps of
// 4 KiB of config text in one namespace) read from the watch cache in
// memory (no HTTP, no TLS): the server's own CPU per JSON LIST (whole,
// and with limit=50, which runs a size pass) and per JSON GET, with the
// rendering cache warm (every object rendered twice before the timer).
//
//	go test ./proxy -run '^$' -bench BenchmarkCachedConfigText -benchtime=2s -count=6
func BenchmarkCachedConfigText(b *testing.B) {
	const n = 200
	tw := startCacheTwins(b, 0)
	r := rand.New(rand.NewPCG(11, 13))
	kvs := make([][2]string, 0, n)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("app-%03d-config", i),
			Labels: map[string]string{"app": fmt.Sprintf("app-%03d", i)}},
			Data: map[string]string{"application.properties": configText(r, 4<<10), "LOG_LEVEL": "info"}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			b.Fatal(err)
		}
		kvs = append(kvs, [2]string{storagefmt.Key("/registry", "configmaps", "ns", cm.Name), string(val)})
	}
	rev := tw.cached.putMany(b, kvs)
	tw.waitCached(b, rev)
	run := func(b *testing.B, paths ...string) {
		cw := &countWriter{}
		serve := func() {
			for _, p := range paths {
				code, err := tw.cached.srv.ServeInMemory(p, "application/json", cw)
				if err != nil || code != 200 {
					b.Fatalf("%s: %d %v", p, code, err)
				}
			}
		}
		serve() // renders each object once
		serve() // keeps the renderings
		b.ReportAllocs()
		cpu := processCPU()
		for b.Loop() {
			cw.n = 0
			serve()
		}
		reportCPU(b, cpu)
		b.SetBytes(cw.n)
	}
	list := "/api/v1/namespaces/ns/configmaps?resourceVersion=0"
	b.Run("list-json", func(b *testing.B) { run(b, list) })
	b.Run("list-json-limit50", func(b *testing.B) {
		// NotOlderThan: served from the watch cache (resourceVersion=0
		// would ignore the limit).
		run(b, fmt.Sprintf("/api/v1/namespaces/ns/configmaps?limit=50&resourceVersion=%d&resourceVersionMatch=NotOlderThan", rev))
	})
	gets := make([]string, 0, 20)
	for i := range 20 {
		gets = append(gets, fmt.Sprintf("/api/v1/namespaces/ns/configmaps/app-%03d-config?resourceVersion=0", i*10))
	}
	b.Run("get-json-x20", func(b *testing.B) { run(b, gets...) })
}
