package proxy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/proxy/encoding"
	"github.com/lazyapi/lazyapi/proxy/request"
	"github.com/lazyapi/lazyapi/resource"
	"github.com/lazyapi/lazyapi/store"
)

// Status constructors with kube-apiserver's reasons and messages.

func statusErr(code int32, reason, msg string) *StatusError {
	return &StatusError{Status: codec.Status{Code: code, Reason: reason, Message: msg}}
}

func notFoundPath() *StatusError {
	return &StatusError{Status: codec.Status{Code: 404, Reason: "NotFound",
		Message: "the server could not find the requested resource", Details: &codec.StatusDetails{}}}
}

func notFoundObject(r *resource.Resource, name string) *StatusError {
	return &StatusError{Status: codec.Status{Code: 404, Reason: "NotFound",
		Message: fmt.Sprintf("%s %q not found", r.GroupResource(), name),
		Details: &codec.StatusDetails{Name: name, Group: r.StorageGroup(), Kind: r.Resource}}}
}

func badRequestErr(msg string) *StatusError { return statusErr(400, "BadRequest", msg) }

func methodNotAllowed(method string) *StatusError {
	return &StatusError{Status: codec.Status{Code: 405, Reason: "MethodNotAllowed",
		Message: fmt.Sprintf("the server does not allow this method on the requested resource (%s is not served by lazyapi, a read-only API server)", method),
		Details: &codec.StatusDetails{}}}
}

// connectNotServed answers the subresources that connect to a kubelet, a
// pod or a service (log, exec, attach, portforward, proxy): lazyapi serves
// only what is stored in etcd, so it names where to send them instead.
func connectNotServed(r *resource.Resource, p *request.Route) *StatusError {
	what := r.GroupResource() + "/" + p.Subresource
	return &StatusError{Status: codec.Status{Code: 405, Reason: "MethodNotAllowed",
		Message: fmt.Sprintf("%s is not served by lazyapi, which serves only the objects stored in etcd, read-only: "+
			"send log, exec, attach, portforward and proxy requests to kube-apiserver", what),
		Details: &codec.StatusDetails{Name: p.Name, Group: r.Group, Kind: r.Resource}}}
}

func notAcceptable() *StatusError {
	return statusErr(406, "NotAcceptable",
		"only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf")
}

func expired(msg string) *StatusError { return statusErr(410, "Expired", msg) }

func tooLargeRV(want, cur int64) *StatusError {
	return &StatusError{Status: codec.Status{Code: 504, Reason: "Timeout",
		Message: fmt.Sprintf("Timeout: Too large resource version: %d, current: %d", want, cur),
		Details: &codec.StatusDetails{RetryAfterSeconds: 1, Causes: []codec.StatusCause{{
			Type: "ResourceVersionTooLarge", Message: "Too large resource version"}}}}, RetryAfter: 1}
}

func timeoutErr() *StatusError {
	return &StatusError{Status: codec.Status{Code: 504, Reason: "Timeout",
		Message: "Timeout: request did not complete within requested timeout - context deadline exceeded",
		Details: &codec.StatusDetails{}}}
}

func unavailable(err error) *StatusError {
	return &StatusError{Status: codec.Status{Code: 503, Reason: "ServiceUnavailable",
		Message: fmt.Sprintf("etcd is unavailable: %v", err), Details: &codec.StatusDetails{RetryAfterSeconds: 1}}, RetryAfter: 1}
}

func internalErr(msg string) *StatusError {
	return &StatusError{Status: codec.Status{Code: 500, Reason: "InternalError",
		Message: "Internal error occurred: " + msg,
		Details: &codec.StatusDetails{Causes: []codec.StatusCause{{Message: msg}}}}}
}

// continueExpiredMsg is kube-apiserver's message for a compacted continue
// token.
const continueExpiredMsg = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list."

// storeStatus maps an error of the store (or request handling) to a Status.
func storeStatus(err error, withContinue bool, rev int64) *StatusError {
	var se *StatusError
	switch {
	case errors.As(err, &se):
		return se
	case request.IsBadRequest(err):
		return badRequestErr(err.Error())
	case errors.Is(err, store.ErrCompacted):
		if withContinue {
			return expired(continueExpiredMsg)
		}
		return expired("The resourceVersion for the provided list is too old.") // kube-apiserver's etcd3 store
	case errors.Is(err, store.ErrFutureRevision):
		return tooLargeRV(rev, 0)
	case errors.Is(err, store.ErrUnavailable):
		return unavailable(err)
	case errors.Is(err, context.DeadlineExceeded):
		return timeoutErr()
	case errors.Is(err, context.Canceled):
		return statusErr(500, "InternalError", "request canceled")
	}
	return internalErr(err.Error())
}

// writeStatus writes st as the whole response in format f (see
// ErrorFormat), with f's encoder.
func (s *Server) writeStatus(rc *fasthttp.RequestCtx, f encoding.Format, st *StatusError) {
	// Warnings (a deprecated version's) outlive the reset, as they do in
	// kube-apiserver, whose warning recorder writes them before the handler.
	var warnings [2][]byte
	nw := 0
	for _, w := range rc.Response.Header.PeekAll("Warning") {
		if nw < len(warnings) {
			warnings[nw] = append([]byte(nil), w...)
			nw++
		}
	}
	rc.Response.Reset()
	for _, w := range warnings[:nw] {
		rc.Response.Header.AddBytesV("Warning", w)
	}
	rc.SetStatusCode(int(st.Status.Code))
	if st.RetryAfter > 0 {
		rc.Response.Header.Set("Retry-After", strconv.Itoa(st.RetryAfter))
	}
	buf := getBuf()
	var ct string
	*buf, ct = encoding.AppendStatus((*buf)[:0], f, &st.Status)
	rc.SetContentType(ct)
	rc.SetBody(*buf)
	putBuf(buf)
}

// restfulPath reports whether kube-apiserver answers an unknown path with
// go-restful's NotFound Status (the routes of /api, /version and the
// built-in groups) rather than its NotFound handler's plain-text 404
// (non-API paths, unknown groups and custom resource groups, which
// apiextensions-apiserver delegates), as recorded from it
// (TestNotFoundAgainstKubeAPIServer).
func restfulPath(path string) bool {
	if path == "/api" || strings.HasPrefix(path, "/api/") || path == "/version" || strings.HasPrefix(path, "/version/") {
		return true
	}
	if rest, ok := strings.CutPrefix(path, "/apis/"); ok {
		g, _, _ := strings.Cut(rest, "/")
		return resource.BuiltinGroup(g)
	}
	return path == "/apis"
}

// writeNotFound answers a path nothing is served at, as kube-apiserver:
// a NotFound Status (restfulPath) or http.NotFound's plain text.
func (s *Server) writeNotFound(rc *fasthttp.RequestCtx, f encoding.Format, path string) {
	if restfulPath(path) {
		s.writeStatus(rc, f, notFoundPath())
		return
	}
	rc.Response.Reset()
	rc.SetStatusCode(404)
	rc.SetContentType("text/plain; charset=utf-8")
	rc.Response.Header.Set("X-Content-Type-Options", "nosniff")
	rc.SetBodyString("404 page not found\n")
}
