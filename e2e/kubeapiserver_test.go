package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/bench"
)

// needKubeAPIServer skips t unless LAZYAPI_KUBEAPISERVER=1 and
// bench/kube-apiserver.sh has built kube-apiserver v1.37.2; it returns the
// script's path and the binary's.
func needKubeAPIServer(t *testing.T) (script, bin string) {
	t.Helper()
	if os.Getenv("LAZYAPI_KUBEAPISERVER") != "1" {
		t.Skip("set LAZYAPI_KUBEAPISERVER=1 to compare with kube-apiserver (needs bash bench/kube-apiserver.sh build)")
	}
	script, err := filepath.Abs("../bench/kube-apiserver.sh")
	if err != nil {
		t.Fatal(err)
	}
	if bin, err = bench.KubeAPIServerBinary(context.Background(), script); err != nil {
		t.Skipf("kube-apiserver not built: %v", err)
	}
	return script, bin
}

// kubeAPIServer is kube-apiserver as bench/kube-apiserver.sh starts it
// (its token is an admin's), for side-by-side tests.
type kubeAPIServer struct {
	t   *testing.T
	url string
	hc  *http.Client
	pid int // of the kube-apiserver process (for its memory)
	// dir is the script's --dir: with --front-proxy, front-proxy/ holds
	// the front-proxy client certificate and audit.log the audit log.
	dir string
}

// startKubeAPIServer starts kube-apiserver through script on the etcd at
// endpoint (prefix /registry, watch cache on, extra start flags of the
// script), waits until it is ready and stops it when t ends.
func startKubeAPIServer(t *testing.T, script, endpoint string, extra ...string) *kubeAPIServer {
	t.Helper()
	logDir := t.TempDir()
	p, err := bench.StartKubeAPIServerWith(script, endpoint, "/registry", logDir, true, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	if err := p.WaitReady(context.Background(), "/readyz", 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	return &kubeAPIServer{t: t, url: p.Target.URL, pid: p.Target.PID, dir: filepath.Join(logDir, "kube-apiserver"),
		hc: &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}} // loopback test server
}

// do sends method path (a JSON body when body is not nil) with Accept
// accept and returns the status code and body.
func (k *kubeAPIServer) do(method, path, accept string, body []byte) (int, []byte) {
	k.t.Helper()
	req, err := http.NewRequest(method, k.url+path, bytes.NewReader(body))
	if err != nil {
		k.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bench.KubeAPIServerToken)
	req.Header.Set("Accept", accept)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		k.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// create POSTs the JSON body to path and fails the test unless it is
// created.
func (k *kubeAPIServer) create(path, body string) {
	k.t.Helper()
	if code, b := k.do("POST", path, "application/json", []byte(body)); code != 201 {
		k.t.Fatalf("POST %s: %d %s", path, code, b)
	}
}

// getAs GETs base+path with Accept accept and returns the status code and
// body, whatever the status.
func getAs(t *testing.T, base, path, accept string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// firstDifference says where kube-apiserver's answer kb and lazyapi's lb
// first differ: the byte offset, both lengths and each side's bytes from
// before bytes ahead of it to after bytes past it.
func firstDifference(kb, lb []byte, before, after int) string {
	i := 0
	for i < len(kb) && i < len(lb) && kb[i] == lb[i] {
		i++
	}
	return fmt.Sprintf("first difference at byte %d of %d/%d:\nkube    %q\nlazyapi %q", i, len(kb), len(lb),
		kb[max(0, i-before):min(len(kb), i+after)], lb[max(0, i-before):min(len(lb), i+after)])
}
