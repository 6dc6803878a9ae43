package bench

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/goccy/go-json"
)

// Accept headers by --accept value.
var acceptHeaders = map[string]string{
	"json":     "application/json",
	"protobuf": "application/vnd.kubernetes.protobuf",
	"table":    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
}

// AcceptHeader returns the Accept header for json, protobuf or table.
func AcceptHeader(format string) (string, error) {
	h, ok := acceptHeaders[format]
	if !ok {
		return "", fmt.Errorf("unknown --accept %q (want json, protobuf or table)", format)
	}
	return h, nil
}

// listInfo is what the harness reads from a LIST response.
type listInfo struct {
	Items           int
	Continue        string
	ResourceVersion string
}

var errNotList = errors.New("body is not a list")

var protoMagic = []byte("k8s\x00")

// protoField calls fn for each field of a protobuf message; val is the
// payload of a length-delimited field or nil for varints (whose value is n).
func protoFields(b []byte, fn func(num int, val []byte, n uint64) error) error {
	for len(b) > 0 {
		key, k := uvarint(b)
		if k <= 0 {
			return errors.New("bad protobuf key")
		}
		b = b[k:]
		num, typ := int(key>>3), key&7
		switch typ {
		case 0:
			v, k := uvarint(b)
			if k <= 0 {
				return errors.New("bad protobuf varint")
			}
			b = b[k:]
			if err := fn(num, nil, v); err != nil {
				return err
			}
		case 1:
			if len(b) < 8 {
				return errors.New("short fixed64")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return errors.New("short fixed32")
			}
			b = b[4:]
		case 2:
			l, k := uvarint(b)
			if k <= 0 || uint64(len(b)-k) < l {
				return errors.New("bad protobuf length")
			}
			if err := fn(num, b[k:k+int(l)], 0); err != nil {
				return err
			}
			b = b[k+int(l):]
		default:
			return fmt.Errorf("unsupported protobuf wire type %d", typ)
		}
	}
	return nil
}

func uvarint(b []byte) (uint64, int) {
	var x uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, i + 1
		}
	}
	return 0, 0
}

// unknownRaw returns the raw field of a "k8s\x00"+runtime.Unknown envelope.
func unknownRaw(body []byte) ([]byte, error) {
	if !bytes.HasPrefix(body, protoMagic) {
		return nil, errors.New("no k8s protobuf magic")
	}
	var raw []byte
	err := protoFields(body[len(protoMagic):], func(num int, val []byte, _ uint64) error {
		if num == 2 {
			raw = val
		}
		return nil
	})
	return raw, err
}

// readListMeta reads the resourceVersion and continue of a protobuf
// ListMeta into info.
func readListMeta(meta []byte, info *listInfo) error {
	return protoFields(meta, func(num int, val []byte, _ uint64) error {
		switch num {
		case 2:
			info.ResourceVersion = string(val)
		case 3:
			info.Continue = string(val)
		}
		return nil
	})
}

// watchEvent is what the harness reads from a watch event.
type watchEvent struct {
	Type            string
	ResourceVersion string
}

type jsonEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	} `json:"object"`
}

func parseJSONEvent(line []byte) (watchEvent, error) {
	var e jsonEvent
	if err := json.Unmarshal(line, &e); err != nil {
		return watchEvent{}, fmt.Errorf("cannot parse watch event: %w", err)
	}
	return watchEvent{Type: e.Type, ResourceVersion: e.Object.Metadata.ResourceVersion}, nil
}

// parseProtoEvent parses a metav1.WatchEvent {type=1, object=2
// RawExtension{raw=1}} whose object is a k8s protobuf envelope.
func parseProtoEvent(frame []byte) (watchEvent, error) {
	var ev watchEvent
	typ, raw, err := protoEventObject(frame)
	ev.Type = typ
	if err != nil {
		return ev, err
	}
	err = protoFields(raw, func(num int, val []byte, _ uint64) error {
		if num == 1 {
			return protoFields(val, func(num int, val []byte, _ uint64) error {
				if num == 6 {
					ev.ResourceVersion = string(val)
				}
				return nil
			})
		}
		return nil
	})
	return ev, err
}

// protoEventObject reads a protobuf watch event's type and the raw bytes of
// its object (the Unknown envelope's payload).
func protoEventObject(frame []byte) (typ string, raw []byte, err error) {
	var obj []byte
	err = protoFields(frame, func(num int, val []byte, _ uint64) error {
		switch num {
		case 1:
			typ = string(val)
		case 2:
			return protoFields(val, func(num int, val []byte, _ uint64) error {
				if num == 1 {
					obj = val
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("cannot parse watch event: %w", err)
	}
	raw, err = unknownRaw(obj)
	if err != nil {
		return typ, nil, fmt.Errorf("cannot parse watch event object: %w", err)
	}
	return typ, raw, nil
}
