package proxy_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeAPIServerErrorBodies: error answers whose text lazyapi had wrong,
// each as kube-apiserver v1.37.2 answered the same request (captured from
// it on the same stored objects).
func TestKubeAPIServerErrorBodies(t *testing.T) {
	e := startEnv(t)
	e.put(t, "configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "a", UID: "uid-cm"}})
	for _, tt := range []struct {
		path string
		code int
		body string // the whole JSON body
	}{
		// The label selector's message once, not "unable to parse
		// requirement: unable to parse requirement: ...".
		{"/api/v1/namespaces/a/configmaps?labelSelector=a+in+(", 400,
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found '', expected: ',', ')' or identifier","reason":"BadRequest","code":400}`},
		{"/api/v1/namespaces/a/configmaps?labelSelector=a%3D%3D%3Db", 400,
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"unable to parse requirement: found '=', expected: identifier","reason":"BadRequest","code":400}`},
		// A create-only subresource: go-restful's 405.
		{"/api/v1/namespaces/a/pods/p/binding", 405,
			`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server does not allow this method on the requested resource","reason":"MethodNotAllowed","details":{},"code":405}`},
		// A watch whose timeoutSeconds is negative or wraps negative as a
		// time.Duration: 200 and the expired context's error event.
		{"/api/v1/namespaces/a/configmaps?watch=1&timeoutSeconds=-5", 200,
			`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"context deadline exceeded","reason":"InternalError","code":500}}`},
		{"/api/v1/namespaces/a/configmaps?watch=1&timeoutSeconds=9223372036854775807", 200,
			`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"context deadline exceeded","reason":"InternalError","code":500}}`},
	} {
		code, body := getWithin(t, e.url+tt.path, 10*time.Second)
		if code != tt.code || strings.TrimSuffix(string(body), "\n") != tt.body {
			t.Errorf("GET %s = %d\n%s\nwant %d\n%s", tt.path, code, body, tt.code, tt.body)
		}
	}
	// A timeoutSeconds that wraps to a positive duration (99999999999 s:
	// 243 years) is a watch like any other.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := e.cs.CoreV1().ConfigMaps("a").Watch(ctx, metav1.ListOptions{TimeoutSeconds: new(int64(99999999999))})
	if err != nil {
		t.Fatalf("watch with timeoutSeconds=99999999999: %v", err)
	}
	if ev := <-w.ResultChan(); ev.Type != "ADDED" {
		t.Errorf("watch with timeoutSeconds=99999999999: first event %v, want ADDED", ev.Type)
	}
	w.Stop()
}

// TestExactFutureRevision: a LIST at an exact revision etcd has not reached
// waits for it as kube-apiserver does (3 s), then is 504 naming the
// current revision, not 0.
func TestExactFutureRevision(t *testing.T) {
	e := startEnv(t)
	rev := e.put(t, "configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "a", UID: "uid-cm"}})
	future := strconv.FormatInt(rev+1000, 10)
	start := time.Now()
	code, _, body := e.raw(t, "GET", "/api/v1/namespaces/a/configmaps?resourceVersionMatch=Exact&resourceVersion="+future, "application/json")
	want := `"message":"Timeout: Too large resource version: ` + future + `, current: ` + strconv.FormatInt(rev, 10) + `"`
	if code != 504 || !strings.Contains(string(body), want) || !strings.Contains(string(body), `"retryAfterSeconds":1`) {
		t.Errorf("Exact LIST at %s = %d %s, want 504 with %s", future, code, body, want)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("Exact LIST at a future revision answered after %v, want after kube-apiserver's 3 s wait", d)
	}
}

// getWithin GETs url as JSON and gives up after d (a watch that should
// have ended at once fails the test instead of hanging it).
func getWithin(t *testing.T, url string, d time.Duration) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Timeout: d}).Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
	}
	return resp.StatusCode, body
}
