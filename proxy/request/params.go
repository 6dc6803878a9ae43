package request

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Route is a parsed /api or /apis resource path.
type Route struct {
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

// DecodePath returns the path and the raw query of a request as Go's
// net/http server hands them to kube-apiserver (url.ParseRequestURI's
// URL.Path and URL.RawQuery): percent-decoded once,
// with "." and ".." segments, repeated slashes and decoded "%2F" kept as
// they are. kube-apiserver routes on that path (RequestInfoFactory,
// go-restful's CurlyRouter) and etcd keys are literal, so no request can
// name another namespace's key by a traversal; fasthttp's default
// normalisation (decode, then resolve "..") would have let
// /api/v1/namespaces/a/secrets/..%2F..%2Fb%2Fsecrets read namespace b.
// ok=false means Go's server refuses the request line (400 Bad Request).
func DecodePath(uri []byte) (path, rawQuery string, ok bool) {
	// Fast path: an origin-form target without escapes or control bytes is
	// its own path.
	if len(uri) > 0 && uri[0] == '/' && (len(uri) == 1 || uri[1] != '/') {
		end := len(uri)
		plain := true
		for i, c := range uri {
			if c < 0x20 || c == 0x7f {
				// Go refuses control bytes anywhere, the query too.
				plain = false
				break
			}
			if end == len(uri) {
				if c == '?' {
					end = i
				} else if c == '%' {
					plain = false
					break
				}
			}
		}
		if plain {
			if end < len(uri) {
				rawQuery = string(uri[end+1:])
			}
			return string(uri[:end]), rawQuery, true
		}
	}
	u, err := url.ParseRequestURI(string(uri))
	if err != nil {
		return "", "", false
	}
	return u.Path, u.RawQuery, true
}

// splitPath appends the segments of path to dst as kube-apiserver's
// RequestInfoFactory and go-restful's tokenizer (TrimRightSlashEnabled)
// split it: outer slashes trimmed, inner empty segments kept.
func splitPath(dst []string, path string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return dst
	}
	for {
		seg, rest, found := strings.Cut(path, "/")
		dst = append(dst, seg)
		if !found {
			return dst
		}
		path = rest
	}
}

// ValidName returns kube-apiserver's 400 for a name its registry refuses
// (NamespaceKeyFunc, NoNamespaceKeyFunc: path.IsValidPathSegmentName), or
// nil.
func ValidName(name string) error {
	if name == "" {
		return Errorf("name must be provided")
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
	return Errorf("Name parameter invalid: %q: %s", name, strings.Join(msgs, ";"))
}

// Params are the query parameters of a GET, LIST or WATCH (the first value
// of each), validated as kube-apiserver validates them (ListParams).
type Params struct {
	Limit                int64
	Continue             string
	ResourceVersion      string
	ResourceVersionMatch string
	LabelSelector        string
	FieldSelector        string
	Watch                bool   // watch=true: ListOptions.Watch (serving reads Info.Verb)
	IncludeObject        string // Table rows: "", "None", "Metadata", "Object"
	TimeoutSeconds       int64  // watch: 0 = server default
	AllowWatchBookmarks  bool
	SendInitialEvents    *bool // nil: absent
}

const (
	MatchNotOlderThan = "NotOlderThan"
	MatchExact        = "Exact"
)

// badRequest is a request error answered with 400 BadRequest.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// Errorf is a request error (IsBadRequest): the caller answers it 400
// BadRequest with the message.
func Errorf(format string, args ...any) error { return &badRequest{fmt.Sprintf(format, args...)} }

// Validate applies kube-apiserver's ValidateListOptions rules that do not
// depend on the storage.
func (p *Params) Validate() error {
	switch p.ResourceVersionMatch {
	case "":
	case MatchNotOlderThan, MatchExact:
		// A watch (WatchList: sendInitialEvents=true&resourceVersionMatch=
		// NotOlderThan with no resourceVersion) has its own rules, see
		// validateWatch.
		if p.ResourceVersion == "" && !p.Watch && p.SendInitialEvents == nil {
			return Errorf("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
		if p.Continue != "" {
			return Errorf("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided")
		}
		if p.ResourceVersionMatch == MatchExact && p.ResourceVersion == "0" {
			return Errorf("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"")
		}
	default:
		return Errorf("resourceVersionMatch: Unsupported value: %q: supported values: \"Exact\", \"NotOlderThan\"", p.ResourceVersionMatch)
	}
	if p.ResourceVersion != "" {
		if _, err := ParseRV(p.ResourceVersion); err != nil {
			return err
		}
	}
	if p.Continue != "" && p.ResourceVersion != "" && p.ResourceVersion != "0" {
		return Errorf("specifying resource version is not allowed when using continue")
	}
	return nil
}

// ParseRV parses a resourceVersion as kube-apiserver's APIObjectVersioner.
func ParseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v > 1<<63-1 {
		return 0, Errorf("invalid resource version: %q", s)
	}
	return int64(v), nil
}

// IsBadRequest reports whether err is a request error (400).
func IsBadRequest(err error) bool {
	var b *badRequest
	return errors.As(err, &b)
}
