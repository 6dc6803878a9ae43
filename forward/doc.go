// Package forward sends the requests lazyapi does not serve from etcd
// (writes, connect subresources such as log and exec, aggregated and
// unknown groups) to kube-apiserver as the caller, the way kube-apiserver's
// aggregation layer reaches an aggregated API server: lazyapi's front-proxy
// client certificate (from --upstream-kubeconfig) proves the connection is
// lazyapi's, and X-Remote-User, X-Remote-Group, X-Remote-Uid and
// X-Remote-Extra-* (kube-apiserver's --requestheader-* headers) say who
// the caller is. The caller's own identity headers (X-Remote-*,
// Authorization) are never passed on: lazyapi authenticated the caller and
// states the result. Its Impersonate-* headers are: kube-apiserver checks
// them against that identity, as it would a request sent to it directly
// (every impersonation mode it has; its audit log names both users).
//
// Bodies are streamed both ways without being held whole (a watch or a
// `logs -f` is copied as it arrives); an HTTP upgrade (SPDY or WebSocket:
// exec, attach, port-forward, cp) is passed through after the 101, byte for
// byte, until either side closes. Every forwarded request holds a seat of
// its class (short requests or long-running streams) and a share of that
// class per client for its lifetime; a request that finds none is answered
// 429 with Retry-After. When kube-apiserver does not answer within the
// connect bound, the answer is 503 with a Status naming it.
package forward
