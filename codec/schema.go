package codec

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// Schema describes the protobuf and JSON encodings of the built-in types.
// It is immutable and safe for concurrent use.
type Schema struct {
}

// NewSchema builds a Schema from the Go types registered in s.
func NewSchema(s *runtime.Scheme) (*Schema, error) {
	return nil, fmt.Errorf("codec: not implemented")
}

// DefaultSchema returns the Schema of client-go's kubernetes scheme.
func DefaultSchema() *Schema { return nil }

// Known reports whether the schema has the kind.
func (s *Schema) Known(apiVersion, kind string) bool { return false }

// JSONOptions tunes AppendJSON.
type JSONOptions struct {
	OmitTypeMeta bool // items of a built-in list carry no kind/apiVersion
}
