package codec

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
)

type watchEvent struct {
	Type   watch.EventType
	Object runtime.Object
}

// decodeWatch decodes a watch response body as client-go's REST client does:
// the media type's stream framer and serializer for the frames, then the
// scheme's decoder for the embedded objects.
func decodeWatch(t *testing.T, mediaType string, body []byte) []watchEvent {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok || info.StreamSerializer == nil {
		t.Fatalf("no stream serializer for %s", mediaType)
	}
	fr := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(body)))
	dec := restclientwatch.NewDecoder(streaming.NewDecoder(fr, info.StreamSerializer.Serializer), scheme.Codecs.UniversalDeserializer())
	defer dec.Close()
	var out []watchEvent
	for {
		typ, obj, err := dec.Decode()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("client-go watch decoder (%s): %v after %d events", mediaType, err, len(out))
		}
		out = append(out, watchEvent{typ, obj})
	}
}

func TestWatchBookmarkAndError(t *testing.T) {
	st := &Status{Code: 410, Reason: "Expired", Message: "too old resource version: 5 (10)"}
	wantStatus := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: st.Message}
	bm := func(rv string, end bool) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"}, ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv}}
		if end {
			cm.Annotations = map[string]string{"k8s.io/initial-events-end": "true"}
		}
		return cm
	}
	want := []watchEvent{
		{watch.Bookmark, bm("12", false)},
		{watch.Bookmark, bm("300000000000", true)},
		{watch.Error, wantStatus},
	}
	for _, mt := range []string{mediaJSON, mediaProtobuf} {
		t.Run(mt, func(t *testing.T) {
			var body []byte
			if mt == mediaJSON {
				body = AppendJSONWatchBookmark(body, "v1", "ConfigMap", 12, false)
				body = AppendJSONWatchBookmark(body, "v1", "ConfigMap", 300000000000, true)
				body = AppendJSONWatchStatus(body, st)
				if n := bytes.Count(body, []byte("\n")); n != 3 {
					t.Fatalf("JSON watch frames have %d newlines, want 3:\n%s", n, body)
				}
			} else {
				body = AppendProtobufWatchBookmark(body, "v1", "ConfigMap", 12, false)
				body = AppendProtobufWatchBookmark(body, "v1", "ConfigMap", 300000000000, true)
				body = AppendProtobufWatchStatus(body, st)
			}
			got := decodeWatch(t, mt, body)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("decoded events differ (-want +got):\n%s", diff)
			}
		})
	}
}

// TestProtobufWatchStatusFrame checks the ERROR frame byte for byte against
// apimachinery's protobuf encoding of a metav1.WatchEvent.
func TestProtobufWatchStatusFrame(t *testing.T) {
	st := &Status{Code: 500, Reason: "InternalError", Message: "boom", Details: &StatusDetails{Causes: []StatusCause{{Message: "x"}}}}
	raw := AppendProtobufStatus(nil, st)
	ev := metav1.WatchEvent{Type: "ERROR", Object: runtime.RawExtension{Raw: raw}}
	pb, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := binary.BigEndian.AppendUint32(nil, uint32(len(pb)))
	want = append(want, pb...)
	if got := AppendProtobufWatchStatus(nil, st); !bytes.Equal(got, want) {
		t.Fatalf("AppendProtobufWatchStatus =\n%q\nwant\n%q", got, want)
	}
}

