package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/openapi"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/resource"
)

// OpenAPI media types (kube-openapi handler and handler3).
const (
	mediaOpenAPIv2Proto = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
	mediaOpenAPIv3Proto = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
)

// openapiSource adapts the resource table to openapi.Source.
type openapiSource struct{ t *resource.Table }

var _ openapi.Source = openapiSource{}

// ServedBuiltinGroupVersions returns the built-in group-versions discovery
// lists: those served from etcd and those of the self reviews.
func (s openapiSource) ServedBuiltinGroupVersions() []openapi.GroupVersion {
	out := []openapi.GroupVersion{{Version: "v1"}}
	for _, gv := range s.t.DiscoveryGroupVersions() {
		if resource.BuiltinGroup(gv[0]) {
			out = append(out, openapi.GroupVersion{Group: gv[0], Version: gv[1]})
		}
	}
	return out
}

func (s openapiSource) ServesWrites() bool { return s.t.ServesWrites() }

func (s openapiSource) CRDGeneration() uint64 { return s.t.CRDGeneration() }

func (s openapiSource) CRDDocs() []*openapi.CRD {
	docs := s.t.CRDDocs()
	out := make([]*openapi.CRD, 0, len(docs))
	for _, d := range docs {
		if c, ok := d.(*openapi.CRD); ok {
			out = append(out, c)
		}
	}
	return out
}

// NewOpenAPI returns the OpenAPI documents of table. It makes the table
// build each CRD's documents when it loads the CRD, so call it before
// table.StartCRDSync (CRDs loaded before have no documents).
func NewOpenAPI(table *resource.Table) *openapi.Service {
	table.SetCRDDocBuilder(func(stored []byte) any {
		if c := openapi.BuildCRD(stored); c != nil {
			return c
		}
		return nil
	})
	return openapi.New(openapiSource{table})
}

// serveOpenAPI answers /openapi/v2, /openapi/v3 and /openapi/v3/<path> as
// kube-apiserver (kube-openapi's handlers behind the aggregator): content
// negotiation between JSON and gnostic protobuf, an ETag that is the
// SHA-512 of the JSON, If-None-Match and If-Modified-Since (304), the
// v3 documents' ?hash= (301 to the current hash when stale; immutable
// caching when current), 404 with an empty body for an unknown path, 406
// for an Accept it cannot meet. The body is gzip-compressed when the
// client accepts it (the stored form of the documents).
func (s *Server) serveOpenAPI(rc *fasthttp.RequestCtx, ri *RequestInfo) {
	path := ri.Path
	if !rc.IsGet() && !rc.IsHead() {
		s.writeStatus(rc, encoding.ErrorFormat(string(rc.Request.Header.Peek("Accept"))), methodNotAllowed(string(rc.Method())))
		return
	}
	svc := s.openapi
	var (
		doc     *openapi.Doc
		err     error
		v2, gv  bool
		gvPath  string
		protoCT string
	)
	switch {
	case path == "/openapi/v2":
		doc, err = svc.V2()
		v2, protoCT = true, mediaOpenAPIv2Proto
	case path == "/openapi/v3":
		doc, err = svc.V3Discovery()
	case strings.HasPrefix(path, "/openapi/v3/"):
		gvPath = strings.TrimPrefix(path, "/openapi/v3/")
		var ok bool
		doc, ok, err = svc.V3(gvPath)
		if err == nil && !ok {
			rc.SetStatusCode(http.StatusNotFound)
			return
		}
		gv, protoCT = true, mediaOpenAPIv3Proto
	default:
		rc.SetStatusCode(http.StatusNotFound)
		return
	}
	if err != nil {
		s.log.Error("cannot build OpenAPI document", zap.String("path", path), zap.Error(err))
		rc.SetStatusCode(http.StatusServiceUnavailable)
		return
	}
	proto := false
	if v2 || gv {
		rc.Response.Header.Add("Vary", "Accept")
		var ok bool
		if proto, ok = negotiateOpenAPI(string(rc.Request.Header.Peek("Accept")), v2); !ok {
			rc.SetStatusCode(http.StatusNotAcceptable)
			return
		}
	}
	etag := `"` + doc.ETag() + `"`
	rc.Response.Header.Set("Etag", etag)
	if gv {
		if hash := request.QueryFirst(ri.RawQuery, "hash"); hash != "" {
			if hash != doc.ETag() {
				rc.Response.Header.Set("Location", "/openapi/v3/"+gvPath+"?"+url.Values{"hash": {doc.ETag()}}.Encode())
				rc.SetStatusCode(http.StatusMovedPermanently)
				return
			}
			rc.Response.Header.Set("Cache-Control", "public, immutable")
			rc.Response.Header.Set("Expires", time.Now().AddDate(1, 0, 0).UTC().Format(time.RFC1123))
		}
	}
	lm := doc.LastModified().UTC()
	rc.Response.Header.Set("Last-Modified", lm.Format(http.TimeFormat))
	if notModified(rc, etag, lm) {
		rc.Response.Header.Del("Content-Type")
		rc.SetStatusCode(http.StatusNotModified)
		return
	}
	s.writeOpenAPI(rc, doc, proto, protoCT, path)
}

