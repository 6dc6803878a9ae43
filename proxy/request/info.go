package request

import (
	"errors"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/lazyapi/lazyapi/authz"
	"github.com/lazyapi/lazyapi/resource"
)

// Info is a request resolved once, after authentication and before
// authorization (Resolve): kube-apiserver's request.Info as
// its RequestInfoFactory.NewRequestInfo gives it (APIPrefixes api and
// apis, GrouplessAPIPrefixes api), from which authorization's attributes
// are filled, plus what serving reads: the route kube-apiserver's router
// takes and the query parameters (first value of each, as kube-apiserver
// converts them). Nothing reads the path or the query again after it, so
// what is authorized is what is served.
type Info struct {
	// IsResourceRequest, Path, Verb, APIPrefix, APIGroup, APIVersion,
	// Namespace, Resource, Subresource, Name, Parts, FieldSelector and
	// LabelSelector are kube-apiserver's Info fields. Verb is the
	// request's: "get", "list" or "watch" for what is served (a watch
	// parameter on a named object is a get, as kube-apiserver's).
	IsResourceRequest bool
	Path              string
	Verb              string
	APIPrefix         string
	APIGroup          string
	APIVersion        string
	Namespace         string
	Resource          string
	Subresource       string
	Name              string
	Parts             []string
	FieldSelector     string
	LabelSelector     string

	// Params are the query parameters for serving; ParamsErr, when not
	// nil, is their 400 (kube-apiserver's handler's).
	Params    Params
	ParamsErr error
	// Entry is the resource table's entry the request names, set once
	// routed (for Config.Admit).
	Entry *resource.Resource

	// Route is what kube-apiserver's router serves the path with;
	// routeOK is false when it routes no resource handler there
	// (discovery, or 404).
	Route   Route
	RouteOK bool
	// Err is NewRequestInfo's error: kube-apiserver answers it 500.
	Err error
	// RawQuery is the request's query (Go's URL.RawQuery), for the
	// handlers of other paths (openapi's hash).
	RawQuery string
	// partsBuf holds the path's segments of a usual path (Parts is a
	// part of it) without an allocation.
	partsBuf [10]string
}

// errNoKind is RequestInfoFactory's error for a /watch or /proxy path with
// nothing after it.
var errNoKind = errors.New("unable to determine kind and namespace from url")

// Resolve resolves a request from its method, its decoded path (Go's
// URL.Path, DecodePath) and its raw query string (Go's URL.RawQuery) into
// ri, as kube-apiserver's RequestInfoFactory.NewRequestInfo and its
// router do.
func Resolve(ri *Info, method, path, rawQuery string) {
	*ri = Info{Path: path, Verb: lowerMethod(method), RawQuery: rawQuery}
	parts := splitPath(ri.partsBuf[:0], path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return
	}
	ri.APIPrefix = parts[0]
	cur := parts[1:]
	if ri.APIPrefix != "api" {
		if len(cur) < 3 {
			return
		}
		ri.APIGroup = cur[0]
		cur = cur[1:]
	}
	ri.IsResourceRequest = true
	ri.APIVersion = cur[0]
	cur = cur[1:]
	viaPath := false
	if cur[0] == "watch" || cur[0] == "proxy" {
		if len(cur) < 2 {
			ri.Err = errNoKind
			return
		}
		ri.Verb = cur[0]
		cur = cur[1:]
		viaPath = true
	} else {
		ri.Verb = methodVerb(method)
	}
	if cur[0] == "namespaces" && len(cur) > 1 {
		ri.Namespace = cur[1]
		if len(cur) > 2 && cur[2] != "status" && cur[2] != "finalize" {
			cur = cur[2:]
		}
	}
	ri.Parts = cur
	switch {
	case len(cur) >= 3 && ri.Verb != "proxy":
		ri.Subresource = cur[2]
		fallthrough
	case len(cur) >= 2:
		ri.Name = cur[1]
		fallthrough
	default:
		ri.Resource = cur[0]
	}
	ri.Route, ri.RouteOK = routeOf(path, parts, ri.Verb == "watch" && viaPath)
	q := parseQuery(rawQuery)
	named := ri.Route.Name != "" || ri.Route.Subresource != ""
	if ri.Name == "" && ri.Verb == "get" {
		ri.Verb = "list"
		if q.watch() {
			ri.Verb = "watch"
		}
		// The name a fieldSelector requires, when ListOptions decode
		// (DecodeParameters: every parameter converts, the selectors
		// parse).
		if q.vals[qFieldSelector] != "" {
			if sel, err := q.listOptions(); err == nil {
				if name, ok := sel.RequiresExactMatch("metadata.name"); ok && len(content.IsPathSegmentName(name)) == 0 {
					ri.Name = name
				}
			}
		}
	}
	if ri.Name == "" && ri.Verb == "delete" {
		ri.Verb = "deletecollection"
	}
	if !viaPath && (ri.Verb == "list" || ri.Verb == "watch" || ri.Verb == "deletecollection") {
		ri.FieldSelector, _ = q.first(qFieldSelector)
		ri.LabelSelector, _ = q.first(qLabelSelector)
	}
	if ri.RouteOK {
		ri.Params, ri.ParamsErr = q.params(!named || ri.Route.Watch)
	}
}

