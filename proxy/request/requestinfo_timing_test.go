package request

import (
	"testing"
)

// resolveCases are usual requests: a GET, a LIST, a watch with a label
// selector, an informer's named LIST.
var resolveCases = []struct{ name, path, query string }{
	{"get", "/api/v1/namespaces/ns1/configmaps/cm", ""},
	{"list", "/apis/apps/v1/namespaces/ns1/deployments", "limit=500&resourceVersion=0"},
	{"watch", "/api/v1/namespaces/ns1/pods", "allowWatchBookmarks=true&labelSelector=app%3Dweb&resourceVersion=12&timeoutSeconds=300&watch=true"},
	{"named-list", "/api/v1/namespaces/ns1/secrets", "fieldSelector=metadata.name%3Ds&limit=500"},
}

// BenchmarkResolveRequest is the cost of resolving a request once
// (resolveRequest: kube-apiserver's Info, the route, the
// parameters).
func BenchmarkResolveRequest(b *testing.B) {
	for _, c := range resolveCases {
		b.Run(c.name, func(b *testing.B) {
			var ri Info
			b.ReportAllocs()
			for b.Loop() {
				Resolve(&ri, "GET", c.path, c.query)
			}
		})
	}
}
