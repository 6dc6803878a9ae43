package codec

import "fmt"

// AppendJSON writes obj as kube-apiserver's JSON.
func (s *Schema) AppendJSON(dst []byte, obj Object, rv int64, o JSONOptions) ([]byte, error) {
	return dst, fmt.Errorf("codec: not implemented")
}

// AppendMetadataJSON writes only the object's metadata as a JSON object.
func (s *Schema) AppendMetadataJSON(dst []byte, obj Object, rv int64) ([]byte, error) {
	return dst, fmt.Errorf("codec: not implemented")
}
