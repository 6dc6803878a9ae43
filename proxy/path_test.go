package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// rawRequest sends a request line exactly as given (no client-side
// cleaning or escaping) and returns the status code and body.
func (e *env) rawRequest(t *testing.T, target string) (int, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, "GET "+target+" HTTP/1.1\r\nHost: lazyapi\r\nAccept: application/json\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	return resp.StatusCode, body
}

// TestPathTraversal: paths are parsed as kube-apiserver parses them (Go's
// URL.Path: percent-decoded, never cleaned), so no spelling of a path in
// namespace a reads namespace b, names kube-apiserver's registry refuses
// get its 400, and routes it does not register get its 404.
func TestPathTraversal(t *testing.T) {
	e := startEnv(t)
	for _, ns := range []string{"a", "b"} {
		e.put(t, "secrets", &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "s-" + ns, Namespace: ns, UID: types.UID("uid-s-" + ns)},
			Data:       map[string][]byte{"token": []byte("secret-of-" + ns)},
		})
		e.put(t, "configmaps", &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: ns, UID: types.UID("uid-cm-" + ns)},
		})
	}
	e.put(t, "pods", &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a", UID: "uid-p"},
	})
	const bSecret = "c2VjcmV0LW9mLWI=" // base64("secret-of-b")
	tests := []struct {
		target string
		code   int
		msg    string // substring of the body
	}{
		// Traversals out of namespace a: kube-apiserver has no route.
		{"/api/v1/namespaces/a/configmaps/..%2F..%2Fb%2Fsecrets", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a%2F..%2Fb/secrets", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/secrets/..%2F..%2Fb%2Fsecrets%2Fs-b", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/../b/secrets", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/secrets/../../b/secrets/s-b", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/secrets/%2E%2E%2F%2E%2E%2Fb%2Fsecrets%2Fs-b", 404, "could not find the requested resource"},
		// Not under /api: kube-apiserver's NotFound handler.
		{"//api/v1/namespaces/b/secrets", 404, "404 page not found"},
		{"/api/v1/namespaces/a/secrets/s-b%2F..%2F..%2Fb%2Fsecrets%2Fs-b", 404, "could not find the requested resource"},
		// Names the registry refuses (path.IsValidPathSegmentName).
		{"/api/v1/namespaces/a/secrets/..", 400, `Name parameter invalid: \"..\": may not be '..'`},
		{"/api/v1/namespaces/a/secrets/.", 400, `Name parameter invalid: \".\": may not be '.'`},
		{"/api/v1/namespaces/a/secrets/%2E%2E", 400, `may not be '..'`},
		{"/api/v1/namespaces/a/secrets/s%25b", 400, `Name parameter invalid: \"s%b\": may not contain '%'`},
		{"/api/v1/nodes/..", 400, `may not be '..'`},
		// A decoded %2F is a path separator, as in kube-apiserver.
		{"/api/v1/namespaces/a/secrets/s-a%2Fstatus", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/pods/p%2Fstatus", 200, `"name":"p"`},
		// Subresources only where kube-apiserver registers them.
		{"/api/v1/namespaces/a/configmaps/cm/status", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/secrets/s-a/status", 404, "could not find the requested resource"},
		{"/api/v1/namespaces/a/pods/p/status", 200, `"name":"p"`},
		{"/api/v1/namespaces/a/pods//status", 400, "name must be provided"},
		// An empty namespace segment is namespace "": a list of every
		// namespace, and a GET kube-apiserver's key function refuses.
		{"/api/v1/namespaces//secrets/s-a", 400, "Namespace parameter required."},
		{"/api/v1/namespaces/a/secrets/s-a/", 200, `"name":"s-a"`},
		{"/api/v1/namespaces/a/secrets/s-a", 200, `"name":"s-a"`},
		// Go's server refuses a malformed escape before any handler.
		{"/api/v1/namespaces/a/secrets/%zz", 400, "400 Bad Request"},
	}
	for _, tt := range tests {
		code, body := e.rawRequest(t, tt.target)
		if code != tt.code || !strings.Contains(string(body), tt.msg) {
			t.Errorf("GET %s = %d %s; want %d with %q", tt.target, code, body, tt.code, tt.msg)
		}
		if strings.Contains(string(body), bSecret) || strings.Contains(string(body), `"namespace":"b"`) {
			t.Errorf("GET %s served namespace b: %s", tt.target, body)
		}
	}
	// namespaces//secrets is kube-apiserver's namespaced list route with
	// namespace "": every namespace.
	code, body := e.rawRequest(t, "/api/v1/namespaces//secrets")
	var list corev1.SecretList
	if code != 200 || json.Unmarshal(body, &list) != nil || len(list.Items) != 2 {
		t.Errorf("GET /api/v1/namespaces//secrets = %d %s; want 200 with both namespaces' Secrets", code, body)
	}
}
