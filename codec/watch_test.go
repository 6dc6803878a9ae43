package codec

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
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
				body = AppendJSONBookmark(body, "v1", "ConfigMap", 12, false)
				body = AppendJSONBookmark(body, "v1", "ConfigMap", 300000000000, true)
				body = AppendJSONWatchStatus(body, st)
				if n := bytes.Count(body, []byte("\n")); n != 3 {
					t.Fatalf("JSON watch frames have %d newlines, want 3:\n%s", n, body)
				}
			} else {
				body = AppendProtobufBookmark(body, "v1", "ConfigMap", 12, false)
				body = AppendProtobufBookmark(body, "v1", "ConfigMap", 300000000000, true)
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
	raw := AppendStatusProtobuf(nil, st)
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