// methodVerb is RequestInfoFactory's verb of a resource request's method
// (not under /watch or /proxy): "" for a method it does not name.
func methodVerb(method string) string {
	switch method {
	case "POST":
		return "create"
	case "GET", "HEAD":
		return "get"
	case "PUT":
		return "update"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	}
	return ""
}

// lowerMethod is strings.ToLower(method), without an allocation for the
// usual methods.
func lowerMethod(method string) string {
	switch method {
	case "GET":
		return "get"
	case "HEAD":
		return "head"
	case "POST":
		return "post"
	case "PUT":
		return "put"
	case "PATCH":
		return "patch"
	case "DELETE":
		return "delete"
	case "OPTIONS":
		return "options"
	}
	return strings.ToLower(method)
}

// Attributes fills a's request fields from ri (the user's are the
// caller's).
func (ri *Info) Attributes(a *authz.Attributes) {
	a.Path, a.Verb, a.ResourceRequest = ri.Path, ri.Verb, ri.IsResourceRequest
	a.APIGroup, a.APIVersion, a.Namespace = ri.APIGroup, ri.APIVersion, ri.Namespace
	a.Resource, a.Subresource, a.Name = ri.Resource, ri.Subresource, ri.Name
	a.FieldSelector, a.LabelSelector = ri.FieldSelector, ri.LabelSelector
}

// routeOf is the resource route kube-apiserver's director and go-restful's
// CurlyRouter take for path (parts: path split as splitPath): a web
// service root /api/v1 or /apis/{group}/{version} at the start of the path
// itself, then static segments (watch, namespaces, the resource, the
// subresource), never empty, and parameters ({namespace}, {name}, a
// proxy's rest), which may be:
//
//	/api/v1/[watch/][namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
//	/apis/{group}/{version}/[watch/][namespaces/{ns}/]{resource}[/{name}[/{subresource}]]
//
// plus {resource}/{name}/proxy/{rest...}; /api/v1/namespaces/{name}[/status|
// /finalize] names the namespace itself. viaWatch: the path has /watch/
// after the version. Segments are not cleaned: a "." or ".." is a name like
// any other (refused later by ValidName) and an empty namespace segment is
// namespace "" (every namespace, as kube-apiserver). ok=false means no
// resource route (discovery, or 404).
func routeOf(path string, parts []string, viaWatch bool) (p Route, ok bool) {
	var rest []string
	switch {
	case strings.HasPrefix(path, "/api/") && len(parts) >= 3:
		p.Version, rest = parts[1], parts[2:]
	case strings.HasPrefix(path, "/apis/") && len(parts) >= 4:
		p.Group, p.Version, rest = parts[1], parts[2], parts[3:]
		if p.Group == "" {
			return p, false
		}
	default:
		return p, false
	}
	if p.Version == "" || rest[0] == "proxy" {
		// proxy: RequestInfoFactory's other path verb; no route.
		return p, false
	}
	if rest[0] == "watch" {
		if !viaWatch {
			return p, false
		}
		p.Watch = true
		rest = rest[1:]
	}
	if rest[0] == "namespaces" && len(rest) > 1 {
		if len(rest) == 2 || rest[2] == "status" || rest[2] == "finalize" {
			// The namespace object itself.
			p.Resource, p.Name = "namespaces", rest[1]
			if len(rest) > 2 {
				p.Subresource = rest[2]
			}
			return p, len(rest) <= 3 && !(p.Watch && p.Subresource != "")
		}
		p.Namespace, p.InNamespace = rest[1], true
		rest = rest[2:]
	}
	switch {
	case len(rest) > 3 && rest[2] == "proxy" && !p.Watch:
		p.Rest = strings.Join(rest[3:], "/")
		rest = rest[:3]
		fallthrough
	case len(rest) == 3 && !p.Watch:
		p.Subresource = rest[2]
		if p.Subresource == "" {
			return p, false
		}
		fallthrough
	case len(rest) == 2:
		p.Name = rest[1]
		fallthrough
	case len(rest) == 1:
		p.Resource = rest[0]
	default:
		return p, false
	}
	return p, p.Resource != ""
}

// The query parameters lazyapi reads.
const (
	qLimit = iota
	qContinue
	qResourceVersion
	qResourceVersionMatch
	qLabelSelector
	qFieldSelector
	qWatch
	qAllowWatchBookmarks
	qSendInitialEvents
	qTimeoutSeconds
	qIncludeObject
	qCount
)

var queryNames = [qCount]string{"limit", "continue", "resourceVersion", "resourceVersionMatch",
	"labelSelector", "fieldSelector", "watch", "allowWatchBookmarks", "sendInitialEvents",
	"timeoutSeconds", "includeObject"}

