package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

var (
	oracleProto = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	oracleJSON  = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, jsonserializer.SerializerOptions{})
)

// objectsPerKind is how many random objects each kind gets; the env var
// LAZYAPI_CODEC_OBJECTS raises it for longer runs.
func objectsPerKind(t testing.TB, def int) int {
	if s := os.Getenv("LAZYAPI_CODEC_OBJECTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("LAZYAPI_CODEC_OBJECTS=%q: %v", s, err)
		}
		return n
	}
	if testing.Short() {
		return 3
	}
	return def
}

// extraFuzzFuncs add what the meta fuzzer leaves out: varied quantities,
// FieldsV1 JSON, and strings that need JSON escaping.
func extraFuzzFuncs(runtimeserializer.CodecFactory) []any {
	return []any{
		func(q *resource.Quantity, c randfill.Continue) {
			suffixes := []string{"", "m", "k", "M", "G", "Ki", "Mi", "Gi", "Ti", "u", "n", "e3", "E", "P"}
			var s string
			switch c.Intn(4) {
			case 0:
				s = strconv.Itoa(c.Intn(2000))
			case 1:
				s = strconv.Itoa(c.Intn(100000)) + suffixes[c.Intn(len(suffixes))]
			case 2:
				s = fmt.Sprintf("%d.%d%s", c.Intn(100), c.Intn(1000), suffixes[c.Intn(len(suffixes))])
			default:
				s = "-" + strconv.Itoa(1+c.Intn(5000)) + suffixes[c.Intn(len(suffixes))]
			}
			*q = resource.MustParse(s)
		},
		func(f *metav1.ManagedFieldsEntry, c randfill.Continue) {
			c.FillNoCustom(f)
			if c.Bool() {
				f.FieldsV1 = nil
			} else {
				f.FieldsV1 = &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:a<b>&c":{}}},"f:data":{".":{},"f:x\u2028":{}}}`)}
			}
		},
		func(s *string, c randfill.Continue) {
			switch c.Intn(8) {
			case 0:
				*s = "<a href=\"x\">&amp;</a>\u2028\u2029\x01\t\n\\"
			case 1:
				*s = "bad utf8 \xff\xfe end"
			default:
				*s = c.String(12)
			}
		},
	}
}

func newFiller(seed int64) *randfill.Filler {
	codecs := runtimeserializer.NewCodecFactory(scheme.Scheme)
	return fuzzer.FuzzerFor(fuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, extraFuzzFuncs), rand.NewSource(seed), codecs)
}

