package codec

import (
	"bytes"
	"encoding/json"
	"os"
	"runtime"
	"strings"
	"testing"
)

// convertFixture is codec/testdata/convert/kube-apiserver.json, written by
// codec/testdata/convert/gen from kube-apiserver's own storage codec and
// conversion functions.
type convertFixture struct {
	RV    int64 `json:"rv"`
	Cases []struct {
		Name     string `json:"name"`
		Key      string `json:"key"`
		Stored   []byte `json:"stored"`
		Served   string `json:"served"`
		Path     string `json:"path"`
		JSON     string `json:"json"`
		Protobuf []byte `json:"protobuf"`
	} `json:"cases"`
}

func readConvertFixture(t testing.TB) *convertFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/convert/kube-apiserver.json")
	if err != nil {
		t.Fatal(err)
	}
	var f convertFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("no cases")
	}
	return &f
}

// TestConvertOracle: every stored Event, HorizontalPodAutoscaler and
// PodCertificateRequest of the fixture, converted, is byte for byte what
// kube-apiserver v1.37.2 serves for it at events.k8s.io/v1, autoscaling/v1
// and certificates.k8s.io/v1, as protobuf and as JSON (the transcoder on
// the converted message).
func TestConvertOracle(t *testing.T) {
	f := readConvertFixture(t)
	sc := DefaultSchema()
	for _, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			stored, err := Unwrap(c.Stored)
			if err != nil {
				t.Fatal(err)
			}
			kind := stored.Kind
			if !CanConvert(stored.APIVersion, c.Served, kind) {
				t.Fatalf("CanConvert(%s, %s, %s) = false", stored.APIVersion, c.Served, kind)
			}
			obj, err := Convert(stored, stored.APIVersion, c.Served, kind, f.RV)
			if err != nil {
				t.Fatal(err)
			}
			if pb := AppendProtobufEnvelope(nil, obj, 0); !bytes.Equal(pb, c.Protobuf) {
				t.Errorf("protobuf differs from kube-apiserver's:\n got %q\nwant %q", pb, c.Protobuf)
			}
			js, err := sc.AppendJSON(nil, obj, 0, JSONOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.TrimSuffix(c.JSON, "\n"); string(js) != want {
				t.Errorf("JSON differs from kube-apiserver's:\n got %s\nwant %s", js, want)
			}
		})
	}
}

// TestConvertJSONStorage: an object stored as JSON
// (--storage-media-type=application/json) converts as the protobuf one.
func TestConvertJSONStorage(t *testing.T) {
	f := readConvertFixture(t)
	sc := DefaultSchema()
	for _, c := range f.Cases {
		stored, err := Unwrap(c.Stored)
		if err != nil {
			t.Fatal(err)
		}
		js, err := sc.AppendJSON(nil, stored, 0, JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		obj, err := Convert(Object{Format: FormatJSON, Raw: js}, stored.APIVersion, c.Served, stored.Kind, f.RV)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if pb := AppendProtobufEnvelope(nil, obj, 0); !bytes.Equal(pb, c.Protobuf) {
			t.Errorf("%s: converted from JSON differs from kube-apiserver's", c.Name)
		}
	}
}

// TestConvertErrors: an unknown conversion and a value that does not
// decode are errors, not panics.
func TestConvertErrors(t *testing.T) {
	if _, err := Convert(Object{Format: FormatProtobuf}, "v1", "apps/v1", "Event", 1); err == nil {
		t.Error("unknown conversion: no error")
	}
	if _, err := Convert(Object{Format: FormatProtobuf, Raw: []byte{0xff, 0xff}}, "v1", "events.k8s.io/v1", "Event", 1); err == nil {
		t.Error("bad protobuf: no error")
	}
	if _, err := Convert(Object{Format: FormatJSON, Raw: []byte(`{"metadata":`)}, "autoscaling/v2", "autoscaling/v1", "HorizontalPodAutoscaler", 1); err == nil {
		t.Error("bad JSON: no error")
	}
}

// TestConvertCost: the heap one conversion allocates stays within
// ConvertCost of the stored size, which admission reserves for it.
func TestConvertCost(t *testing.T) {
	f := readConvertFixture(t)
	for _, c := range f.Cases {
		stored, err := Unwrap(c.Stored)
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		const n = 20
		for range n {
			if _, err := Convert(stored, stored.APIVersion, c.Served, stored.Kind, f.RV); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		per := int64(after.TotalAlloc-before.TotalAlloc) / n
		if lim := ConvertCost(int64(len(c.Stored))); per > lim {
			t.Errorf("%s: one conversion allocates %d bytes, ConvertCost(%d) = %d", c.Name, per, len(c.Stored), lim)
		} else {
			t.Logf("%s: %d stored bytes, %d allocated per conversion, ConvertCost %d", c.Name, len(c.Stored), per, lim)
		}
	}
}

// BenchmarkConvert: the slow path's cost per object (decode, convert,
// encode) against the JSON transcoding every protobuf-stored object gets,
// for the fixture's largest HPA and an Event:
//
//	go test ./codec -run XXX -bench 'Convert' -benchtime 2000x -count 5
func BenchmarkConvert(b *testing.B) {
	f := readConvertFixture(b)
	sc := DefaultSchema()
	for _, c := range f.Cases {
		if c.Name != "hpa-all" && c.Name != "ev-series" {
			continue
		}
		stored, err := Unwrap(c.Stored)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.Name+"/transcode", func(b *testing.B) {
			b.ReportAllocs()
			var dst []byte
			for b.Loop() {
				dst, err = sc.AppendJSON(dst[:0], stored, f.RV, JSONOptions{})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.Name+"/convert+transcode", func(b *testing.B) {
			b.ReportAllocs()
			var dst []byte
			for b.Loop() {
				obj, err := Convert(stored, stored.APIVersion, c.Served, stored.Kind, f.RV)
				if err != nil {
					b.Fatal(err)
				}
				if dst, err = sc.AppendJSON(dst[:0], obj, 0, JSONOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