// query holds the first value of each parameter lazyapi reads, as Go's
// URL.Query gives it to kube-apiserver (and apimachinery's conversions
// take (*in)[0]).
type query struct {
	has  [qCount]bool
	vals [qCount]string
}

// maxQueryParams is net/url's limit (urlmaxqueryparams): a query with
// more parameters has none for kube-apiserver (URL.Query ignores the
// error).
const maxQueryParams = 10000

// parseQuery parses a raw query as net/url's parseQuery, keeping the first
// value of each parameter lazyapi reads (queryPairs). It allocates only
// for values with escapes.
func parseQuery(raw string) query {
	var q query
	queryPairs(raw, func(k, v string) bool {
		i := queryIndex(k)
		if i < 0 || q.has[i] {
			return true
		}
		if v, err := url.QueryUnescape(v); err == nil {
			q.has[i], q.vals[i] = true, v
		}
		return true
	})
	return q
}

// queryPairs calls fn with the unescaped key and the raw value of each
// pair of a raw query, as net/url's parseQuery splits it: pairs separated
// by "&", a pair with ";" or a key with a bad escape skipped, none at all
// past maxQueryParams. The caller unescapes the value (a bad escape skips
// the pair); fn returns false to stop.
func queryPairs(raw string, fn func(key, rawValue string) bool) {
	if raw == "" || strings.Count(raw, "&")+1 > maxQueryParams {
		return
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		if !fn(k, v) {
			return
		}
	}
}

// QueryFirst is the first value of key in a raw query, as Go's
// URL.Query().Get.
func QueryFirst(raw, key string) string {
	var first string
	queryPairs(raw, func(k, v string) bool {
		if k != key {
			return true
		}
		v, err := url.QueryUnescape(v)
		if err != nil {
			return true
		}
		first = v
		return false
	})
	return first
}

func queryIndex(k string) int {
	for i, n := range queryNames {
		if k == n {
			return i
		}
	}
	return -1
}

func (q *query) first(i int) (string, bool) { return q.vals[i], q.has[i] }

// kubeBool is apimachinery's Convert_Slice_string_To_bool of a first
// value: every value but "0" and "false" (any case) is true.
func kubeBool(v string) bool { return v != "0" && !strings.EqualFold(v, "false") }

// watch is ListOptions.Watch.
func (q *query) watch() bool { return q.has[qWatch] && kubeBool(q.vals[qWatch]) }

// listOptions is kube-apiserver's DecodeParameters of the query into
// ListOptions: its error, in its order (the url.Values conversion:
// timeoutSeconds, limit, strconv.ParseInt of the first value, "" too;
// then the selectors: labels.Parse, fields.ParseSelector), or the field
// selector.
func (q *query) listOptions() (fields.Selector, error) {
	for _, i := range [...]int{qTimeoutSeconds, qLimit} {
		if q.has[i] {
			if _, err := strconv.ParseInt(q.vals[i], 10, 64); err != nil {
				return nil, err
			}
		}
	}
	if ls := q.vals[qLabelSelector]; ls != "" {
		if _, err := labels.Parse(ls); err != nil {
			return nil, err
		}
	}
	return fields.ParseSelector(q.vals[qFieldSelector])
}

// params returns the parameters for serving. list: a list or watch
// (ListOptions, validated as kube-apiserver's handler does); else a get,
// whose GetOptions have only resourceVersion.
func (q *query) params(list bool) (Params, error) {
	var p Params
	p.ResourceVersion = q.vals[qResourceVersion]
	switch v := q.vals[qIncludeObject]; v {
	case "", "None", "Object", "Metadata":
		p.IncludeObject = v
	default:
		return p, Errorf("includeObject: Unsupported value: %q: supported values: \"None\", \"Object\", \"Metadata\"", v)
	}
	if !list {
		_, err := ParseRV(p.ResourceVersion)
		return p, err
	}
	for _, i := range [...]int{qTimeoutSeconds, qLimit} {
		if !q.has[i] {
			continue
		}
		n, err := strconv.ParseInt(q.vals[i], 10, 64)
		if err != nil {
			return p, Errorf("%v", err)
		}
		if i == qLimit {
			p.Limit = max(n, 0) // kube-apiserver treats a negative limit as no limit
		} else {
			p.TimeoutSeconds = n
		}
	}
	p.Continue = q.vals[qContinue]
	p.ResourceVersionMatch = q.vals[qResourceVersionMatch]
	p.LabelSelector = q.vals[qLabelSelector]
	p.FieldSelector = q.vals[qFieldSelector]
	p.Watch = q.watch()
	p.AllowWatchBookmarks = q.has[qAllowWatchBookmarks] && kubeBool(q.vals[qAllowWatchBookmarks])
	if q.has[qSendInitialEvents] {
		b := kubeBool(q.vals[qSendInitialEvents])
		p.SendInitialEvents = &b
	}
	return p, p.Validate()
}

// ListParams are the parameters of a LIST or WATCH with the raw query,
// validated (as Resolve sets Info.Params for a list).
func ListParams(rawQuery string) (Params, error) {
	q := parseQuery(rawQuery)
	return q.params(true)
}
