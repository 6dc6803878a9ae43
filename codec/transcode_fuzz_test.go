package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Fuzz targets: arbitrary bytes give an error or an output, never a panic
// or an output out of proportion to the input. Seed corpora live in
// testdata/fuzz/<FuzzName>/ and run in plain `go test`; regenerate them
// with LAZYAPI_WRITE_FUZZ_CORPUS=1 go test -run TestWriteFuzzCorpus.
//
// Run with a short minimisation budget, e.g.
//
//	go test ./codec -run '^$' -fuzz '^FuzzTranscode$' -fuzztime=60s -fuzzminimizetime=2x
//
// the default (60s per new input) spends most of a short run minimising the
// large realistic seeds and reports "0/sec".

// fuzzKinds are the kinds FuzzTranscode decodes raw bytes as.
var fuzzKinds = []struct {
	gvk schema.GroupVersionKind
	new func() runtime.Object
}{
	{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, func() runtime.Object { return &corev1.Pod{} }},
	{schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, func() runtime.Object { return &corev1.ConfigMap{} }},
	{schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, func() runtime.Object { return &corev1.Secret{} }},
	{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, func() runtime.Object { return &appsv1.Deployment{} }},
	{schema.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "Event"}, func() runtime.Object { return &eventsv1.Event{} }},
	{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, func() runtime.Object { return &rbacv1.ClusterRole{} }},
	{schema.GroupVersionKind{Version: "v1", Kind: "Node"}, func() runtime.Object { return &corev1.Node{} }},
}

// maxExpansion bounds JSON output against protobuf input: every protobuf
// byte can at most open a zero-valued struct, and the schema bounds how
// much a zero struct writes.
func maxExpansion(n int) int { return 512*n + 64<<10 }

func FuzzUnwrap(f *testing.F) {
	for _, fx := range fixtures(f) {
		f.Add(fx.stored)
	}
	f.Add([]byte(`{"apiVersion":"v1"}`))
	f.Add([]byte("k8s:enc:aescbc:v1:key:xyz"))
	f.Fuzz(func(t *testing.T, stored []byte) {
		o, err := Unwrap(stored)
		if err != nil {
			if !(errors.Is(err, ErrCorrupt) || errors.Is(err, ErrEncrypted)) {
				t.Fatalf("Unwrap error %v is neither ErrCorrupt nor ErrEncrypted", err)
			}
			return
		}
		switch o.Format {
		case FormatJSON:
			if !bytes.Equal(o.Raw, stored) {
				t.Fatal("JSON Raw is not the stored value")
			}
		case FormatProtobuf:
			if len(o.Raw) > len(stored) || len(o.APIVersion)+len(o.Kind) > len(stored) {
				t.Fatal("Unwrap returned more than the input")
			}
			// the envelope round-trips through Unwrap
			o2, err := Unwrap(AppendProtobufEnvelope(nil, o, 7))
			if err != nil || o2.APIVersion != o.APIVersion || o2.Kind != o.Kind || !bytes.HasPrefix(o2.Raw, o.Raw) {
				t.Fatalf("envelope round trip: %+v, %v", o2, err)
			}
		default:
			t.Fatalf("Unwrap format %v", o.Format)
		}
	})
}

// FuzzTranscode feeds arbitrary protobuf to AppendJSON as one of a few
// kinds. When apimachinery decodes and encodes the same bytes, the output
// must be byte-identical; when apimachinery decodes but cannot encode,
// AppendJSON must fail too.
func FuzzTranscode(f *testing.F) {
	for _, fx := range fixtures(f) {
		o, _ := Unwrap(fx.stored)
		for i, k := range fuzzKinds {
			if k.gvk.Kind == o.Kind {
				f.Add(uint8(i), o.Raw)
			}
		}
	}
	f.Add(uint8(0), []byte{0x0a, 0x00, 0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, which uint8, raw []byte) {
		checkTranscode(t, which, raw)
	})
}

