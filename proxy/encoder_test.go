package proxy

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
		out                         output
		layout                      listLayout
		shareable, bookmark, cached bool
		passPB, passJSON            bool
	}{
		{output{format: formatJSON}, layoutMetaFirst, true, true, true, false, true},
		{output{format: formatProtobuf}, layoutSized, false, true, false, true, false},
		{output{format: formatYAML}, layoutMetaLast, true, true, false, false, false},
		{output{formatJSON, targetTable}, layoutMetaFirst, false, false, false, false, false},
		{output{formatJSON, targetPartial}, layoutMetaFirst, true, true, false, false, false},
		{output{formatProtobuf, targetPartial}, layoutSized, true, true, false, false, false},
	}
	for _, tt := range tests {
		e := newEncoder(codec.DefaultSchema(), r, tt.out, nil, codec.IncludeMetadata, time.Time{})
		if e.output() != tt.out {
			t.Errorf("newEncoder(%v).output() = %v", tt.out, e.output())
		}
		if e.layout() != tt.layout {
			t.Errorf("%v: layout = %v, want %v", tt.out, e.layout(), tt.layout)
		}
		got := []bool{e.shareable(), e.bookmarks(), e.cached() != nil, e.passthrough(pb), e.passthrough(js)}
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
	for f, want := range map[format]string{formatJSON: mediaJSON, formatProtobuf: mediaProtobuf, formatYAML: mediaYAML} {
		b, ct := statusEncoders[f].status(nil, st)
		if ct != want || len(b) == 0 {
			t.Errorf("statusEncoders[%v].status = %d bytes, %q; want some bytes, %q", f, len(b), ct, want)
		}
	}
}