// writeOpenAPI writes doc's body: protobuf (protoCT) when proto, else its
// stored gzip when the client accepts it, else JSON; a HEAD gets the
// length only.
func (s *Server) writeOpenAPI(rc *fasthttp.RequestCtx, doc *openapi.Doc, proto bool, protoCT, path string) {
	jsonCT := "application/json"
	var err error
	var body []byte
	switch {
	case proto:
		rc.SetContentType(protoCT)
		body, err = doc.Proto()
	case rc.Request.Header.HasAcceptEncoding("gzip"):
		rc.SetContentType(jsonCT)
		rc.Response.Header.Set("Content-Encoding", "gzip")
		rc.Response.Header.Add("Vary", "Accept-Encoding")
		body = doc.Gzip()
	default:
		rc.SetContentType(jsonCT)
		body, err = doc.JSON()
	}
	if err != nil {
		s.log.Error("cannot encode OpenAPI document", zap.String("path", path), zap.Error(err))
		rc.Response.Header.Del("Content-Encoding")
		rc.SetStatusCode(http.StatusServiceUnavailable)
		return
	}
	if rc.IsHead() {
		rc.Response.Header.SetContentLength(len(body))
		rc.Response.SkipBody = true
		return
	}
	rc.SetBody(body)
}

// negotiateOpenAPI picks JSON or protobuf as kube-openapi does: the first
// Accept clause (goautoneg order, q=0 included) that matches
// application/json or the protobuf type (v2 or v3, either spelling).
func negotiateOpenAPI(accept string, v2 bool) (proto, ok bool) {
	if accept == "" {
		accept = "*/*"
	}
	pb, pbOld := "com.github.proto-openapi.spec.v3.v1.0+protobuf", "com.github.proto-openapi.spec.v3@v1.0+protobuf"
	if v2 {
		pb, pbOld = "com.github.proto-openapi.spec.v2.v1.0+protobuf", "com.github.proto-openapi.spec.v2@v1.0+protobuf"
	}
	var arr [8]encoding.AcceptClause
	for _, c := range encoding.ParseAccept(accept, arr[:0]) {
		if c.Type != "application" && c.Type != "*" {
			continue
		}
		switch c.Sub {
		case "json", "*":
			return false, true
		case pb, pbOld:
			return true, true
		}
	}
	return false, false
}

// notModified is net/http's checkPreconditions for GET: If-None-Match
// against etag, else If-Modified-Since against lm (second precision).
func notModified(rc *fasthttp.RequestCtx, etag string, lm time.Time) bool {
	if inm := string(rc.Request.Header.Peek("If-None-Match")); inm != "" {
		for t := range strings.SplitSeq(inm, ",") {
			t = strings.TrimSpace(t)
			if t == "*" || strings.TrimPrefix(t, "W/") == etag {
				return true
			}
		}
		return false
	}
	if ims := string(rc.Request.Header.Peek("If-Modified-Since")); ims != "" {
		if t, err := http.ParseTime(ims); err == nil && !lm.Truncate(time.Second).After(t) {
			return true
		}
	}
	return false
}
