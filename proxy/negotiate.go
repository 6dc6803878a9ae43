package proxy

import (
	"sort"
	"strconv"
	"strings"
)

// format is a response encoding.
type format uint8

const (
	formatJSON format = iota
	formatProtobuf
	formatYAML
)

const (
	mediaJSON     = "application/json"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
	mediaYAML     = "application/yaml"
)

func (f format) String() string {
	switch f {
	case formatProtobuf:
		return "protobuf"
	case formatYAML:
		return "yaml"
	}
	return "json"
}

func (f format) mediaType() string {
	switch f {
	case formatProtobuf:
		return mediaProtobuf
	case formatYAML:
		return mediaYAML
	}
	return mediaJSON
}

// target is what the response holds: the objects themselves or a
// meta.k8s.io/v1 transformation of them.
type target uint8

const (
	targetObject  target = iota
	targetTable          // as=Table;g=meta.k8s.io;v=v1
	targetPartial        // as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1
)

// output is the negotiated response representation.
type output struct {
	format format
	target target
}

// contentType returns the response's Content-Type.
func (o output) contentType(list bool) string {
	switch o.target {
	case targetTable:
		return o.format.mediaType() + ";as=Table;v=v1;g=meta.k8s.io"
	case targetPartial:
		if list {
			return o.format.mediaType() + ";as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
		}
		return o.format.mediaType() + ";as=PartialObjectMetadata;v=v1;g=meta.k8s.io"
	}
	return o.format.mediaType()
}

// watchContentType returns a watch response's Content-Type.
func (o output) watchContentType() string {
	if o.format == formatProtobuf {
		return o.contentType(false) + ";stream=watch"
	}
	return o.contentType(false)
}

func (o output) String() string {
	switch o.target {
	case targetTable:
		return "table"
	case targetPartial:
		return "partial-" + o.format.String()
	}
	return o.format.String()
}

// acceptClause is one media range of an Accept header.
type acceptClause struct {
	typ, sub  string
	q         float64
	as, g, v  string
	hasParams bool
}

// parseAccept splits an Accept header into clauses ordered as
// munnerz/goautoneg (which kube-apiserver uses) orders them: by q
// descending, then specific types before wildcards, stable otherwise.
func parseAccept(header string, buf []acceptClause) []acceptClause {
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
		c := acceptClause{typ: typ, sub: sub, q: 1}
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
				c.q = q
			case "as":
				c.as, c.hasParams = v, true
			case "g":
				c.g, c.hasParams = v, true
			case "v":
				c.v, c.hasParams = v, true
			}
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.q != b.q {
			return a.q > b.q
		}
		if (a.typ == "*") != (b.typ == "*") {
			return b.typ == "*"
		}
		if (a.sub == "*") != (b.sub == "*") {
			return b.sub == "*"
		}
		return false
	})
	return out
}

// answerKind is what a request answers, as negotiation sees it.
type answerKind uint8

const (
	answerObject answerKind = iota // one object (GET): PartialObjectMetadata
	answerList                     // a list: PartialObjectMetadataList
	// answerStream: a watch, negotiated as kube-apiserver's
	// NegotiateOutputMediaTypeStream: only media types with a stream
	// framing (JSON and protobuf), so a client that accepts only YAML
	// gets 406.
	answerStream
)

// negotiate picks the response representation for an Accept header the way
// kube-apiserver's NegotiateMediaTypeOptions does: the first clause (in
// preference order) that names a supported media type and a supported
// transformation for an answer of kind k wins. custom (a resource stored
// as JSON) disables protobuf: custom resources have no protobuf encoding,
// and the codec writes protobuf metadata only from protobuf. ok=false
// means 406 NotAcceptable.
func negotiate(header string, k answerKind, custom bool) (output, bool) {
	if strings.TrimSpace(header) == "" {
		return output{format: formatJSON}, true
	}
	var arr [8]acceptClause
	for _, c := range parseAccept(header, arr[:0]) {
		if c.q <= 0 {
			continue
		}
		var f format
		switch {
		case c.typ == "*" && c.sub == "*", c.typ == "application" && c.sub == "*", c.typ == "application" && c.sub == "json":
			f = formatJSON
		case c.typ == "application" && c.sub == "vnd.kubernetes.protobuf":
			f = formatProtobuf
		case c.typ == "application" && c.sub == "yaml" && k != answerStream:
			f = formatYAML
		default:
			continue
		}
		o := output{format: f}
		if c.as != "" || c.g != "" || c.v != "" {
			if c.g != "meta.k8s.io" || c.v != "v1" {
				continue
			}
			switch c.as {
			case "Table":
				if f != formatJSON {
					continue
				}
				o.target = targetTable
			case "PartialObjectMetadata":
				if k == answerList || f == formatYAML {
					continue
				}
				o.target = targetPartial
			case "PartialObjectMetadataList":
				if k != answerList || f == formatYAML {
					continue
				}
				o.target = targetPartial
			default:
				continue
			}
		}
		if f == formatProtobuf && custom {
			continue
		}
		return o, true
	}
	return output{}, false
}

// errorFormat picks the encoding of an error Status: protobuf or YAML when
// the client prefers it, else JSON (kube-apiserver encodes errors in the
// negotiated media type without the as= transformation).
func errorFormat(header string) format {
	var arr [8]acceptClause
	for _, c := range parseAccept(header, arr[:0]) {
		if c.q <= 0 {
			continue
		}
		if c.typ == "application" && c.sub == "vnd.kubernetes.protobuf" {
			return formatProtobuf
		}
		if c.typ == "application" && c.sub == "yaml" {
			return formatYAML
		}
		if c.typ == "application" && (c.sub == "json" || c.sub == "*") || c.typ == "*" {
			return formatJSON
		}
	}
	return formatJSON
}
