package main

import (
	"fmt"
	"strings"

	"github.com/lazyapi/lazyapi/ratelimit"
)

// banner is the start-up summary printed on stdout once lazyapi serves:
// where it serves, what it reads, who may read, and its memory bounds.
// etcd is the endpoints the client reads from.
func banner(o *Options, url, secureURL string, etcd []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "lazyapi %s\n", versionString())
	serving := url
	if secureURL != "" {
		serving += ", " + secureURL + " (TLS)"
	}
	fmt.Fprintf(&b, "  serving   %s\n", serving)
	where := strings.Join(etcd, ",")
	if len(o.Etcd.servers) == 0 {
		where += " (embedded, --data-dir " + o.Etcd.dataDir + ")"
	}
	fmt.Fprintf(&b, "  etcd      %s, prefix %s\n", where, o.Etcd.prefix)
	authn := "none (every request is served)"
	if m := o.Serving.authMethods(); len(m) > 0 {
		authn = strings.Join(m, ", ")
	}
	authz := "none"
	if len(o.Serving.modes) > 0 {
		authz = strings.Join(o.Serving.modes, ",")
	}
	fmt.Fprintf(&b, "  auth      authentication: %s; authorization: %s\n", authn, authz)
	mode := "read-only: GET, LIST, WATCH from etcd; writes 405 (--upstream-kubeconfig forwards them)"
	if o.Forward.on() {
		mode = "one endpoint: reads from etcd, everything else forwarded to kube-apiserver at " + o.Forward.upstream.String() + " as the caller"
	}
	fmt.Fprintf(&b, "  mode      %s\n", mode)
	limit := "none (--memory-limit)"
	if ml := int64(o.Admission.memoryLimit); ml > 0 {
		limit = fmt.Sprintf("%s (GOMEMLIMIT %s)", quantity(ml), quantity(ratelimit.GoMemoryLimit(ml)))
	}
	cache := "off"
	if o.WatchCache.enabled {
		cache = quantity(o.cacheBytes())
	}
	inflight, _ := o.inflightBytes() // checked by validate
	fmt.Fprintf(&b, "  memory    limit %s; watch cache %s; in-flight %s\n", limit, cache, quantity(inflight))
	return b.String()
}

// quantity is n bytes as a binary quantity (512Mi).
func quantity(n int64) string { b := byteSize(n); return b.String() }
