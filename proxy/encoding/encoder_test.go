package encoding

import (
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/resource"
)

// TestEncoderProperties: each negotiated output gets its encoder, whose
// properties are what the LIST and watch loops rely on (list layouts,
// shared frames, bookmarks, the rendering cache, passthrough counting).
func TestEncoderProperties(t *testing.T) {
	r := &resource.Resource{Group: "", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList"}
	pb, js := codec.Object{Format: codec.FormatProtobuf}, codec.Object{Format: codec.FormatJSON}
	tests := []struct {
		out                         Output
		layout                      ListLayout
		shareable, bookmark, cached bool
		passPB, passJSON            bool
	}{
		{Output{Format: FormatJSON}, LayoutMetaFirst, true, true, true, false, true},
		{Output{Format: FormatProtobuf}, LayoutSized, false, true, false, true, false},
		{Output{Format: FormatYAML}, LayoutMetaLast, true, true, false, false, false},
		{Output{FormatJSON, TargetTable}, LayoutMetaFirst, false, false, false, false, false},
		{Output{FormatJSON, TargetPartial}, LayoutMetaFirst, true, true, false, false, false},
		{Output{FormatProtobuf, TargetPartial}, LayoutSized, true, true, false, false, false},
	}
	for _, tt := range tests {
		e := NewEncoder(codec.DefaultSchema(), r, tt.out, nil, codec.IncludeMetadata, time.Time{})
		if e.Output() != tt.out {
			t.Errorf("NewEncoder(%v).Output() = %v", tt.out, e.Output())
		}
		if e.Layout() != tt.layout {
			t.Errorf("%v: layout = %v, want %v", tt.out, e.Layout(), tt.layout)
		}
		got := []bool{e.Shareable(), e.Bookmarks(), e.Cached() != nil, e.Passthrough(pb), e.Passthrough(js)}
		want := []bool{tt.shareable, tt.bookmark, tt.cached, tt.passPB, tt.passJSON}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%v: shareable, bookmarks, cached, passthrough(protobuf), passthrough(json) = %v, want %v", tt.out, got, want)
				break
			}
		}
	}
}

// TestStatusEncoders: an error Status in each error format, with its
// Content-Type.
func TestStatusEncoders(t *testing.T) {
	st := &codec.Status{Code: 404, Reason: "NotFound", Message: "nope"}
	for f, want := range map[Format]string{FormatJSON: MediaJSON, FormatProtobuf: MediaProtobuf, FormatYAML: MediaYAML} {
		b, ct := AppendStatus(nil, f, st)
		if ct != want || len(b) == 0 {
			t.Errorf("AppendStatus(%v) = %d bytes, %q; want some bytes, %q", f, len(b), ct, want)
		}
	}
}
