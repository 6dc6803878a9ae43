package proxy

import (
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/resource"
)

// TestEncoderProperties: each negotiated output gets its encoder, whose
// properties are what the LIST and watch loops rely on (sized heads,
// metadata at the end, shared frames, bookmarks, passthrough counting).
func TestEncoderProperties(t *testing.T) {
	r := &resource.Resource{Group: "", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", ListKind: "ConfigMapList"}
	pb, js := codec.Object{Format: codec.FormatProtobuf}, codec.Object{Format: codec.FormatJSON}
	tests := []struct {
		out                                   output
		sized, metaAtEnd, shareable, bookmark bool
		passPB, passJSON                      bool
	}{
		{output{format: formatJSON}, false, false, true, true, false, true},
		{output{format: formatProtobuf}, true, false, false, true, true, false},
		{output{format: formatYAML}, false, true, true, true, false, false},
		{output{formatJSON, targetTable}, false, false, false, false, false, false},
		{output{formatJSON, targetPartial}, false, false, true, true, false, false},
		{output{formatProtobuf, targetPartial}, true, false, true, true, false, false},
	}
	for _, tt := range tests {
		e := newEncoder(codec.DefaultSchema(), r, tt.out, nil, codec.IncludeMetadata, time.Time{})
		if e.output() != tt.out {
			t.Errorf("newEncoder(%v).output() = %v", tt.out, e.output())
		}
		got := []bool{e.sized(), e.metaAtEnd(), e.shareable(), e.bookmarks(), e.passthrough(pb), e.passthrough(js)}
		want := []bool{tt.sized, tt.metaAtEnd, tt.shareable, tt.bookmark, tt.passPB, tt.passJSON}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%v: sized, metaAtEnd, shareable, bookmarks, passthrough(protobuf), passthrough(json) = %v, want %v", tt.out, got, want)
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
