package encoding

import "testing"

func TestNegotiate(t *testing.T) {
	tests := []struct {
		accept       string
		list, custom bool
		want         Output
		ok           bool
	}{
		{"", true, false, Output{Format: FormatJSON}, true},
		{"*/*", true, false, Output{Format: FormatJSON}, true},
		{"application/json", false, false, Output{Format: FormatJSON}, true},
		{"application/vnd.kubernetes.protobuf, */*", true, false, Output{Format: FormatProtobuf}, true},
		{"application/vnd.kubernetes.protobuf,application/json", true, true, Output{Format: FormatJSON}, true},
		{"application/vnd.kubernetes.protobuf", true, true, Output{}, false},
		{"text/html", true, false, Output{}, false},
		{"application/json;q=0.5, application/vnd.kubernetes.protobuf;q=0.9", true, false, Output{Format: FormatProtobuf}, true},
		{"*/*;q=0.1, application/vnd.kubernetes.protobuf", true, false, Output{Format: FormatProtobuf}, true},
		{"application/json;q=0", true, false, Output{}, false},
		{"application/json;as=Table;v=v1beta1;g=meta.k8s.io, application/xml", true, false, Output{}, false},
	}
	{
		tests = append(tests, []struct {
			accept       string
			list, custom bool
			want         Output
			ok           bool
		}{
			{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", true, false, Output{FormatJSON, TargetTable}, true},
			{"application/json;as=Table;v=v1;g=meta.k8s.io", false, false, Output{FormatJSON, TargetTable}, true},
			{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", true, false, Output{FormatProtobuf, TargetPartial}, true},
			{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", false, false, Output{}, false},
			{"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", false, false, Output{FormatJSON, TargetPartial}, true},
			{"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", true, false, Output{}, false},
			{"application/yaml", true, false, Output{Format: FormatYAML}, true},
		}...)
	}
	for _, tt := range tests {
		kind := AnswerObject
		if tt.list {
			kind = AnswerList
		}
		got, ok := Negotiate(tt.accept, kind, tt.custom)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("Negotiate(%q, list=%v, custom=%v) = %v, %v; want %v, %v", tt.accept, tt.list, tt.custom, got, ok, tt.want, tt.ok)
		}
	}
}
