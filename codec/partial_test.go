package codec

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// metadataCodecs decodes what client-go's metadata client receives: a scheme
// with the meta.k8s.io/v1 types only (k8s.io/client-go/metadata builds the
// same one).
func metadataCodecs(t testing.TB) serializer.CodecFactory {
	sch := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(sch); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(sch, metav1.SchemeGroupVersion)
	return serializer.NewCodecFactory(sch)
}

func partialOf(t testing.TB, obj runtime.Object) *metav1.PartialObjectMetadata {
	acc, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	p := meta.AsPartialObjectMetadata(acc)
	p.TypeMeta = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
	return p
}

func TestPartialObjectMetadata(t *testing.T) {
	s := fxSchema(t)
	dec := metadataCodecs(t).UniversalDeserializer()
	items := append(fxStore(t, testConfigMaps(3), 10), fxStore(t, testPods(), 20)...)
	for _, it := range items {
		want := partialOf(t, it.want)
		// JSON: byte for byte as encoding/json writes the PartialObjectMetadata.
		got, err := s.AppendPartialJSON(nil, it.obj, it.rv)
		if err != nil {
			t.Fatal(err)
		}
		if oracle, _ := json.Marshal(want); !bytes.Equal(got, oracle) {
			t.Fatalf("AppendPartialJSON =\n%s\nwant\n%s", got, oracle)
		}
		// Protobuf: decoded by the metadata client's scheme.
		pb, err := AppendPartialProtobuf([]byte("keep"), it.obj, it.rv)
		if err != nil {
			t.Fatal(err)
		}
		if string(pb[:4]) != "keep" {
			t.Fatal("AppendPartialProtobuf dropped dst")
		}
		obj, _, err := dec.Decode(pb[4:], nil, nil)
		if err != nil {
			t.Fatalf("decode protobuf PartialObjectMetadata: %v", err)
		}
		if diff := cmp.Diff(want, obj); diff != "" {
			t.Fatalf("protobuf PartialObjectMetadata differs (-want +got):\n%s", diff)
		}
	}
	// Custom resources are stored as JSON; their metadata informers still ask
	// for protobuf.
	for _, cr := range fxStoreCustom(t, 2, 5) {
		want := partialOf(t, cr.want)
		got, err := s.AppendPartialJSON(nil, cr.obj, cr.rv)
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := dec.Decode(got, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, obj); diff != "" {
			t.Fatalf("custom resource PartialObjectMetadata differs (-want +got):\n%s", diff)
		}
		pb, err := AppendPartialProtobuf([]byte("x"), cr.obj, cr.rv)
		if err != nil {
			t.Fatal(err)
		}
		if obj, _, err = dec.Decode(pb[1:], nil, nil); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, obj); diff != "" {
			t.Fatalf("custom resource protobuf PartialObjectMetadata differs (-want +got):\n%s", diff)
		}
		n, err := PartialProtobufListItemSize(cr.obj, cr.rv)
		if err != nil {
			t.Fatal(err)
		}
		if item, err := AppendPartialProtobufListItem(nil, cr.obj, cr.rv); err != nil || len(item) != n {
			t.Fatalf("custom resource list item: %d bytes (size %d), %v", len(item), n, err)
		}
	}
	bad := Object{Format: FormatJSON, Raw: []byte(`{"metadata":{"name":5}}`)}
	if b, err := AppendPartialProtobuf([]byte("x"), bad, 1); err == nil || string(b) != "x" {
		t.Fatalf("AppendPartialProtobuf(bad metadata) = %q, %v; want dst unchanged and an error", b, err)
	}
}

