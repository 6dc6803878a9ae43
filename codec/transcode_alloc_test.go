//go:build !race

package codec

import "testing"

// The hot paths do not allocate in steady state.
func TestHotPathAllocs(t *testing.T) {
	s := DefaultSchema()
	for _, f := range fixtures(t) {
		o, err := Unwrap(f.stored)
		if err != nil {
			t.Fatal(err)
		}
		js, err := s.AppendJSON(nil, o, 0, JSONOptions{})
		if err != nil {
			t.Fatal(err)
		}
		jo := Object{Format: FormatJSON, Raw: js}
		buf := make([]byte, 0, 4*len(js))
		var m Meta
		checks := []struct {
			name string
			fn   func()
		}{
			{"Unwrap", func() { Unwrap(f.stored) }},
			{"AppendJSON", func() { buf, _ = s.AppendJSON(buf[:0], o, 12345, JSONOptions{}) }},
			{"AppendJSON/OmitTypeMeta", func() { buf, _ = s.AppendJSON(buf[:0], o, 12345, JSONOptions{OmitTypeMeta: true}) }},
			{"AppendJSONMetadata", func() { buf, _ = s.AppendJSONMetadata(buf[:0], o, 12345) }},
			{"AppendProtobufEnvelope", func() { buf = AppendProtobufEnvelope(buf[:0], o, 12345) }},
			{"PeekMeta", func() { s.PeekMeta(o, &m) }},
			{"PeekMeta/JSON", func() { s.PeekMeta(jo, &m) }},
			{"AppendJSONPassthrough", func() { buf, _ = AppendJSONPassthrough(buf[:0], js, 12345) }},
		}
		for _, c := range checks {
			c.fn() // warm pools and buffers
			if n := testing.AllocsPerRun(50, c.fn); n != 0 {
				t.Errorf("%s %s: %v allocations per call, want 0", f.name, c.name, n)
			}
		}
	}
}
