// Package bench is lazyapi's benchmark harness: it seeds etcd with objects in
// kube-apiserver's storage format, runs load scenarios (LIST, GET, WATCH,
// informers) against one or more API servers over HTTP, samples their memory,
// and writes reports (terminal table, JSON, Markdown, PNG plots).
//
// The harness knows nothing of lazyapi's code: targets are URLs. RefServer is
// a small reference server that does per request what kube-apiserver does
// without its watch cache (decode every stored object, build the list, encode
// it); it stands in for kube-apiserver where that cannot be built.
package bench
