package kubecapture

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// NotFoundPaths are the paths whose answers TestCaptureNotFound records:
// paths kube-apiserver serves nothing at, inside and outside /api and
// /apis.
var NotFoundPaths = []string{
	"/foo", "/foo/bar", "/api/v2", "/api/v1/foos", "/api/v1/namespaces/a/foos",
	"/apis/nope.io", "/apis/nope.io/v1", "/apis/nope.io/v1/things", "/apis/apps/v2", "/apis/apps/v1/foos",
	"/apis/apps/v1/namespaces/a/foos", "/openapi/v3/apis/nope.io/v1", "/version/x", "/healthz/nope", "/metricsx",
}

// TestCaptureNotFound records kube-apiserver v1.37's answers (status,
// Content-Type, body) to GET NotFoundPaths with Accept: application/json
// into proxy/testdata/kube-apiserver-notfound.json (LAZYAPI_CAPTURE=1).
func TestCaptureNotFound(t *testing.T) {
	if os.Getenv("LAZYAPI_CAPTURE") != "1" {
		t.Skip("set LAZYAPI_CAPTURE=1 to capture kube-apiserver's answers (needs bench/kube-apiserver.sh build)")
	}
	script, err := filepath.Abs(filepath.Join(repo, "bench", "kube-apiserver.sh"))
	if err != nil {
		t.Fatal(err)
	}
	etcd := etcdtest.Start(t)
	p, err := bench.StartKubeAPIServer(script, etcd.Endpoint, "/registry", t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.WaitReady(context.Background(), "/readyz", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	k := &kube{t: t, url: p.Target.URL, hc: &http.Client{Timeout: time.Minute,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
	type answer struct {
		Path        string `json:"path"`
		Code        int    `json:"code"`
		ContentType string `json:"contentType"`
		Body        string `json:"body"`
	}
	var out []answer
	for _, path := range NotFoundPaths {
		code, h, b := k.do("GET", path, "application/json", nil)
		out = append(out, answer{Path: path, Code: code, ContentType: h.Get("Content-Type"), Body: string(b)})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	must(t, err)
	writeFile(t, filepath.Join(repo, "proxy", "testdata", "kube-apiserver-notfound.json"), append(b, '\n'))
}
