package encoding

import (
	"sort"
	"strconv"
	"strings"
)

// Format is a response encoding.
type Format uint8

const (
	FormatJSON Format = iota
	FormatProtobuf
	FormatYAML
)

const (
	MediaJSON     = "application/json"
	MediaProtobuf = "application/vnd.kubernetes.protobuf"
	MediaYAML     = "application/yaml"
)

func (f Format) String() string {
	switch f {
	case FormatProtobuf:
		return "protobuf"
	case FormatYAML:
		return "yaml"
	}
	return "json"
}

func (f Format) MediaType() string {
	switch f {
	case FormatProtobuf:
		return MediaProtobuf
	case FormatYAML:
		return MediaYAML
	}
	return MediaJSON
}

// Target is what the response holds: the objects themselves or a
// meta.k8s.io/v1 transformation of them.
type Target uint8

const (
	TargetObject  Target = iota
	TargetTable          // as=Table;g=meta.k8s.io;v=v1
	TargetPartial        // as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1
)

// Output is the negotiated response representation.
type Output struct {
	Format Format
	Target Target
}

// ContentType returns the response's Content-Type.
func (o Output) ContentType(list bool) string {
	switch o.Target {
	case TargetTable:
		return o.Format.MediaType() + ";as=Table;v=v1;g=meta.k8s.io"
	case TargetPartial:
		if list {
			return o.Format.MediaType() + ";as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
		}
		return o.Format.MediaType() + ";as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
	}
	return o.Format.MediaType()
}

// WatchContentType returns a watch response's Content-Type.
func (o Output) WatchContentType() string {
	if o.Format == FormatProtobuf {
		return o.ContentType(false) + ";stream=watch"
	}
	return o.ContentType(false)
}

func (o Output) String() string {
	switch o.Target {
	case TargetTable:
		return "table"
	case TargetPartial:
		return "partial-" + o.Format.String()
	}
	return o.Format.String()
}

// AcceptClause is one media range of an Accept header.
type AcceptClause struct {
	Type, Sub string  // the media type's halves ("*" for a wildcard)
	Q         float64 // its q parameter (1 when absent, 0 when malformed)
	As, G, V  string  // the as, g and v parameters
	HasParams bool    // one of as, g or v is present
}

// ParseAccept splits an Accept header into clauses ordered as
// munnerz/goautoneg (which kube-apiserver uses) orders them: by q
// descending, then specific types before wildcards, stable otherwise.
func ParseAccept(header string, buf []AcceptClause) []AcceptClause {
	out := buf[:0]
	for part := range strings.SplitSeq(header, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mt, params, _ := strings.Cut(part, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		typ, sub, ok := strings.Cut(mt, "/")
		if !ok {
			if mt != "*" {
				continue
			}
			typ, sub = "*", "*"
		}
		c := AcceptClause{Type: typ, Sub: sub, Q: 1}
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, v, _ := strings.Cut(p, "=")
			k = strings.TrimSpace(k)
			v = strings.Trim(strings.TrimSpace(v), `"`)
			switch k {
			case "q":
				q, err := strconv.ParseFloat(v, 64)
				if err != nil {
					q = 0
				}
				c.Q = q
			case "as":
				c.As, c.HasParams = v, true
			case "g":
				c.G, c.HasParams = v, true
			case "v":
				c.V, c.HasParams = v, true
			}
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Q != b.Q {
			return a.Q > b.Q
		}
		if (a.Type == "*") != (b.Type == "*") {
			return b.Type == "*"
		}
		if (a.Sub == "*") != (b.Sub == "*") {
			return b.Sub == "*"
		}
		return false
	})
	return out
}

// AnswerKind is what a request answers, as negotiation sees it.
type AnswerKind uint8

const (
	AnswerObject AnswerKind = iota // one object (GET): PartialObjectMetadata
	AnswerList                     // a list: PartialObjectMetadataList
	// AnswerStream: a watch, negotiated as kube-apiserver's
	// NegotiateOutputMediaTypeStream: only media types with a stream
	// framing (JSON and protobuf), so a client that accepts only YAML
	// gets 406.
	AnswerStream
)

// Negotiate picks the response representation for an Accept header the way
// kube-apiserver's NegotiateMediaTypeOptions does: the first clause (in
// preference order) that names a supported media type and a supported
// transformation for an answer of kind k wins. custom (a resource stored
// as JSON) disables protobuf: custom resources have no protobuf encoding,
// and the codec writes protobuf metadata only from protobuf. ok=false
// means 406 NotAcceptable.
func Negotiate(header string, k AnswerKind, custom bool) (Output, bool) {
	if strings.TrimSpace(header) == "" {
		return Output{Format: FormatJSON}, true
	}
	var arr [8]AcceptClause
	for _, c := range ParseAccept(header, arr[:0]) {
		if c.Q <= 0 {
			continue
		}
		var f Format
		switch {
		case c.Type == "*" && c.Sub == "*", c.Type == "application" && c.Sub == "*", c.Type == "application" && c.Sub == "json":
			f = FormatJSON
		case c.Type == "application" && c.Sub == "vnd.kubernetes.protobuf":
			f = FormatProtobuf
		case c.Type == "application" && c.Sub == "yaml" && k != AnswerStream:
			f = FormatYAML
		default:
			continue
		}
		o := Output{Format: f}
		if c.As != "" || c.G != "" || c.V != "" {
			if c.G != "meta.k8s.io" || c.V != "v1" {
				continue
			}
			switch c.As {
			case "Table":
				if f != FormatJSON {
					continue
				}
				o.Target = TargetTable
			case "PartialObjectMetadata":
				if k == AnswerList || f == FormatYAML {
					continue
				}
				o.Target = TargetPartial
			case "PartialObjectMetadataList":
				if k != AnswerList || f == FormatYAML {
					continue
				}
				o.Target = TargetPartial
			default:
				continue
			}
		}
		if f == FormatProtobuf && custom {
			continue
		}
		return o, true
	}
	return Output{}, false
}

// ErrorFormat picks the encoding of an error Status: protobuf or YAML when
// the client prefers it, else JSON (kube-apiserver encodes errors in the
// negotiated media type without the as= transformation).
func ErrorFormat(header string) Format {
	var arr [8]AcceptClause
	for _, c := range ParseAccept(header, arr[:0]) {
		if c.Q <= 0 {
			continue
		}
		if c.Type == "application" && c.Sub == "vnd.kubernetes.protobuf" {
			return FormatProtobuf
		}
		if c.Type == "application" && c.Sub == "yaml" {
			return FormatYAML
		}
		if c.Type == "application" && (c.Sub == "json" || c.Sub == "*") || c.Type == "*" {
			return FormatJSON
		}
	}
	return FormatJSON
}
