// Package codec turns the bytes kube-apiserver stored in etcd into the bytes a
// client asked for, one object at a time, without building Go objects of the
// stored types. It has no HTTP or etcd types.
//
// Borrowed bytes: an Object returned by Unwrap points into the stored value
// it was unwrapped from and is valid only as long as that value is.
//
// Names: the writers are Append<As><Format><Part>: As is what the response
// holds ("" for the object itself, Partial for PartialObjectMetadata, Table
// or CustomTable), Format the media type (JSON, Protobuf, YAML; Table is
// JSON only and leaves it out), Part the piece (nothing for one object,
// ListHead, ListItem, ListSep, ListTail, WatchEvent, WatchBookmark,
// WatchStatus, Status, Metadata): AppendJSONListHead,
// AppendPartialProtobufWatchEvent, AppendJSONStatus. Sizes read the same
// way with Size at the end (PartialProtobufListItemSize).
package codec

// Format is the encoding of a stored object.
type Format uint8

const (
	// FormatProtobuf is kube-apiserver's default storage format: "k8s\x00"
	// followed by a runtime.Unknown.
	FormatProtobuf Format = iota + 1
	// FormatJSON is used for custom resources and with
	// --storage-media-type=application/json.
	FormatJSON
)

func (f Format) String() string {
	switch f {
	case FormatProtobuf:
		return "protobuf"
	case FormatJSON:
		return "json"
	}
	return "unknown"
}

// Object is one stored object after its storage envelope is removed.
type Object struct {
	// Format says how Raw is encoded.
	Format Format
	// APIVersion and Kind come from the envelope's TypeMeta for protobuf.
	// For JSON they are empty unless the caller fills them from the resource
	// table (Unwrap does not parse JSON).
	APIVersion string
	Kind       string
	// Raw is the object's own encoding: its protobuf message (without the
	// "k8s\x00" magic and the runtime.Unknown around it), or its JSON object.
	// It points into the stored value.
	Raw []byte
}