// checkTranscode is FuzzTranscode's property.
func checkTranscode(t *testing.T, which uint8, raw []byte) {
	t.Helper()
	s := DefaultSchema()
	k := fuzzKinds[int(which)%len(fuzzKinds)]
	o := Object{Format: FormatProtobuf, APIVersion: k.gvk.GroupVersion().String(), Kind: k.gvk.Kind, Raw: raw}
	got, err := s.AppendJSON(nil, o, 0, JSONOptions{})
	if err == nil {
		if len(got) > maxExpansion(len(raw)) {
			t.Fatalf("%d bytes of protobuf gave %d bytes of JSON", len(raw), len(got))
		}
		if !json.Valid(got) {
			t.Fatalf("invalid JSON %q", got)
		}
	}
	// PeekMeta and the metadata writers must not panic either
	var m Meta
	_ = s.PeekMeta(o, &m)
	_, _ = s.AppendJSONMetadata(nil, o, 5)
	_, _, _ = s.PeekField(o, "metadata.name")

	obj := k.new()
	if uerr := obj.(gogoUnmarshaler).Unmarshal(raw); uerr != nil {
		return
	}
	obj.GetObjectKind().SetGroupVersionKind(k.gvk)
	var buf bytes.Buffer
	if eerr := oracleJSON.Encode(obj, &buf); eerr != nil {
		if err == nil {
			t.Fatalf("apimachinery cannot encode (%v) but AppendJSON wrote %s", eerr, got)
		}
		return
	}
	want := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil && errors.Is(err, ErrCorrupt) {
		// gogo's generated code is lax on some malformed wire data (a map
		// entry's value may run past the entry); the transcoder rejects it.
		// kube-apiserver never stores such bytes.
		return
	}
	if err != nil {
		t.Fatalf("AppendJSON: %v; apimachinery wrote %s", err, want)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s\n got %s\nwant %s", jsonDiff(got, want), got, want)
	}
}

// TestTranscodeMutations runs FuzzTranscode's property over randomly
// mutated realistic objects (bit flips, overwrites, cuts, splices), so the
// default test run covers malformed input too.
func TestTranscodeMutations(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	var seeds [][]byte
	var kinds []uint8
	for _, fx := range fixtures(t) {
		o, _ := Unwrap(fx.stored)
		for i, k := range fuzzKinds {
			if k.gvk.Kind == o.Kind {
				seeds, kinds = append(seeds, o.Raw), append(kinds, uint8(i))
			}
		}
	}
	n := 100 * objectsPerKind(t, 20)
	for it := 0; it < n; it++ {
		which := r.Intn(len(seeds))
		b := append([]byte(nil), seeds[which]...)
		for k := r.Intn(4) + 1; k > 0 && len(b) > 0; k-- {
			switch r.Intn(4) {
			case 0:
				b[r.Intn(len(b))] ^= byte(1 << r.Intn(8))
			case 1:
				b[r.Intn(len(b))] = byte(r.Intn(256))
			case 2:
				i := r.Intn(len(b))
				b = append(b[:i], b[i+r.Intn(len(b)-i):]...)
			case 3:
				i, j := r.Intn(len(b)), r.Intn(len(b))
				b = append(b[:i:i], append(append([]byte(nil), b[j:min(len(b), j+r.Intn(20))]...), b[i:]...)...)
			}
		}
		k := kinds[which]
		if r.Intn(4) == 0 {
			k = uint8(r.Intn(len(fuzzKinds)))
		}
		checkTranscode(t, k, b)
	}
}

