// Package reviewtest is a TokenReview and SubjectAccessReview server for
// tests: real HTTPS on loopback with its own CA, speaking the
// authentication.k8s.io/v1 and authorization.k8s.io/v1 types at
// kube-apiserver's paths, answering from functions the test gives, and
// counting what it was asked. It can be stopped (the webhook down) and
// started again on the same address.
package reviewtest

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// Paths where kube-apiserver serves the reviews.
const (
	TokenReviewPath         = "/apis/authentication.k8s.io/v1/tokenreviews"
	SubjectAccessReviewPath = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
)

// ClientToken is the bearer token the kubeconfigs give lazyapi; the
// server answers 401 to requests without it.
const ClientToken = "delegator-secret-4f1c9e"

// Server answers reviews. Set Authenticate and Authorize before the
// first request.
type Server struct {
	// Authenticate answers a TokenReview's token: the user and true,
	// or false (not authenticated) with an optional error text.
	Authenticate func(token string) (authenticationv1.UserInfo, bool, string)
	// Authorize answers a SubjectAccessReview.
	Authorize func(spec authorizationv1.SubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus

	// TokenReviews and SubjectAccessReviews count the reviews answered.
	TokenReviews, SubjectAccessReviews atomic.Int64

	CA   *testpki.CA
	cert *testpki.Cert
	addr string

	mu       sync.Mutex
	srv      *http.Server
	lastSARs []authorizationv1.SubjectAccessReviewSpec // the last 64, newest last
	sarSeq   int64                                     // reviews recorded so far
}

// Start starts a server on a free loopback port; it is stopped when the
// test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{CA: testpki.NewCA(t, "review-ca")}
	s.cert = s.CA.Server(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's base URL.
func (s *Server) URL() string { return "https://" + s.addr }

func (s *Server) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(s.handle), TLSConfig: &tls.Config{
		Certificates: []tls.Certificate{s.cert.TLS()}, MinVersion: tls.VersionTLS12}}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	go func() { _ = srv.ServeTLS(ln, "", "") }()
}

// Stop closes the listener and every connection: the webhook is down
// (connection refused) until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// Restart serves again on the same address.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.serve(ln)
}

// LastSubjectAccessReview returns the spec of the last review answered.
func (s *Server) LastSubjectAccessReview() (authorizationv1.SubjectAccessReviewSpec, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lastSARs) == 0 {
		return authorizationv1.SubjectAccessReviewSpec{}, false
	}
	return s.lastSARs[len(s.lastSARs)-1], true
}

// SubjectAccessReviewsSince returns the specs of the reviews answered
// after the first seq ones (of the last 64), and the count so far: call
// it with 0 to get the count, then with that count after a request.
func (s *Server) SubjectAccessReviewsSince(seq int64) ([]authorizationv1.SubjectAccessReviewSpec, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.sarSeq - seq
	if n <= 0 {
		return nil, s.sarSeq
	}
	if n > int64(len(s.lastSARs)) {
		n = int64(len(s.lastSARs))
	}
	return append([]authorizationv1.SubjectAccessReviewSpec(nil), s.lastSARs[int64(len(s.lastSARs))-n:]...), s.sarSeq
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+ClientToken {
		http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Unauthorized","code":401}`, http.StatusUnauthorized)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case TokenReviewPath:
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil || tr.APIVersion != "authentication.k8s.io/v1" || tr.Kind != "TokenReview" {
			http.Error(w, fmt.Sprintf("not an authentication.k8s.io/v1 TokenReview: %v", err), http.StatusBadRequest)
			return
		}
		s.TokenReviews.Add(1)
		u, ok, msg := s.Authenticate(tr.Spec.Token)
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, Error: msg}
		if ok {
			tr.Status.User = u
			tr.Status.Audiences = tr.Spec.Audiences
		}
		tr.Spec = authenticationv1.TokenReviewSpec{} // kube-apiserver does not echo the token
		_ = json.NewEncoder(w).Encode(&tr)
	case SubjectAccessReviewPath:
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil || sar.APIVersion != "authorization.k8s.io/v1" || sar.Kind != "SubjectAccessReview" {
			http.Error(w, fmt.Sprintf("not an authorization.k8s.io/v1 SubjectAccessReview: %v", err), http.StatusBadRequest)
			return
		}
		s.SubjectAccessReviews.Add(1)
		s.mu.Lock()
		if len(s.lastSARs) >= 64 {
			s.lastSARs = s.lastSARs[1:]
		}
		s.lastSARs = append(s.lastSARs, sar.Spec)
		s.sarSeq++
		s.mu.Unlock()
		sar.Status = s.Authorize(sar.Spec)
		_ = json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

// Kubeconfig writes a kubeconfig for the server (its CA, ClientToken)
// into dir and returns its path. path "" is the base URL (for
// --authentication-kubeconfig and --authorization-kubeconfig, which post
// to kube-apiserver's paths); else the webhook's exact URL path (for
// --authentication-token-webhook-config-file and
// --authorization-webhook-config-file).
func (s *Server) Kubeconfig(t testing.TB, dir, name, path string) string {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: reviews
  cluster:
    server: %s%s
    certificate-authority: %s
users:
- name: lazyapi
  user:
    token: %s
contexts:
- name: reviews
  context:
    cluster: reviews
    user: lazyapi
current-context: reviews
`, s.URL(), path, s.CA.File, ClientToken)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
