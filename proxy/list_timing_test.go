package proxy_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/lazyapi/lazyapi/store"
)

// BenchmarkList: LIST of 1,000 ConfigMaps (1 KiB of data each) through
// lazyapi over HTTP (JSON transcode, protobuf passthrough, Table), against
// a baseline in the same run that does what kube-apiserver's etcd3 store
// and JSON serializer do with the same etcd pages (decode every object
// into a typed list, then encode it), without any HTTP.
//
//	go test ./proxy -run '^$' -bench BenchmarkList -benchtime=200ms -count=3
func BenchmarkList(b *testing.B) {
	e := startEnv(b)
	seedConfigMaps(b, e, "ns", 1000, 1<<10)
	path := e.url + "/api/v1/namespaces/ns/configmaps"
	get := func(b *testing.B, accept string) {
		b.ReportAllocs()
		var n int64
		for b.Loop() {
			req, _ := http.NewRequest("GET", path, nil)
			req.Header.Set("Accept", accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%d %v", resp.StatusCode, err)
			}
		}
		b.SetBytes(n)
	}
	b.Run("lazyapi-json", func(b *testing.B) { get(b, "application/json") })
	b.Run("lazyapi-protobuf", func(b *testing.B) { get(b, "application/vnd.kubernetes.protobuf") })
	b.Run("lazyapi-table", func(b *testing.B) { get(b, kubectlTableAccept) })
	b.Run("baseline-apimachinery-json", func(b *testing.B) {
		b.ReportAllocs()
		dec := scheme.Codecs.UniversalDeserializer()
		enc := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
		st := e.srv.Store()
		cw := &countWriter{}
		for b.Loop() {
			list := &corev1.ConfigMapList{}
			res, err := st.List(context.Background(), store.ListOptions{Prefix: "/registry/configmaps/ns/"}, func(kv store.KV) (bool, error) {
				var cm corev1.ConfigMap
				if _, _, err := dec.Decode(kv.Value, nil, &cm); err != nil {
					return true, err
				}
				list.Items = append(list.Items, cm)
				return false, nil
			})
			if err != nil {
				b.Fatal(err)
			}
			list.ResourceVersion = "1"
			_ = res
			cw.n = 0
			if err := enc.Encode(list, cw); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(cw.n)
	})
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
