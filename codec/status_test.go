package codec

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func statusCases() []struct {
	name string
	st   Status
	want metav1.Status
} {
	return []struct {
		name string
		st   Status
		want metav1.Status
	}{
		{
			name: "not found",
			st: Status{Code: 404, Reason: "NotFound", Message: `configmaps "a<b>&c" not found`,
				Details: &StatusDetails{Name: "a<b>&c", Kind: "configmaps"}},
			want: metav1.Status{Status: "Failure", Code: 404, Reason: metav1.StatusReasonNotFound, Message: `configmaps "a<b>&c" not found`,
				Details: &metav1.StatusDetails{Name: "a<b>&c", Kind: "configmaps"}},
		},
		{
			name: "timeout with cause and retry",
			st: Status{Code: 504, Reason: "Timeout", Message: "Too large resource version: 99, current: 12",
				Details: &StatusDetails{Group: "apps", Causes: []StatusCause{{Type: "ResourceVersionTooLarge", Message: "Too large resource version"}, {Field: "metadata.name", Message: "x\ny\u2028"}}, RetryAfterSeconds: 1}},
			want: metav1.Status{Status: "Failure", Code: 504, Reason: metav1.StatusReasonTimeout, Message: "Too large resource version: 99, current: 12",
				Details: &metav1.StatusDetails{Group: "apps", Causes: []metav1.StatusCause{{Type: "ResourceVersionTooLarge", Message: "Too large resource version"}, {Field: "metadata.name", Message: "x\ny\u2028"}}, RetryAfterSeconds: 1}},
		},
		{
			name: "expired, no details",
			st:   Status{Code: 410, Reason: "Expired", Message: "too old resource version: 5 (10)"},
			want: metav1.Status{Status: "Failure", Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 5 (10)"},
		},
		{
			name: "success",
			st:   Status{Code: 200},
			want: metav1.Status{Status: "Success", Code: 200},
		},
		{
			name: "empty details",
			st:   Status{Code: 429, Reason: "TooManyRequests", Details: &StatusDetails{}},
			want: metav1.Status{Status: "Failure", Code: 429, Reason: metav1.StatusReasonTooManyRequests, Details: &metav1.StatusDetails{}},
		},
	}
}

// TestStatusJSON compares AppendJSONStatus byte for byte with
// apimachinery's JSON serializer writing the same metav1.Status.
func TestStatusJSON(t *testing.T) {
	for _, tc := range statusCases() {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			want.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			wantJSON, err := json.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			got := AppendJSONStatus([]byte("prefix"), &tc.st)
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("AppendJSONStatus dropped dst")
			}
			got = got[len("prefix"):]
			if !bytes.Equal(got, wantJSON) {
				t.Fatalf("AppendJSONStatus =\n%s\nwant\n%s", got, wantJSON)
			}
			obj, _, err := jsonCodec().Decode(got, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&want, obj.(*metav1.Status)); diff != "" {
				t.Fatalf("decoded Status differs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestStatusProtobuf compares AppendProtobufStatus byte for byte with
// apimachinery's protobuf serializer writing the same metav1.Status.
func TestStatusProtobuf(t *testing.T) {
	ser := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for _, tc := range statusCases() {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.want
			in.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			var want bytes.Buffer
			if err := ser.Encode(&in, &want); err != nil {
				t.Fatal(err)
			}
			got := AppendProtobufStatus(nil, &tc.st)
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("AppendProtobufStatus =\n%q\nwant\n%q", got, want.Bytes())
			}
			if len(got) != pbEnvelopeSize("v1", "Status", statusProtoSize(&tc.st)) {
				t.Fatalf("size mismatch")
			}
			obj, _, err := ser.Decode(got, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			exp := tc.want
			exp.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
			if diff := cmp.Diff(&exp, obj.(*metav1.Status)); diff != "" {
				t.Fatalf("decoded Status differs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendJSONQuote(t *testing.T) {
	for _, s := range []string{
		"", "plain", `q"uote\back`, "<script>&</script>", "\x00\x01\x08\x0c\x1f\x7f", "tab\tnl\nret\r",
		"ünïcödé ✓ 🎉", "\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80",
	} {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONQuote(nil, s); !bytes.Equal(got, want) {
			t.Errorf("appendJSONQuote(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppendJSONQuote(f *testing.F) {
	f.Add("a<b>\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONQuote(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONQuote(%q) = %s, want %s (valid utf8: %v)", s, got, want, utf8.ValidString(s))
		}
	})
}

// jsonCodec decodes JSON into the typed objects of client-go's scheme.
func jsonCodec() runtime.Decoder { return scheme.Codecs.UniversalDeserializer() }
