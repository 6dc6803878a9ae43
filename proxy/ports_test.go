package proxy_test

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMetricsUnknownMethods: requests with invented HTTP methods count as
// verb "other" (kube-apiserver's metrics.cleanVerb), so that /metrics
// does not grow with the method names a client sends (issue 23, finding
// 9: 40 requests with 200 KB method names made /metrics 128 MB).
func TestMetricsUnknownMethods(t *testing.T) {
	e := startEnv(t)
	const n, size = 40, 200 << 10
	letters := "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for i := range n {
		var b strings.Builder
		for range size {
			b.WriteByte(letters[rand.IntN(len(letters))])
		}
		path := "/api/v1/namespaces/ns/configmaps"
		if i%2 == 1 {
			path += "/cm"
		}
		if code, _, _ := e.raw(t, b.String(), path, ""); code != 405 {
			t.Fatalf("request %d with a %d-byte method: %d, want 405", i, size, code)
		}
	}
	code, _, _ := e.raw(t, "POST", "/api/v1/namespaces/ns/configmaps", "")
	if code != 405 {
		t.Fatalf("POST: %d, want 405", code)
	}
	_, _, body := e.raw(t, "GET", "/metrics", "")
	if len(body) > 1<<20 {
		t.Errorf("/metrics is %d bytes after %d requests with %d-byte methods, want under 1 MiB", len(body), n, size)
	}
	m := string(body)
	if !strings.Contains(m, `lazyapi_apiserver_request_total{verb="other",resource="",code="405"`) {
		t.Errorf("/metrics has no verb=\"other\" series for the invented methods")
	}
	if !strings.Contains(m, `lazyapi_apiserver_request_total{verb="POST",resource="",code="405"`) {
		t.Errorf("/metrics has no verb=\"POST\" series")
	}
}
