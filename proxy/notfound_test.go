package proxy_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestNotFoundAgainstKubeAPIServer: paths nothing is served at are
// answered as kube-apiserver v1.37.2 answered them
// (proxy/testdata/kube-apiserver-notfound.json, recorded by
// internal/testing/kubecapture TestCaptureNotFound): a Status from the routes of
// /api, /version and the built-in groups (go-restful's 404), plain-text
// "404 page not found" elsewhere (its NotFound handler: unknown groups,
// non-API paths).
func TestNotFoundAgainstKubeAPIServer(t *testing.T) {
	b, err := os.ReadFile("testdata/kube-apiserver-notfound.json")
	if err != nil {
		t.Fatal(err)
	}
	var answers []struct {
		Path, ContentType, Body string
		Code                    int
	}
	if err := json.Unmarshal(b, &answers); err != nil {
		t.Fatal(err)
	}
	e := startEnv(t)
	for _, a := range answers {
		code, hdr, body := e.raw(t, "GET", a.Path, "application/json")
		if code != a.Code || hdr.Get("Content-Type") != a.ContentType || strings.TrimSuffix(string(body), "\n") != strings.TrimSuffix(a.Body, "\n") ||
			(strings.HasPrefix(a.ContentType, "text/plain") && string(body) != a.Body) {
			t.Errorf("GET %s = %d %q %q, kube-apiserver %d %q %q", a.Path, code, hdr.Get("Content-Type"), body, a.Code, a.ContentType, a.Body)
		}
	}
}
