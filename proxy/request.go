package proxy

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// route is what a request path names.
type route uint8

const (
	routeNone route = iota
	routeResource
	routeDiscovery
)

// apiPath is a parsed /api or /apis resource path.
type apiPath struct {
	Group, Version, Resource, Namespace, Name, Subresource string
	// InNamespace is true when the path had namespaces/{namespace}/ before
	// the resource, even an empty one: kube-apiserver routes
	// /namespaces//configmaps to the namespaced list handler with
	// namespace "", which lists every namespace.
	InNamespace bool
	// Watch is true for the legacy /watch/ paths.
	Watch bool
	// Rest is what follows a proxy subresource (pods/NAME/proxy/REST).
	Rest string
}

// decodePath returns the path of a request as Go's net/http server hands it
// to kube-apiserver (url.ParseRequestURI's URL.Path): percent-decoded once,
// with "." and ".." segments, repeated slashes and decoded "%2F" kept as
// they are. kube-apiserver routes on that path (RequestInfoFactory,
// go-restful's CurlyRouter) and etcd keys are literal, so no request can
// name another namespace's key by a traversal; fasthttp's default
// normalisation (decode, then resolve "..") would have let
// /api/v1/namespaces/a/secrets/..%2F..%2Fb%2Fsecrets read namespace b.
// ok=false means Go's server refuses the request line (400 Bad Request).
func decodePath(uri []byte) (path string, ok bool) {
	// Fast path: an origin-form target without escapes or control bytes is
	// its own path.
	if len(uri) > 0 && uri[0] == '/' && (len(uri) == 1 || uri[1] != '/') {
		end := len(uri)
		plain := true
		for i, c := range uri {
			if c == '?' {
				end = i
				break
			}
			if c == '%' || c < 0x20 || c == 0x7f {
				plain = false
				break
			}
		}
		if plain {
			return string(uri[:end]), true
		}
	}
	u, err := url.ParseRequestURI(string(uri))
	if err != nil {
		return "", false
	}
	return u.Path, true
}

// splitPath splits a path as kube-apiserver's RequestInfoFactory and
// go-restful's tokenizer (TrimRightSlashEnabled) do: outer slashes trimmed,
// inner empty segments kept.
func splitPath(path string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return nil
	}
	return strings.Split(path, "/")
}

