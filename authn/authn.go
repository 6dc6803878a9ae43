// Package authn authenticates Kubernetes API requests as kube-apiserver
// does: x509 client certificates (--client-ca-file), static bearer tokens
// (--token-auth-file) and, when allowed, anonymous requests
// (--anonymous-auth). It does not authorize: a user it returns may read
// everything lazyapi serves.
package authn

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// User is an authenticated identity. Its fields are not modified after it
// is returned; share it, do not change it.
type User struct {
	// Name is the user name: the token file's second column, or the client
	// certificate's subject CommonName.
	Name string
	// UID is the token file's third column ("" for certificates).
	UID string
	// Groups are the token file's fourth column split at commas, or the
	// certificate's subject Organizations; the Authenticator appends
	// system:authenticated.
	Groups []string
	// Extra are the extra fields kube-apiserver's authenticators attach
	// (e.g. a service account token's authentication.kubernetes.io/pod-name);
	// nil for most users.
	Extra map[string][]string
	// Method is how the user was authenticated: "token", "x509",
	// "serviceaccount" or "anonymous".
	Method string
}

// Anonymous is the user of a request without credentials when anonymous
// requests are allowed, as kube-apiserver names it.
var Anonymous = &User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}, Method: "anonymous"}

// Errors returned by Authenticate; all are answered 401 Unauthorized.
var (
	// ErrNoCredentials: the request carries no token and no client
	// certificate, and anonymous requests are not allowed.
	ErrNoCredentials = errors.New("authn: no credentials")
	// ErrInvalidToken: the bearer token is not in the token file
	// (kube-apiserver: "invalid bearer token").
	ErrInvalidToken = errors.New("authn: invalid bearer token")
	// ErrInvalidCertificate: the client certificate does not verify
	// against the client CAs (or they are not configured).
	ErrInvalidCertificate = errors.New("authn: invalid client certificate")
)

// Config configures an Authenticator. The zero value authenticates nobody
// and lets every request through (Enabled reports false).
type Config struct {
	// ClientCAs verifies client certificates (--client-ca-file); nil: a
	// client certificate is ignored.
	ClientCAs *x509.CertPool
	// Tokens maps bearer tokens to users (--token-auth-file); nil: bearer
	// tokens are ignored.
	Tokens Tokens
	// ServiceAccounts, when set, verifies bearer tokens that are service
	// account JWTs (--service-account-key-file and friends); tokens of
	// the token file are tried first.
	ServiceAccounts *ServiceAccountVerifier
	// TokenReview, when set, authenticates the bearer tokens the token
	// file and the service account verifier do not accept, by asking a
	// remote service (--authentication-kubeconfig,
	// --authentication-token-webhook-config-file; authn/tokenreview).
	TokenReview TokenAuthenticator
	// Anonymous lets a request without credentials through as Anonymous
	// (--anonymous-auth=true); false answers it ErrNoCredentials. Used only
	// when ClientCAs or Tokens is set.
	Anonymous bool
	// Now returns the time certificates are verified at; nil: time.Now.
	Now func() time.Time
}

// TokenAuthenticator authenticates a bearer token remotely.
type TokenAuthenticator interface {
	// AuthenticateToken returns the token's user; nil and nil when the
	// token is not valid; an error when it cannot tell (or the remote
	// service gave a reason). Errors never contain the token.
	AuthenticateToken(ctx context.Context, token string) (*User, error)
}

// tokenReviewTimeout bounds a TokenReview with its retries (each request
// has its own, shorter bound).
const tokenReviewTimeout = 30 * time.Second

// certCacheSize bounds the verified-certificate cache; when it is full it
// is emptied (every client then verifies once more).
const certCacheSize = 4096

// Authenticator authenticates requests. Create it with New; it is safe for
// concurrent use. Verified client certificates are remembered (by their DER
// bytes, until the earliest NotAfter of their chain) so that a request on a
// known certificate costs a map lookup, not a chain verification.
type Authenticator struct {
	cfg Config
	now func() time.Time
	// clientCAs is the pool in force: cfg.ClientCAs, then what
	// SetClientCAs stored (--client-ca-file reloaded).
	clientCAs atomic.Pointer[x509.CertPool]

	mu    sync.RWMutex
	certs map[string]certEntry // leaf DER -> verified user; guarded by mu
}

type certEntry struct {
	user     *User
	notAfter time.Time // earliest NotAfter of the verified chain
}

// New returns an Authenticator for cfg. Users of cfg.Tokens get the group
// system:authenticated added, as kube-apiserver adds it to every
// authenticated user (AuthenticatedGroupAdder); cfg.Tokens is not changed.
func New(cfg Config) *Authenticator {
	if cfg.Tokens != nil {
		tokens := make(Tokens, len(cfg.Tokens))
		for tok, u := range cfg.Tokens {
			tokens[tok] = withAuthenticated(u)
		}
		cfg.Tokens = tokens
	}
	a := &Authenticator{cfg: cfg, now: cfg.Now, certs: make(map[string]certEntry)}
	if a.now == nil {
		a.now = time.Now
	}
	a.clientCAs.Store(cfg.ClientCAs)
	return a
}

// SetClientCAs replaces the CAs client certificates are verified with (a
// reloaded --client-ca-file) and forgets the certificates verified so far,
// so that one of a CA no longer in the pool is refused from the next
// request on. pool must not be nil when Config.ClientCAs was set.
func (a *Authenticator) SetClientCAs(pool *x509.CertPool) {
	a.clientCAs.Store(pool)
	a.mu.Lock()
	clear(a.certs)
	a.mu.Unlock()
}

