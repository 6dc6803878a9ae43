package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"testing/iotest"

	gojson "github.com/goccy/go-json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

// listBodies returns LIST bodies as kube-apiserver writes them
// (apimachinery's JSON and protobuf serializers), and Tables.
func listBodies(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	js := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	for _, n := range []int{0, 1, 3, 200} {
		for _, cont := range []string{"", `eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTIsInN0YXJ0IjoiY20tMVx1MDAwMCJ9`} {
			l := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"},
				ListMeta: metav1.ListMeta{ResourceVersion: "12", Continue: cont}, Items: []corev1.ConfigMap{}}
			for i := range n {
				l.Items = append(l.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "ns",
					Labels: map[string]string{"items": "[{", "k": `"\}`}},
					Data: map[string]string{"payload": strings.Repeat(`x"\{[`, 1000*(i%3)), "items": "]}", "continue": "no"}})
			}
			var b bytes.Buffer
			if err := js.Encode(l, &b); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("json-%d-%v", n, cont != "")] = bytes.Clone(b.Bytes())
			b.Reset()
			if err := pb.Encode(l, &b); err != nil {
				t.Fatal(err)
			}
			out[fmt.Sprintf("protobuf-%d-%v", n, cont != "")] = bytes.Clone(b.Bytes())
		}
	}
	tab := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "Table"},
		ListMeta:          metav1.ListMeta{ResourceVersion: "7", Continue: "abc"},
		ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string"}},
		Rows:              []metav1.TableRow{{Cells: []any{"a"}, Object: runtime.RawExtension{Raw: []byte(`{"kind":"PartialObjectMetadata","items":[{}]}`)}}, {Cells: []any{"b"}}}}
	var b bytes.Buffer
	if err := js.Encode(tab, &b); err != nil {
		t.Fatal(err)
	}
	out["table"] = bytes.Clone(b.Bytes())
	out["table-empty"] = []byte(`{"kind":"Table","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"3"},"columnDefinitions":[]}`)
	return out
}

func TestReadListMatchesParseList(t *testing.T) {
	for name, body := range listBodies(t) {
		want, err := parseList(body)
		if err != nil {
			t.Fatalf("%s: parseList: %v", name, err)
		}
		got, n, err := readList(bytes.NewReader(body))
		if err != nil || got != want || n != int64(len(body)) {
			t.Errorf("%s: readList = %+v, %d, %v; parseList = %+v, %d bytes", name, got, n, err, want, len(body))
		}
		// One byte per read: every state crosses a buffer boundary.
		got, n, err = readList(iotest.OneByteReader(bytes.NewReader(body)))
		if err != nil || got != want || n != int64(len(body)) {
			t.Errorf("%s (one byte per read): readList = %+v, %d, %v; parseList = %+v", name, got, n, err, want)
		}
		// Every truncation that loses part of the list is an error.
		step := max(1, len(body)/97)
		for cut := 0; cut < len(body); cut += step {
			if p, err := parseList(body[:cut]); err == nil && p == want {
				continue // a complete body still (trailing newline, empty optional protobuf fields)
			}
			if got, _, err := readList(bytes.NewReader(body[:cut])); err == nil {
				t.Errorf("%s cut at %d of %d: readList = %+v, want an error", name, cut, len(body), got)
			}
		}
	}
}

func TestReadListRejects(t *testing.T) {
	for _, body := range []string{
		``, `{}`, `{"kind":"ConfigMap","metadata":{}}`, `[1,2]`, `"items"`, `{"items":[{}]}{"items":[]}`,
		`{"items":[{]}`, `{"items":[{}]`, `{"items":"[{}]"}`, "k8s\x00", "k8s\x00\x12\x05\x0a\x00",
	} {
		if got, _, err := readList(strings.NewReader(body)); err == nil {
			t.Errorf("readList(%q) = %+v, want an error", body, got)
		}
	}
}

// FuzzReadList: readList never panics, and on bodies parseList accepts as
// JSON it agrees with it (protobuf and structurally checked JSON are
// compared on the seeds above).
func FuzzReadList(f *testing.F) {
	for _, b := range listBodies(f) {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"kind":"List","items":[{"a":"\"}"},{}],"metadata":{"continue":"c\u0041"}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, _, err := readList(bytes.NewReader(body))
		if bytes.HasPrefix(body, protoMagic) {
			return
		}
		want, werr := parseList(body)
		if werr == nil && (err != nil || got != want) {
			t.Fatalf("readList = %+v, %v; parseList = %+v", got, err, want)
		}
	})
}

// BenchmarkReadList: a JSON list of 200 ConfigMaps of 100 KiB of
// config-file text (a newline, escaped, every ~30 bytes: the harness's seed
// data), read as it streams (readList) against buffering then parsing
// (readAll + parseList, the harness before).
//
//	go test ./bench -run '^$' -bench BenchmarkReadList -count=3
func BenchmarkReadList(b *testing.B) {
	js := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{})
	l := &corev1.ConfigMapList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}, ListMeta: metav1.ListMeta{ResourceVersion: "9"}}
	for i := range 200 {
		l.Items = append(l.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "ns"},
			Data: map[string]string{"application.properties": fillerText()[i*1000 : i*1000+100<<10]}})
	}
	var buf bytes.Buffer
	if err := js.Encode(l, &buf); err != nil {
		b.Fatal(err)
	}
	body := buf.Bytes()
	b.Run("stream", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if info, _, err := readList(bytes.NewReader(body)); err != nil || info.Items != 200 {
				b.Fatal(info, err)
			}
		}
	})
	b.Run("buffer-parse", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			all, err := readAll(bytes.NewReader(body), nil)
			if err != nil {
				b.Fatal(err)
			}
			if info, err := parseList(all); err != nil || info.Items != 200 {
				b.Fatal(info, err)
			}
		}
	})
}

// The test oracle: the harness's former parser of whole LIST bodies
// (goccy/go-json for JSON, protoFields for protobuf).

// jsonList is the part of a JSON list or Table the oracle reads; items and
// rows are parsed (so the body is checked) but not kept.
type jsonList struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Continue        string `json:"continue"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Items *[]struct{} `json:"items"`
	Rows  *[]struct{} `json:"rows"`
}

// parseList parses a LIST response body in JSON (list or Table) or
// Kubernetes protobuf.
func parseList(body []byte) (listInfo, error) {
	if bytes.HasPrefix(body, protoMagic) {
		return parseProtoList(body)
	}
	var l jsonList
	if err := gojson.Unmarshal(body, &l); err != nil {
		return listInfo{}, fmt.Errorf("cannot parse list: %w", err)
	}
	info := listInfo{Continue: l.Metadata.Continue, ResourceVersion: l.Metadata.ResourceVersion}
	switch {
	case l.Items != nil:
		info.Items = len(*l.Items)
	case l.Rows != nil:
		info.Items = len(*l.Rows)
	case l.Kind == "Table":
		// A Table with no rows omits "rows".
	default:
		return info, errNotList
	}
	return info, nil
}

func parseProtoList(body []byte) (listInfo, error) {
	raw, err := unknownRaw(body)
	if err != nil {
		return listInfo{}, fmt.Errorf("cannot parse protobuf list: %w", err)
	}
	var info listInfo
	err = protoFields(raw, func(num int, val []byte, _ uint64) error {
		switch num {
		case 1: // ListMeta
			return readListMeta(val, &info)
		case 2:
			info.Items++
		}
		return nil
	})
	if err != nil {
		return info, fmt.Errorf("cannot parse protobuf list: %w", err)
	}
	return info, nil
}