// kindsUnderTest lists every external kind of client-go's scheme that the
// schema covers, sorted.
func kindsUnderTest(t testing.TB, s *Schema) []schema.GroupVersionKind {
	var out []schema.GroupVersionKind
	for k := range scheme.Scheme.AllKnownTypes() {
		if k.Version == runtime.APIVersionInternal {
			continue
		}
		if !s.Known(k.GroupVersion().String(), k.Kind) {
			continue
		}
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	if len(out) < 300 {
		t.Fatalf("only %d kinds in the schema", len(out))
	}
	return out
}

func seedFor(k schema.GroupVersionKind) int64 {
	h := fnv.New64a()
	h.Write([]byte(k.String()))
	return int64(h.Sum64())
}

// oracleJSONOf decodes stored bytes as kube-apiserver does, sets the RV and
// encodes JSON with apimachinery's serializer.
func oracleJSONOf(t testing.TB, stored []byte, gvk schema.GroupVersionKind, rv int64) ([]byte, bool) {
	obj, _, err := oracleProto.Decode(stored, nil, nil)
	if err != nil {
		t.Fatalf("oracle decode %v: %v", gvk, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	hasRV := false
	if acc, err := meta.Accessor(obj); err == nil && rv != 0 {
		acc.SetResourceVersion(strconv.FormatInt(rv, 10))
		hasRV = true
	}
	var buf bytes.Buffer
	if err := oracleJSON.Encode(obj, &buf); err != nil {
		return nil, hasRV
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), hasRV
}

func TestTranscodeDifferential(t *testing.T) {
	s := DefaultSchema()
	n := objectsPerKind(t, 20)
	kinds := kindsUnderTest(t, s)
	total, byteEqual, skipped := 0, 0, 0
	for _, k := range kinds {
		rt := scheme.Scheme.AllKnownTypes()[k]
		if _, ok := rt.FieldByName("TypeMeta"); !ok {
			// no TypeMeta (e.g. WatchEvent): such a kind cannot be stored
			skipped++
			continue
		}
		f := newFiller(seedFor(k))
		for i := 0; i < n; i++ {
			obj := reflect.New(rt).Interface().(runtime.Object)
			f.Fill(obj)
			stored, err := storagefmt.Protobuf(obj)
			if err != nil {
				t.Fatalf("%v: storagefmt.Protobuf: %v", k, err)
			}
			o, err := Unwrap(stored)
			if err != nil {
				t.Fatalf("%v: Unwrap: %v", k, err)
			}
			rv := int64(i*7919 + 1)
			// the envelope's kind (options kinds are stored as their first group)
			want, hasRV := oracleJSONOf(t, stored, schema.FromAPIVersionAndKind(o.APIVersion, o.Kind), rv)
			if !hasRV {
				rv = 0
			}
			got, err := s.AppendJSON([]byte("prefix"), o, rv, JSONOptions{})
			if want == nil {
				// the oracle cannot encode it (e.g. invalid RawExtension); we must fail too
				if err == nil {
					t.Errorf("%v #%d: AppendJSON succeeded where apimachinery fails: %s", k, i, got)
				}
				continue
			}
			if err != nil {
				t.Errorf("%v #%d: AppendJSON: %v\nwant %s", k, i, err, want)
				continue
			}
			if !bytes.HasPrefix(got, []byte("prefix")) {
				t.Fatalf("AppendJSON lost dst")
			}
			got = got[len("prefix"):]
			total++
			if bytes.Equal(got, want) {
				byteEqual++
				continue
			}
			if d := jsonDiff(got, want); d != "" {
				t.Errorf("%v #%d: %s\n got %s\nwant %s", k, i, d, got, want)
				if t.Failed() && strings.Count(fmt.Sprint(t.Name()), "") > 0 {
					// keep going to list more kinds, but bound the noise
				}
			} else {
				t.Errorf("%v #%d: semantically equal but bytes differ\n got %s\nwant %s", k, i, got, want)
			}
		}
	}
	t.Logf("%d kinds (%d without TypeMeta skipped), %d objects, %d byte-identical", len(kinds), skipped, total, byteEqual)
	if total == 0 {
		t.Fatal("nothing compared")
	}
}

// jsonDiff returns "" when a and b are equal JSON values, else the first
// differing path.
func jsonDiff(a, b []byte) string {
	var va, vb any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	if err := da.Decode(&va); err != nil {
		return "got invalid JSON: " + err.Error()
	}
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if err := db.Decode(&vb); err != nil {
		return "want invalid JSON: " + err.Error()
	}
	return firstDiff(va, vb, "$")
}

func firstDiff(a, b any, path string) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got object, want %T", path, b)
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		var ks []string
		for k := range keys {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		for _, k := range ks {
			va, oka := x[k]
			vb, okb := y[k]
			if !oka {
				return fmt.Sprintf("%s.%s: missing, want %v", path, k, vb)
			}
			if !okb {
				return fmt.Sprintf("%s.%s: got %v, want absent", path, k, va)
			}
			if d := firstDiff(va, vb, path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		y, ok := b.([]any)
		if !ok {
			return fmt.Sprintf("%s: got array, want %T", path, b)
		}
		if len(x) != len(y) {
			return fmt.Sprintf("%s: got %d elements, want %d", path, len(x), len(y))
		}
		for i := range x {
			if d := firstDiff(x[i], y[i], fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Sprintf("%s: got %v, want %v", path, a, b)
	}
	return ""
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewSource(7))
	alphabet := []string{"a", "Z", "0", " ", "<", ">", "&", "\"", "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "😀", "\xff", "\xe2\x80", "\xc3", "/", "abcdefgh"}
	check := func(s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, []byte(s)); string(got) != string(want) {
			t.Fatalf("appendJSONString(%q) = %s, want %s", s, got, want)
		}
	}
	for b := 0; b < 256; b++ {
		check(string([]byte{byte(b)}))
		check("abcdefghij" + string([]byte{byte(b)}) + "klmnopqrstu")
	}
	for i := 0; i < 20000; i++ {
		var sb strings.Builder
		for j := r.Intn(40); j > 0; j-- {
			sb.WriteString(alphabet[r.Intn(len(alphabet))])
		}
		check(sb.String())
	}
}

func TestAppendCompactJSONMatchesEncodingJSON(t *testing.T) {
	inputs := []string{`{}`, ` { "a" : [1, 2.5e-3, -0, true, false, null, "x<y>&\u2028"] } `, `"\u00e9\ud83d\ude00"`, `[`, `{"a":}`, `01`, `1.`, `"\x"`, "\"\x01\"", `{"a":1}{}`, ``, `nul`, `-`, `1e`, `[1,]`, `{"a" 1}`, "\"\xe2\x80\xa8\"", "\"\xff\""}
	for _, in := range inputs {
		var want bytes.Buffer
		werr := json.Compact(&want, []byte(in))
		if werr == nil {
			// encoding/json escapes HTML in Marshaler output
			want.Reset()
			m, err := json.Marshal(json.RawMessage(in))
			if err != nil {
				werr = err
			} else {
				want.Write(m)
			}
		}
		got, ok := appendCompactJSON([]byte("d"), []byte(in))
		if ok != (werr == nil) {
			t.Errorf("appendCompactJSON(%q) ok = %v, encoding/json error %v", in, ok, werr)
			continue
		}
		if ok && string(got[1:]) != want.String() {
			t.Errorf("appendCompactJSON(%q) = %s, want %s", in, got[1:], want.String())
		}
		if !ok && string(got) != "d" {
			t.Errorf("appendCompactJSON(%q) changed dst on error", in)
		}
	}
}

// TestQuantityMatchesApimachinery compares appendQuantity (fast path and
// fallback) with resource.ParseQuantity + MarshalJSON, which is what
// kube-apiserver's decode + encode does with a stored quantity string.
func TestQuantityMatchesApimachinery(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	suffixes := []string{"", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3", "E-2", "e0", "x", "i"}
	var inputs []string
	for _, s := range []string{"0", "1", "1000", "999", "100m", "1k", "8Gi", "1024Mi", "1023Mi", "16Ei", "9223372036854775807", "9223372036854775808", "0.5", "-1", "+1", "01", "1.0", "5e3", ".5", "", " 1", "1 ", "1Ki", "1024Ki", "3Ti", "12Ti", "123Ti", "1000Pi", "123456789012345678", "1234567890123456789", "1000000000000000000E"} {
		inputs = append(inputs, s)
	}
	for i := 0; i < 20000; i++ {
		n := strconv.FormatInt(r.Int63n(1<<uint(r.Intn(62)+1)), 10)
		if r.Intn(4) == 0 {
			n += "000"
		}
		if r.Intn(6) == 0 {
			n = "-" + n
		}
		if r.Intn(6) == 0 {
			n += "." + strconv.Itoa(r.Intn(1000))
		}
		inputs = append(inputs, n+suffixes[r.Intn(len(suffixes))])
	}
	for _, in := range inputs {
		p := appendVarint([]byte{0x0a}, uint64(len(in)))
		p = append(p, in...)
		got, err := appendQuantity(nil, p)
		q, qerr := resource.ParseQuantity(in)
		if (err != nil) != (qerr != nil) {
			t.Fatalf("appendQuantity(%q) error %v, ParseQuantity error %v", in, err, qerr)
		}
		if qerr != nil {
			continue
		}
		want, _ := q.MarshalJSON()
		if string(got) != string(want) {
			t.Fatalf("appendQuantity(%q) = %s, want %s", in, got, want)
		}
	}
	if got, _ := appendQuantity(nil, nil); string(got) != `"0"` {
		t.Errorf("empty Quantity = %s", got)
	}
}

func TestAppendDuration(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1000, 1500 * time.Microsecond, time.Second, 90 * time.Minute, -time.Hour - 1, 1<<63 - 1, -1 << 63} {
		if got := appendDuration(nil, int64(d)); string(got) != d.String() {
			t.Errorf("appendDuration(%d) = %s, want %s", d, got, d.String())
		}
	}
}

func TestAppendJSONBase64(t *testing.T) {
	r := rand.New(rand.NewSource(5))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		r.Read(b)
		want, _ := json.Marshal(b)
		if got := appendJSONBase64([]byte("x"), b); string(got[1:]) != string(want) {
			t.Fatalf("appendJSONBase64(%d bytes) = %s, want %s", n, got[1:], want)
		}
	}
}
