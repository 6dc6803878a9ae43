package proxy

import "github.com/lazyapi/lazyapi/proxy/request"

// RequestInfo is a request resolved once, after authentication and before
// authorization (request.Resolve): see request.Info.
type RequestInfo = request.Info

// Params are the validated query parameters of a GET, LIST or WATCH: see
// request.Params.
type Params = request.Params