// TestWatchStreamDifferential writes ADDED/MODIFIED/DELETED events of stored
// ConfigMaps and Pods and a closing initial-events-end BOOKMARK, and decodes
// the stream with client-go's watch decoder in JSON and protobuf.
func TestWatchStreamDifferential(t *testing.T) {
	s := fxSchema(t)
	cms := fxStore(t, testConfigMaps(4), 50)
	pods := fxStore(t, testPods(), 90)
	type ev struct {
		typ EventType
		it  fxItem
	}
	events := []ev{{EventAdded, cms[0]}, {EventAdded, cms[1]}, {EventModified, cms[2]}, {EventDeleted, cms[3]}, {EventAdded, pods[0]}, {EventDeleted, pods[1]}}
	var want []watchEvent
	for _, e := range events {
		w := e.it.want.DeepCopyObject()
		gvks, _, err := scheme.Scheme.ObjectKinds(w)
		if err != nil {
			t.Fatal(err)
		}
		w.GetObjectKind().SetGroupVersionKind(gvks[0])
		want = append(want, watchEvent{watch.EventType(e.typ), w})
	}
	end := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "99", Annotations: map[string]string{InitialEventsEndAnnotation: "true"}}}
	want = append(want, watchEvent{watch.Bookmark, end})

	for _, mt := range []string{mediaJSON, mediaProtobuf} {
		t.Run(mt, func(t *testing.T) {
			var body []byte
			for _, e := range events {
				if mt == mediaJSON {
					var err error
					if body, err = s.AppendJSONWatchEvent(body, e.typ, e.it.obj, e.it.rv); err != nil {
						t.Fatal(err)
					}
				} else {
					body = AppendProtobufWatchEvent(body, e.typ, e.it.obj, e.it.rv)
				}
			}
			if mt == mediaJSON {
				body = AppendJSONWatchBookmark(body, "v1", "Pod", 99, true)
			} else {
				body = AppendProtobufWatchBookmark(body, "v1", "Pod", 99, true)
			}
			got := decodeWatch(t, mt, body)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("decoded events differ (-want +got):\n%s", diff)
			}
		})
	}
}

// TestJSONWatchEventBytes checks a JSON frame byte for byte against
// encoding/json of metav1.WatchEvent holding apimachinery's JSON of the
// object, as kube-apiserver writes it.
func TestJSONWatchEventBytes(t *testing.T) {
	s := fxSchema(t)
	it := fxStore(t, testConfigMaps(3), 7)[2]
	w := it.want.DeepCopyObject()
	w.GetObjectKind().SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	raw := encodeOracle(t, fxJSON, w)
	frame, err := json.Marshal(&metav1.WatchEvent{Type: "MODIFIED", Object: runtime.RawExtension{Raw: raw}})
	if err != nil {
		t.Fatal(err)
	}
	frame = append(frame, '\n')
	got, err := s.AppendJSONWatchEvent([]byte("x"), EventModified, it.obj, it.rv)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[1:], frame) {
		t.Fatalf("JSON watch frame:\ngot  %s\nwant %s", got[1:], frame)
	}
	if _, err := s.AppendJSONWatchEvent(got[:1], EventAdded, Object{Format: FormatProtobuf, APIVersion: "v1", Kind: "ConfigMap", Raw: []byte{0xff}}, 1); err == nil {
		t.Fatal("AppendJSONWatchEvent of corrupt object: want error")
	}
}

// TestProtobufWatchEventBytes checks an object frame byte for byte against
// metav1.WatchEvent.Marshal around apimachinery's protobuf of the object
// (resourceVersion 0 keeps the stored bytes unchanged).
func TestProtobufWatchEventBytes(t *testing.T) {
	for _, it := range append(fxStore(t, testConfigMaps(2), 1), fxStore(t, testPods(), 1)...) {
		w := it.want.DeepCopyObject()
		acc, _ := meta.Accessor(w)
		acc.SetResourceVersion("")
		gvks, _, err := scheme.Scheme.ObjectKinds(w)
		if err != nil {
			t.Fatal(err)
		}
		w.GetObjectKind().SetGroupVersionKind(gvks[0])
		ev := metav1.WatchEvent{Type: "DELETED", Object: runtime.RawExtension{Raw: encodeOracle(t, fxProto, w)}}
		pb, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want := append(binary.BigEndian.AppendUint32(nil, uint32(len(pb))), pb...)
		if got := AppendProtobufWatchEvent(nil, EventDeleted, it.obj, 0); !bytes.Equal(got, want) {
			t.Fatalf("protobuf watch frame:\ngot  %q\nwant %q", got, want)
		}
	}
}