func FuzzJSONPassthrough(f *testing.F) {
	for _, fx := range fixtures(f) {
		o, _ := Unwrap(fx.stored)
		js, _ := DefaultSchema().AppendJSON(nil, o, 0, JSONOptions{})
		f.Add(js, int64(5))
	}
	f.Add([]byte(`{"metadata":{"resourceVersion":"1","name":"a\"b"},"spec":{}}`), int64(0))
	f.Add([]byte(` {"a":[1,{"metadata":2}],"metadata":{}} `), int64(9))
	f.Fuzz(func(t *testing.T, raw []byte, rv int64) {
		out, err := AppendJSONPassthrough(nil, raw, rv)
		if err != nil {
			return
		}
		if len(out) > len(raw)+64 {
			t.Fatalf("output grew by %d bytes", len(out)-len(raw))
		}
		if !json.Valid(raw) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("valid input %q gave invalid output %q", raw, out)
		}
		if rv == 0 {
			if !bytes.Equal(out, raw) {
				t.Fatal("rv 0 changed the value")
			}
			return
		}
		v, ok, err := DefaultSchema().PeekField(Object{Format: FormatJSON, Raw: out}, "metadata.resourceVersion")
		if err == nil && (!ok || string(v) != strconv.FormatInt(rv, 10)) {
			// duplicate "metadata" keys: encoding/json keeps the last one,
			// the passthrough patches the first; only check when unique
			if bytes.Count(raw, []byte(`"metadata"`)) == 1 && !bytes.Contains(raw, []byte(`\`)) {
				t.Fatalf("resourceVersion = %q, %v in %s", v, ok, out)
			}
		}
	})
}

func FuzzProtobufPassthrough(f *testing.F) {
	for _, fx := range fixtures(f) {
		o, _ := Unwrap(fx.stored)
		f.Add(o.Raw, int64(12345))
	}
	f.Add([]byte{}, int64(1))
	f.Fuzz(func(t *testing.T, raw []byte, rv int64) {
		o := Object{Format: FormatProtobuf, APIVersion: "v1", Kind: "ConfigMap", Raw: raw}
		out := AppendProtobuf(nil, o, rv)
		if len(out) != ProtobufSize(o, rv) || !bytes.HasPrefix(out, raw) {
			t.Fatalf("AppendProtobuf: %d bytes, size %d", len(out), ProtobufSize(o, rv))
		}
		env := AppendProtobufEnvelope(nil, o, rv)
		if len(env) != ProtobufEnvelopeSize(o, rv) {
			t.Fatalf("envelope %d bytes, size %d", len(env), ProtobufEnvelopeSize(o, rv))
		}
		md, _ := AppendProtobufMetadata(nil, o, rv)
		var want corev1.ConfigMap
		if err := want.Unmarshal(raw); err != nil {
			return
		}
		if rv != 0 {
			want.ResourceVersion = strconv.FormatInt(rv, 10)
		}
		var got corev1.ConfigMap
		if err := got.Unmarshal(out); err != nil {
			t.Fatalf("Unmarshal(AppendProtobuf): %v", err)
		}
		if !reflect.DeepEqual(&got, &want) {
			t.Fatalf("AppendProtobuf decodes to %+v, want %+v", &got, &want)
		}
		var gm corev1.ConfigMap
		gm.ObjectMeta.Unmarshal(md)
		if !reflect.DeepEqual(gm.ObjectMeta, want.ObjectMeta) {
			t.Fatalf("AppendProtobufMetadata decodes to %+v, want %+v", gm.ObjectMeta, want.ObjectMeta)
		}
	})
}

// TestWriteFuzzCorpus writes the seed corpora committed under
// testdata/fuzz (only with LAZYAPI_WRITE_FUZZ_CORPUS=1).
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("LAZYAPI_WRITE_FUZZ_CORPUS") == "" {
		t.Skip("set LAZYAPI_WRITE_FUZZ_CORPUS=1 to regenerate testdata/fuzz")
	}
	write := func(name string, i int, vals ...any) {
		var b bytes.Buffer
		b.WriteString("go test fuzz v1\n")
		for _, v := range vals {
			switch x := v.(type) {
			case []byte:
				fmt.Fprintf(&b, "[]byte(%q)\n", x)
			case int64:
				fmt.Fprintf(&b, "int64(%d)\n", x)
			case uint8:
				fmt.Fprintf(&b, "byte(%q)\n", rune(x))
			}
		}
		dir := filepath.Join("testdata", "fuzz", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%03d", i)), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := DefaultSchema()
	n := 0
	for _, fx := range fixtures(t) {
		o, _ := Unwrap(fx.stored)
		js, _ := s.AppendJSON(nil, o, 0, JSONOptions{})
		for cut := 0; cut <= len(fx.stored); cut += 1 + len(fx.stored)/7 {
			write("FuzzUnwrap", n, fx.stored[:cut])
			write("FuzzProtobufPassthrough", n, o.Raw[:min(cut, len(o.Raw))], int64(cut))
			write("FuzzJSONPassthrough", n, js[:min(cut, len(js))], int64(cut+1))
			for i, k := range fuzzKinds {
				if k.gvk.Kind == o.Kind {
					write("FuzzTranscode", n, uint8(i), o.Raw[:min(cut, len(o.Raw))])
				}
			}
			n++
		}
	}
	extra := [][]byte{[]byte("k8s:enc:kms:v2:prov:\x00"), []byte("  {}"), []byte("k8s\x00\x0a\x80"), []byte("k8s\x00\x1b\x00\x1c")}
	for _, e := range extra {
		write("FuzzUnwrap", n, e)
		write("FuzzTranscode", n, uint8(n), e)
		write("FuzzJSONPassthrough", n, []byte(`{"metadata":{"uid":"x","name":"\u0041"},"spec":"}"}`), int64(n))
		n++
	}
}

// TestExpansionBound justifies maxExpansion: the largest JSON any message
// writes for an empty (2-byte) protobuf occurrence, over the whole schema.
func TestExpansionBound(t *testing.T) {
	s := DefaultSchema()
	st := s.getState()
	defer s.putState(st)
	seen := map[*message]bool{}
	worst, worstType := 0, ""
	for _, m := range s.kinds {
		var walk func(m *message)
		walk = func(m *message) {
			if seen[m] {
				return
			}
			seen[m] = true
			out, err := st.zero(nil, &vdesc{kind: kMessage, msg: m})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) > worst {
				worst, worstType = len(out), m.goType.String()
			}
			for _, f := range m.fields {
				if f.v.msg != nil {
					walk(f.v.msg)
				}
				if f.mapVal != nil && f.mapVal.msg != nil {
					walk(f.mapVal.msg)
				}
			}
		}
		walk(m)
	}
	t.Logf("largest zero-value JSON: %d bytes (%s) over %d messages", worst, worstType, len(seen))
	if worst/2 > 512 {
		t.Errorf("a 2-byte protobuf occurrence can write %d bytes of JSON; raise maxExpansion", worst)
	}
}