func TestPartialObjectMetadataList(t *testing.T) {
	s := fxSchema(t)
	dec := metadataCodecs(t).UniversalDeserializer()
	for _, n := range []int{0, 1, 6} {
		items := fxStore(t, testConfigMaps(n), 40)
		for _, lm := range listMetas {
			want := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"}}
			if lm.m.ResourceVersion != 0 {
				want.ResourceVersion = "500"
				if lm.m.ResourceVersion != 500 {
					want.ResourceVersion = "1"
				}
			}
			want.Continue, want.RemainingItemCount = lm.m.Continue, lm.m.RemainingItemCount
			want.Items = []metav1.PartialObjectMetadata{}
			for _, it := range items {
				want.Items = append(want.Items, *partialOf(t, it.want))
			}

			js := AppendPartialJSONListHead(nil, lm.m)
			size := 0
			for i, it := range items {
				if i > 0 {
					js = AppendJSONListSep(js)
				}
				var err error
				if js, err = s.AppendPartialJSON(js, it.obj, it.rv); err != nil {
					t.Fatal(err)
				}
				n, err := PartialProtobufListItemSize(it.obj, it.rv)
				if err != nil {
					t.Fatal(err)
				}
				size += n
			}
			js = AppendJSONListTail(js)
			if oracle, _ := json.Marshal(want); !bytes.Equal(js, oracle) {
				t.Fatalf("JSON PartialObjectMetadataList =\n%s\nwant\n%s", js, oracle)
			}
			obj, _, err := dec.Decode(js, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, obj); diff != "" {
				t.Fatalf("JSON list differs (-want +got):\n%s", diff)
			}

			pb := AppendPartialProtobufListHead(nil, lm.m, size)
			for _, it := range items {
				before := len(pb)
				if pb, err = AppendPartialProtobufListItem(pb, it.obj, it.rv); err != nil {
					t.Fatal(err)
				}
				if n, _ := PartialProtobufListItemSize(it.obj, it.rv); n != len(pb)-before {
					t.Fatalf("PartialProtobufListItemSize = %d, item took %d bytes", n, len(pb)-before)
				}
			}
			pb = AppendProtobufListTail(pb)
			obj, _, err = dec.Decode(pb, nil, nil)
			if err != nil {
				t.Fatalf("decode protobuf list: %v", err)
			}
			// protobuf items carry no TypeMeta (the message has only metadata)
			for i := range want.Items {
				want.Items[i].TypeMeta = metav1.TypeMeta{}
			}
			if diff := cmp.Diff(want, obj, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("protobuf list differs (-want +got):\n%s", diff)
			}
		}
	}
}

// TestPartialProtobufListBytes checks a protobuf PartialObjectMetadataList
// byte for byte against apimachinery's encoding of the same list (items at
// resourceVersion 0 keep their stored metadata bytes).
func TestPartialProtobufListBytes(t *testing.T) {
	items := fxStore(t, testConfigMaps(4), 1)
	m := ListMeta{ResourceVersion: 42, Continue: "more", RemainingItemCount: fxPtr(int64(9))}
	want := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "more", RemainingItemCount: fxPtr(int64(9))}}
	size := 0
	for _, it := range items {
		p := partialOf(t, it.want)
		p.ResourceVersion = ""
		want.Items = append(want.Items, *p)
		n, err := PartialProtobufListItemSize(it.obj, 0)
		if err != nil {
			t.Fatal(err)
		}
		size += n
	}
	got := AppendPartialProtobufListHead(nil, m, size)
	for _, it := range items {
		var err error
		if got, err = AppendPartialProtobufListItem(got, it.obj, 0); err != nil {
			t.Fatal(err)
		}
	}
	got = AppendProtobufListTail(got)
	enc := protobuf.NewSerializer(runtime.NewScheme(), nil)
	if oracle := encodeOracle(t, enc, want); !bytes.Equal(got, oracle) {
		t.Fatalf("protobuf PartialObjectMetadataList:\ngot  %q\nwant %q", got, oracle)
	}
}

// TestPartialWatch decodes a metadata watch (as the metadata informer does)
// in JSON and protobuf: events carry PartialObjectMetadata, the bookmark
// ends the initial events.
func TestPartialWatch(t *testing.T) {
	s := fxSchema(t)
	items := append(fxStore(t, testConfigMaps(2), 60), fxStoreCustom(t, 1, 70)...)
	codecs := metadataCodecs(t)
	for _, mt := range []string{mediaJSON, mediaProtobuf} {
		t.Run(mt, func(t *testing.T) {
			var body []byte
			var want []watchEvent
			for i, it := range items {
				typ := []EventType{EventAdded, EventModified, EventDeleted}[i%3]
				var err error
				if mt == mediaJSON {
					body, err = s.AppendPartialJSONWatchEvent(body, typ, it.obj, it.rv)
				} else {
					body, err = AppendPartialProtobufWatchEvent(body, typ, it.obj, it.rv)
				}
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, watchEvent{watch.EventType(typ), partialOf(t, it.want)})
			}
			bm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: "80", Annotations: map[string]string{InitialEventsEndAnnotation: "true"}}}
			if mt == mediaJSON {
				body = AppendJSONWatchBookmark(body, "meta.k8s.io/v1", "PartialObjectMetadata", 80, true)
			} else {
				body = AppendProtobufWatchBookmark(body, "meta.k8s.io/v1", "PartialObjectMetadata", 80, true)
			}
			want = append(want, watchEvent{watch.Bookmark, bm})

			info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt)
			if !ok || info.StreamSerializer == nil {
				t.Fatalf("no stream serializer for %s", mt)
			}
			fr := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(body)))
			dec := restclientwatch.NewDecoder(streaming.NewDecoder(fr, info.StreamSerializer.Serializer), codecs.UniversalDeserializer())
			var got []watchEvent
			for {
				typ, obj, err := dec.Decode()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("decode after %d events: %v", len(got), err)
				}
				got = append(got, watchEvent{typ, obj})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("decoded events differ (-want +got):\n%s", diff)
			}
		})
	}
}
