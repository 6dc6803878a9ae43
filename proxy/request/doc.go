// Package request owns what a Kubernetes read request says, parsed once:
// the path decoded as Go's server decodes it (DecodePath), the request
// resolved as kube-apiserver's RequestInfoFactory and router resolve it
// (Resolve, Info: verb, group, version, namespace, resource, name, route),
// the query parameters converted and validated as kube-apiserver's handler
// does (Params, ListParams), continue tokens (EncodeContinue, ContinueAt,
// DecodeContinue) and label/field selectors (ParseFilter, Filter).
//
// Its errors for bad input are request errors (Errorf, IsBadRequest) that
// the server answers 400 with their message. It knows nothing of HTTP
// serving, storage or the proxy: package proxy resolves a request here
// after authentication and authorizes and serves what Resolve returned,
// never re-reading the path or the query.
package request
