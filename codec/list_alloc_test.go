//go:build !race

package codec

import "testing"

// TestFramingAllocs fails if a framing writer allocates when dst has room:
// heads, separators, tails, protobuf items, watch frames and Status errors
// run once per item or response on the hot path.
func TestFramingAllocs(t *testing.T) {
	s := fxSchema(t)
	it := fxStore(t, testConfigMaps(2), 10)[1]
	m := ListMeta{ResourceVersion: 12, Continue: "c", RemainingItemCount: fxPtr(int64(3))}
	st := &Status{Code: 410, Reason: "Expired", Message: "too old", Details: &StatusDetails{Causes: []StatusCause{{Type: "x"}}, RetryAfterSeconds: 1}}
	buf := make([]byte, 0, 1<<16)
	cases := []struct {
		name string
		fn   func()
	}{
		{"JSONList", func() {
			b := AppendJSONListHead(buf[:0], "v1", "ConfigMapList", m)
			b = AppendJSONListSep(b)
			_ = AppendJSONListTail(b)
		}},
		{"ProtobufList", func() {
			n := ProtobufListItemSize(it.obj, it.rv)
			b := AppendProtobufListHead(buf[:0], "v1", "ConfigMapList", m, n)
			b = AppendProtobufListItem(b, it.obj, it.rv)
			_ = AppendProtobufListTail(b)
		}},
		{"ProtobufWatchEvent", func() { _ = AppendProtobufWatchEvent(buf[:0], EventModified, it.obj, it.rv) }},
		{"JSONWatchEvent", func() {
			if _, err := s.AppendJSONWatchEvent(buf[:0], EventAdded, it.obj, it.rv); err != nil {
				t.Fatal(err)
			}
		}},
		{"Bookmarks", func() {
			b := AppendJSONWatchBookmark(buf[:0], "v1", "ConfigMap", 99, true)
			_ = AppendProtobufWatchBookmark(b, "v1", "ConfigMap", 99, true)
		}},
		{"Status", func() {
			b := AppendJSONStatus(buf[:0], st)
			b = AppendProtobufStatus(b, st)
			b = AppendJSONWatchStatus(b, st)
			_ = AppendProtobufWatchStatus(b, st)
		}},
		{"PartialProtobufItem", func() {
			if _, err := AppendPartialProtobufListItem(buf[:0], it.obj, it.rv); err != nil {
				t.Fatal(err)
			}
		}},
		{"PartialProtobufWatchEvent", func() {
			if _, err := AppendPartialProtobufWatchEvent(buf[:0], EventAdded, it.obj, it.rv); err != nil {
				t.Fatal(err)
			}
		}},
		{"PartialProtobufItemSize", func() {
			if _, err := PartialProtobufListItemSize(it.obj, it.rv); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		tc.fn() // warm pools
		if n := testing.AllocsPerRun(100, tc.fn); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", tc.name, n)
		}
	}
}
