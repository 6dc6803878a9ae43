package proxy_test

import (
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/proxy"
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
	t.Logf("/metrics: %d bytes after %d requests with %d-byte methods", len(body), n, size)
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
	get := func(path, token string) int { t.Helper(); return codeWithToken(t, e.url+path, token) }
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

// TestClearTextCredentials: on a ClearText listener (lazyapi's --port with
// an authenticator) a request with a bearer token is refused 401 even when
// the token is valid, /debug/pprof/ is not served even with a token that
// is accepted (--plain-port-tokens), and health endpoints answer.
func TestClearTextCredentials(t *testing.T) {
	tokens, err := authn.ParseTokens([]byte("token-alice,alice,uid-a,system:masters\n"), "tokens.csv")
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, func(c *proxy.Config) {
		c.Authenticator = authn.New(authn.Config{Tokens: tokens})
		c.Profiling = true
	})
	serve := func(tokens bool) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go e.srv.Serve(proxy.ClearText(ln, tokens)) //nolint:errcheck // ends with the env's Shutdown
		return "http://" + ln.Addr().String()
	}
	noTokens, withTokens := serve(false), serve(true)
	get := func(url, token string) int { t.Helper(); return codeWithToken(t, url, token) }
	const list, cmdline = "/api/v1/namespaces/ns/configmaps", "/debug/pprof/cmdline"
	for _, tt := range []struct {
		what, url, token string
		want             int
	}{
		{"clear text: valid token", noTokens + list, "token-alice", 401},
		{"clear text: pprof with a valid token", noTokens + cmdline, "token-alice", 401},
		{"clear text: no credentials", noTokens + list, "", 401},
		{"clear text: health", noTokens + "/livez", "", 200},
		{"clear text, tokens accepted: valid token", withTokens + list, "token-alice", 200},
		{"clear text, tokens accepted: pprof", withTokens + cmdline, "token-alice", 404},
		{"not marked: pprof", e.url + cmdline, "token-alice", 200},
	} {
		if got := get(tt.url, tt.token); got != tt.want {
			t.Errorf("%s: GET %s = %d, want %d", tt.what, tt.url, got, tt.want)
		}
	}
}

// codeWithToken GETs url, with a bearer token unless it is "", and
// returns the status code.
func codeWithToken(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
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
