package proxy_test

import (
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
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

// TestVersionAnonymousRules: /version follows kube-apiserver's anonymous
// rules: authenticated (a wrong token is 401; no credentials is 401 with
// anonymous requests off, TestAuthnStatus), and allowed to every
// authenticated user and to system:anonymous when anonymous requests are
// on (system:public-info-viewer), whatever the RBAC objects in etcd say.
func TestVersionAnonymousRules(t *testing.T) {
	ms := metrics.NewSet()
	e := startEnv(t, withRBAC(t, ms))
	get := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequest("GET", e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return resp.StatusCode
	}
	for _, tt := range []struct {
		path, token string
		want        int
	}{
		{"/version", "", 200},
		{"/version/", "", 200},
		{"/version", "token-00", 200},
		{"/version", "wrong-token", 401},
		{"/healthz", "wrong-token", 200},
		{"/livez", "", 200},
	} {
		if got := get(tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with token %q = %d, want %d", tt.path, tt.token, got, tt.want)
		}
	}
}