// Enabled reports whether any authenticator is configured. When it is not,
// lazyapi serves every request without authentication.
func (a *Authenticator) Enabled() bool {
	return a != nil && (a.cfg.ClientCAs != nil || a.cfg.Tokens != nil || a.cfg.ServiceAccounts != nil || a.cfg.TokenReview != nil)
}

// Authenticate returns the user of a request from its Authorization header
// value and its TLS peer certificates (leaf first; nil without TLS or when
// the client sent none). As kube-apiserver, a client certificate is tried
// first, then a bearer token; a certificate or token that is present but
// invalid is an error even when anonymous requests are allowed. A verified
// certificate without a CommonName counts as no credentials. authorization
// is not retained.
func (a *Authenticator) Authenticate(authorization []byte, certs []*x509.Certificate) (*User, error) {
	var certErr error
	if pool := a.clientCAs.Load(); len(certs) > 0 && pool != nil {
		u, err := a.verifyCert(certs, pool)
		if u != nil {
			return u, nil
		}
		certErr = err
	}
	if token, ok := bearerToken(authorization); ok && (a.cfg.Tokens != nil || a.cfg.ServiceAccounts != nil || a.cfg.TokenReview != nil) {
		if u := a.cfg.Tokens[string(token)]; u != nil {
			return u, nil
		}
		// As kube-apiserver's union of token authenticators: each is
		// asked until one accepts; their errors are joined.
		errs := []error{certErr}
		if sa := a.cfg.ServiceAccounts; sa != nil {
			u, err := sa.authenticate(token)
			if err == nil {
				return u, nil
			}
			if !errors.Is(err, errNotServiceAccount) {
				errs = append(errs, err)
			}
		}
		if tr := a.cfg.TokenReview; tr != nil {
			ctx, cancel := context.WithTimeout(context.Background(), tokenReviewTimeout)
			u, err := tr.AuthenticateToken(ctx, string(token))
			cancel()
			if u != nil {
				return withAuthenticated(u), nil
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("token review: %w", err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
		return nil, ErrInvalidToken
	}
	if certErr != nil {
		return nil, certErr
	}
	if a.cfg.Anonymous {
		return Anonymous, nil
	}
	return nil, ErrNoCredentials
}

// bearerToken extracts the token of "Bearer <token>" as kube-apiserver's
// bearertoken authenticator does: surrounding space trimmed, the scheme
// case-insensitive, the token up to the next space. ok is false for
// another scheme or an empty token (no credentials).
func bearerToken(h []byte) (token []byte, ok bool) {
	h = bytes.TrimSpace(h)
	scheme, rest, found := bytes.Cut(h, []byte(" "))
	if !found || !bytes.EqualFold(scheme, []byte("bearer")) {
		return nil, false
	}
	token, _, _ = bytes.Cut(rest, []byte(" "))
	return token, len(token) > 0
}

// verifyCert returns the user of a verified client certificate chain, nil
// and nil for a verified certificate without CommonName, or nil and an
// error wrapping ErrInvalidCertificate.
func (a *Authenticator) verifyCert(certs []*x509.Certificate, pool *x509.CertPool) (*User, error) {
	leaf := certs[0]
	now := a.now()
	a.mu.RLock()
	e, ok := a.certs[string(leaf.Raw)]
	a.mu.RUnlock()
	if ok && now.Before(e.notAfter) {
		return e.user, nil
	}
	opts := x509.VerifyOptions{
		Roots:       pool,
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	chains, err := leaf.Verify(opts)
	if err != nil {
		return nil, fmt.Errorf("%w: verifying certificate with subject %q, serial %s failed: %w",
			ErrInvalidCertificate, leaf.Subject.String(), leaf.SerialNumber, err)
	}
	if leaf.Subject.CommonName == "" {
		return nil, nil
	}
	notAfter := leaf.NotAfter
	for _, c := range chains[0] {
		if c.NotAfter.Before(notAfter) {
			notAfter = c.NotAfter
		}
	}
	u := withAuthenticated(&User{Name: leaf.Subject.CommonName, Groups: leaf.Subject.Organization, Method: "x509"})
	a.mu.Lock()
	if len(a.certs) >= certCacheSize {
		clear(a.certs)
	}
	if a.clientCAs.Load() == pool { // not replaced meanwhile (SetClientCAs)
		a.certs[string(leaf.Raw)] = certEntry{user: u, notAfter: notAfter}
	}
	a.mu.Unlock()
	return u, nil
}

// Group names kube-apiserver gives every authenticated and every
// anonymous request.
const (
	AllAuthenticated   = "system:authenticated"
	AllUnauthenticated = "system:unauthenticated"
)

// withAuthenticated returns u with the group system:authenticated
// appended, as kube-apiserver's AuthenticatedGroupAdder: not for
// system:anonymous, nor when u already has system:authenticated or
// system:unauthenticated. u is not modified; the result may be u.
func withAuthenticated(u *User) *User {
	if u.Name == Anonymous.Name {
		return u
	}
	for _, g := range u.Groups {
		if g == AllAuthenticated || g == AllUnauthenticated {
			return u
		}
	}
	c := *u
	c.Groups = append(append(make([]string, 0, len(u.Groups)+1), u.Groups...), AllAuthenticated)
	return &c
}