// parsePath parses a decoded resource path (see decodePath) as
// kube-apiserver's RequestInfoFactory does, keeping only the shapes its
// go-restful routes match:
//
//	/api/v1/[watch/][namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
//	/apis/{group}/{version}/[watch/][namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
//
// plus {resource}/{name}/proxy/{rest...}. /api/v1/namespaces/{name}[/status|
// /finalize] names the namespace itself. Segments are not cleaned: a "." or
// ".." is a name like any other (refused later by validName) and an empty
// namespace segment is namespace "". ok=false means the path is not a
// resource path kube-apiserver routes (discovery, or 404).
func parsePath(path string) (p apiPath, ok bool) {
	// The web service roots (/api/v1, /apis/{group}/{version}) are
	// matched on the path itself, as kube-apiserver's director does.
	var rest string
	if r, found := strings.CutPrefix(path, "/api/"); found {
		p.Version, rest, _ = strings.Cut(r, "/")
	} else if r, found = strings.CutPrefix(path, "/apis/"); found {
		p.Group, r, _ = strings.Cut(r, "/")
		p.Version, rest, _ = strings.Cut(r, "/")
		if p.Group == "" {
			return p, false
		}
	} else {
		return p, false
	}
	parts := splitPath(rest)
	if p.Version == "" || len(parts) == 0 {
		return p, false
	}
	if parts[0] == "proxy" {
		// RequestInfoFactory's other special verb: no route serves it.
		return p, false
	}
	if parts[0] == "watch" {
		p.Watch = true
		parts = parts[1:]
		if len(parts) == 0 {
			return p, false
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		if len(parts) == 2 || parts[2] == "status" || parts[2] == "finalize" {
			// The namespace object itself.
			p.Resource, p.Name = "namespaces", parts[1]
			if len(parts) > 2 {
				p.Subresource = parts[2]
			}
			return p, len(parts) <= 3 && !(p.Watch && p.Subresource != "")
		}
		p.Namespace, p.InNamespace = parts[1], true
		parts = parts[2:]
	}
	switch {
	case len(parts) > 3 && parts[2] == "proxy" && !p.Watch:
		p.Rest = strings.Join(parts[3:], "/")
		parts = parts[:3]
		fallthrough
	case len(parts) == 3 && !p.Watch:
		p.Subresource = parts[2]
		fallthrough
	case len(parts) == 2:
		p.Name = parts[1]
		fallthrough
	case len(parts) == 1:
		p.Resource = parts[0]
	default:
		return p, false
	}
	return p, p.Resource != ""
}

// validName returns kube-apiserver's 400 for a name its registry refuses
// (NamespaceKeyFunc, NoNamespaceKeyFunc: path.IsValidPathSegmentName), or
// nil.
func validName(name string) error {
	if name == "" {
		return badf("name must be provided")
	}
	var msgs []string
	if name == "." || name == ".." {
		msgs = append(msgs, fmt.Sprintf("may not be '%s'", name))
	} else {
		for _, c := range []string{"/", "%"} {
			if strings.Contains(name, c) {
				msgs = append(msgs, fmt.Sprintf("may not contain '%s'", c))
			}
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return badf("Name parameter invalid: %q: %s", name, strings.Join(msgs, ";"))
}

// Params are the query parameters of a GET, LIST or WATCH, validated as
// kube-apiserver validates them.
type Params struct {
	Limit                int64
	Continue             string
	ResourceVersion      string
	ResourceVersionMatch string
	LabelSelector        string
	FieldSelector        string
	Watch                bool   // watch=true (a /watch/ path sets apiPath.Watch)
	IncludeObject        string // Table rows: "", "None", "Metadata", "Object"
	TimeoutSeconds       int64  // watch: 0 = server default
	AllowWatchBookmarks  bool
	SendInitialEvents    *bool // nil: absent
}

const (
	matchNotOlderThan = "NotOlderThan"
	matchExact        = "Exact"
)

// badRequest is a request error answered with 400 BadRequest.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// parseQuery reads the list/get parameters from a raw query string
// ("a=b&c=d", percent-encoded) and validates them as kube-apiserver's
// ValidateListOptions does. visit walks the query's pairs (decoded).
func parseParams(visit func(func(key, value []byte))) (Params, error) {
	var (
		p   Params
		err error
	)
	visit(func(key, value []byte) {
		if err != nil {
			return
		}
		switch string(key) {
		case "limit":
			if len(value) == 0 {
				return
			}
			p.Limit, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				err = badf("invalid limit %q: must be an integer", value)
			} else if p.Limit < 0 {
				p.Limit = 0 // kube-apiserver treats a negative limit as no limit
			}
		case "continue":
			p.Continue = string(value)
		case "resourceVersion":
			p.ResourceVersion = string(value)
		case "resourceVersionMatch":
			p.ResourceVersionMatch = string(value)
		case "labelSelector":
			p.LabelSelector = string(value)
		case "fieldSelector":
			p.FieldSelector = string(value)
		case "watch":
			p.Watch, err = parseBool(value, "watch")
		case "allowWatchBookmarks":
			p.AllowWatchBookmarks, err = parseBool(value, "allowWatchBookmarks")
		case "sendInitialEvents":
			var b bool
			b, err = parseBool(value, "sendInitialEvents")
			p.SendInitialEvents = &b
		case "timeoutSeconds":
			if len(value) == 0 {
				return
			}
			p.TimeoutSeconds, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				err = badf("invalid timeoutSeconds %q: must be an integer", value)
			}
		case "includeObject":
			switch string(value) {
			case "", "None", "Object", "Metadata":
				p.IncludeObject = string(value)
			default:
				err = badf("includeObject: Unsupported value: %q: supported values: \"None\", \"Object\", \"Metadata\"", value)
			}
		}
	})
	if err != nil {
		return p, err
	}
	return p, p.validate()
}

func parseBool(v []byte, name string) (bool, error) {
	switch string(v) {
	case "", "true", "1", "True", "TRUE", "t", "T":
		return true, nil
	case "false", "0", "False", "FALSE", "f", "F":
		return false, nil
	}
	return false, badf("invalid %s %q: must be a boolean", name, v)
}

// validate applies kube-apiserver's ValidateListOptions rules that do not
// depend on the storage.
func (p *Params) validate() error {
	switch p.ResourceVersionMatch {
	case "":
	case matchNotOlderThan, matchExact:
		// A watch (WatchList: sendInitialEvents=true&resourceVersionMatch=
		// NotOlderThan with no resourceVersion) has its own rules, see
		// validateWatch.
		if p.ResourceVersion == "" && !p.Watch && p.SendInitialEvents == nil {
			return badf("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
		if p.Continue != "" {
			return badf("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided")
		}
		if p.ResourceVersionMatch == matchExact && p.ResourceVersion == "0" {
			return badf("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")
		}
	default:
		return badf("resourceVersionMatch: Unsupported value: %q: supported values: \"Exact\", \"NotOlderThan\"", p.ResourceVersionMatch)
	}
	if p.ResourceVersion != "" {
		if _, err := parseRV(p.ResourceVersion); err != nil {
			return err
		}
	}
	if p.Continue != "" && p.ResourceVersion != "" && p.ResourceVersion != "0" {
		return badf("specifying resource version is not allowed when using continue")
	}
	return nil
}

// parseRV parses a resourceVersion as kube-apiserver's APIObjectVersioner.
func parseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > 1<<63-1 {
		return 0, badf("invalid resource version: %q", s)
	}
	return int64(v), nil
}

// isBadRequest reports whether err is a request error (400).
func isBadRequest(err error) bool {
	var b *badRequest
	return errors.As(err, &b)
}
