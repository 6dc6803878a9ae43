package proxy_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
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
	// Uncompressed, as before gzip existed: the rows measure encoding, and
	// a figure stays comparable with the earlier ones (net/http's default
	// client asks for gzip, which compresses every ~1 MiB answer).
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	b.Cleanup(client.CloseIdleConnections)
	get := func(b *testing.B, accept string) {
		b.ReportAllocs()
		var n int64
		cpu := processCPU()
		for b.Loop() {
			req, _ := http.NewRequest("GET", path, nil)
			req.Header.Set("Accept", accept)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%d %v", resp.StatusCode, err)
			}
		}
		reportCPU(b, cpu)
		b.SetBytes(n)
	}
	b.Run("lazyapi-json", func(b *testing.B) { get(b, "application/json") })
	b.Run("lazyapi-protobuf", func(b *testing.B) { get(b, "application/vnd.kubernetes.protobuf") })
	b.Run("lazyapi-table", func(b *testing.B) { get(b, kubectlTableAccept) })
	b.Run("baseline-apimachinery-json", func(b *testing.B) {
		b.ReportAllocs()
		dec := scheme.Codecs.UniversalDeserializer()
		enc := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
		st := e.store
		cw := &countWriter{}
		cpu := processCPU()
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
		reportCPU(b, cpu)
		b.SetBytes(cw.n)
	})
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// BenchmarkCachedList: LIST ?resourceVersion=0 of n ConfigMaps of 10 KiB
// (n = 10,000; 2,000 with -short) through the real HTTP path (proxy on
// loopback, a client that reads the whole body), served from the watch
// cache and from etcd (a second proxy on the same etcd without a cache), in
// JSON and protobuf; against, in the same run, apimachinery decoding the
// same stored bytes (held in memory) into a typed list and encoding it as
// JSON, and encoding an already decoded list (what kube-apiserver's watch
// cache does per LIST).
//
// Two fair pairs: the -inmemory rows run lazyapi's handler with no socket
// (fasthttp request built in memory, body written to a counter) against
// the in-memory apimachinery baselines; the HTTP rows (cache-json, ...)
// against baseline-http-*, the same apimachinery work served by net/http
// on loopback to the same client, as kube-apiserver serves it.
//
//	go test ./proxy -run '^$' -bench BenchmarkCachedList -benchtime=5x -count=3
func BenchmarkCachedList(b *testing.B) {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	tw := startCacheTwins(b, 0, withStore(func(sc *store.Config) { sc.PageSize = 0 })) // default page size
	rev := seedConfigMaps(b, tw.cached, "ns", n, 10<<10)
	tw.waitCached(b, rev)
	path := "/api/v1/namespaces/ns/configmaps?resourceVersion=0"
	// The client reads 64 KiB at a time (io.Copy to io.Discard would
	// read 8 KiB: its syscalls would cost as much as the server's work).
	client := &http.Client{Transport: &http.Transport{ReadBufferSize: 64 << 10}}
	b.Cleanup(client.CloseIdleConnections)
	rbuf := make([]byte, 256<<10)
	get := func(b *testing.B, e *env, accept string) {
		b.ReportAllocs()
		var size int64
		for b.Loop() {
			req, _ := http.NewRequest("GET", e.url+path, nil)
			req.Header.Set("Accept", accept)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			size, err = io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, rbuf)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%d %v", resp.StatusCode, err)
			}
		}
		b.SetBytes(size)
	}
	var stored [][]byte
	if _, err := tw.cached.store.List(context.Background(), store.ListOptions{Prefix: "/registry/configmaps/ns/"},
		func(kv store.KV) (bool, error) {
			stored = append(stored, bytes.Clone(kv.Value))
			return false, nil
		}); err != nil {
		b.Fatal(err)
	}
	if len(stored) != n {
		b.Fatalf("%d stored objects, want %d", len(stored), n)
	}
	dec := scheme.Codecs.UniversalDeserializer()
	enc := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	decodeList := func() (*corev1.ConfigMapList, error) {
		list := &corev1.ConfigMapList{}
		list.Items = make([]corev1.ConfigMap, len(stored))
		for i, v := range stored {
			if _, _, err := dec.Decode(v, nil, &list.Items[i]); err != nil {
				return nil, err
			}
		}
		list.ResourceVersion = strconv.FormatInt(rev, 10)
		return list, nil
	}
	decode := func(b *testing.B) *corev1.ConfigMapList {
		list, err := decodeList()
		if err != nil {
			b.Fatal(err)
		}
		return list
	}
	decoded := decode(b)
	inMemory := func(b *testing.B, e *env, accept string) {
		b.ReportAllocs()
		cw := &countWriter{}
		cpu := processCPU()
		for b.Loop() {
			cw.n = 0
			code, err := e.srv.ServeInMemory(path, accept, cw)
			if err != nil || code != 200 {
				b.Fatalf("%d %v", code, err)
			}
		}
		reportCPU(b, cpu)
		b.SetBytes(cw.n)
	}
	// kube-apiserver's path for the same LIST without its watch cache: the
	// etcd3 store decodes every stored value into the typed list, then the
	// JSON serializer streams it into a net/http response one item at a
	// time (StreamingCollectionsEncoding, the default of kube-apiserver
	// 1.33+ via the StreamingCollectionEncodingToJSON feature gate).
	streamEnc := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{StreamingCollectionsEncoding: true})
	baseline := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := decoded
		if r.URL.Query().Get("decoded") == "" {
			var err error
			if list, err = decodeList(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if err := streamEnc.Encode(list, w); err != nil {
			b.Error(err)
		}
	}))
	b.Cleanup(baseline.Close)
	overHTTP := func(b *testing.B, url string) {
		b.ReportAllocs()
		var size int64
		for b.Loop() {
			resp, err := client.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			size, err = io.CopyBuffer(struct{ io.Writer }{io.Discard}, resp.Body, rbuf)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("%d %v", resp.StatusCode, err)
			}
		}
		b.SetBytes(size)
	}
	b.Run("cache-json", func(b *testing.B) { get(b, tw.cached, "application/json") })
	b.Run("cache-protobuf", func(b *testing.B) { get(b, tw.cached, "application/vnd.kubernetes.protobuf") })
	b.Run("etcd-json", func(b *testing.B) { get(b, tw.etcd, "application/json") })
	b.Run("etcd-protobuf", func(b *testing.B) { get(b, tw.etcd, "application/vnd.kubernetes.protobuf") })
	b.Run("cache-json-inmemory", func(b *testing.B) { inMemory(b, tw.cached, "application/json") })
	b.Run("cache-protobuf-inmemory", func(b *testing.B) { inMemory(b, tw.cached, "application/vnd.kubernetes.protobuf") })
	b.Run("baseline-http-apimachinery-decode-encode-json", func(b *testing.B) { overHTTP(b, baseline.URL) })
	b.Run("baseline-http-apimachinery-encode-json", func(b *testing.B) { overHTTP(b, baseline.URL+"?decoded=1") })
	b.Run("baseline-apimachinery-decode-encode-json", func(b *testing.B) {
		b.ReportAllocs()
		cw := &countWriter{}
		for b.Loop() {
			list := decode(b)
			cw.n = 0
			if err := enc.Encode(list, cw); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(cw.n)
	})
	b.Run("baseline-apimachinery-encode-json", func(b *testing.B) {
		b.ReportAllocs()
		list := decode(b)
		cw := &countWriter{}
		for b.Loop() {
			cw.n = 0
			if err := enc.Encode(list, cw); err != nil {
				b.Fatal(err)
			}
		}
		b.SetBytes(cw.n)
	})
}
