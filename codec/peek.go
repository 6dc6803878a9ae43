package codec

import "fmt"

// Meta is the metadata of an object read by PeekMeta.
type Meta struct {
	Name, Namespace, UID, CreationTimestamp, GenerateName []byte
	Generation                                            int64
	Labels, Annotations                                   []KV
	OwnerReferences                                       []OwnerRef
}

// KV is one entry of a string map.
type KV struct{ Key, Value []byte }

// OwnerRef is one metadata.ownerReferences entry.
type OwnerRef struct {
	APIVersion, Kind, Name, UID []byte
	Controller                  bool
}

// Reset clears m and keeps its slices.
func (m *Meta) Reset() {}

// Label returns the value of label key.
func (m *Meta) Label(key string) ([]byte, bool) { return nil, false }

// PeekMeta reads obj's metadata into m.
func (s *Schema) PeekMeta(obj Object, m *Meta) error { return fmt.Errorf("codec: not implemented") }

// PeekField reads one dotted JSON path.
func (s *Schema) PeekField(obj Object, path string) (value []byte, ok bool, err error) {
	return nil, false, fmt.Errorf("codec: not implemented")
}
