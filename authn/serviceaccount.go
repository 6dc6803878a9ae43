package authn

import (
	"bytes"
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	jose "gopkg.in/go-jose/go-jose.v2"
	"gopkg.in/go-jose/go-jose.v2/jwt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/codec"
)

// LegacyIssuer is the issuer of Secret-based service account tokens
// (serviceaccount.LegacyIssuer).
const LegacyIssuer = "kubernetes/serviceaccount"

// Extra keys kube-apiserver sets on service account users.
const (
	ExtraPodName      = "authentication.kubernetes.io/pod-name"
	ExtraPodUID       = "authentication.kubernetes.io/pod-uid"
	ExtraNodeName     = "authentication.kubernetes.io/node-name"
	ExtraNodeUID      = "authentication.kubernetes.io/node-uid"
	ExtraCredentialID = "authentication.kubernetes.io/credential-id"
)

// Lookup reads the objects a service account token is bound to.
type Lookup interface {
	// Get returns the stored value at an etcd key (decrypted if it was
	// encrypted), or found false when the key does not exist.
	Get(ctx context.Context, key string) (value []byte, found bool, err error)
}

// ServiceAccounts configures service account token authentication, as
// kube-apiserver's flags of the same names.
type ServiceAccounts struct {
	// Keys verify token signatures (--service-account-key-file): RSA or
	// ECDSA public keys.
	Keys []any
	// Issuers are the accepted "iss" of bound tokens
	// (--service-account-issuer). Empty: only legacy tokens.
	Issuers []string
	// Audiences are the accepted "aud" (--api-audiences); empty means
	// Issuers[0], as kube-apiserver.
	Audiences []string
	// LookupLegacy checks a legacy token against its Secret and
	// ServiceAccount (--service-account-lookup; kube-apiserver's default
	// is true). Bound tokens are always checked.
	LookupLegacy bool
	// Lookup reads the bound objects. Required with Keys.
	Lookup Lookup
	// Prefix is --etcd-prefix ("" means "/registry").
	Prefix string
}

// saCacheTTL is how long a verified token is trusted without reading its
// bound objects again: a token whose Pod (Secret, Node, ServiceAccount)
// was deleted or replaced is refused at most this long after. kube-apiserver
// caches successful token authentications for 10 s
// (--authentication-token-cache-ttl... TokenSuccessCacheTTL).
const saCacheTTL = time.Second

// saCacheSize bounds the verified-token cache: when it is full, expired
// entries are dropped, and if none was it is emptied. An entry is a 32-byte
// key and a *User built from verified claims (a few hundred bytes), so the
// cache holds at most about 2 MiB whatever the tokens' sizes.
const saCacheSize = 4096

// ServiceAccountVerifier verifies service account tokens as kube-apiserver
// does, bound (TokenRequest, projected) and legacy (Secret-based) ones.
// Create it with NewServiceAccountVerifier; it is safe for concurrent use.
// A verified token is remembered for at most a second (saCacheTTL), so
// a client's requests cost a hash and a map lookup, not a signature check
// and etcd reads each.
//
// The cache is kube-apiserver's token cache
// (k8s.io/apiserver/pkg/authentication/token/cache) cut to what lazyapi
// needs: keyed by an HMAC-SHA-256 of the token under a random per-process
// key (never the token: a client chooses its size), successes only
// (kube-apiserver's TokenFailureCacheTTL is 0), entries that expire.
type ServiceAccountVerifier struct {
	cfg     ServiceAccounts
	prefix  string
	keys    []jose.JSONWebKey // with kube-apiserver's key IDs
	issuers map[string]bool
	now     func() time.Time
	// macs pools HMAC-SHA-256 hashes under the process's cache key.
	macs sync.Pool

	mu    sync.Mutex
	cache map[saKey]saEntry // token's HMAC -> verified user; guarded by mu
}

// saKey is the HMAC-SHA-256 of a token.
type saKey [sha256.Size]byte

type saEntry struct {
	user    *User
	expires time.Time
}

// NewServiceAccountVerifier returns a verifier for cfg; now is the clock
// (nil: time.Now).
func NewServiceAccountVerifier(cfg ServiceAccounts, now func() time.Time) (*ServiceAccountVerifier, error) {
	if now == nil {
		now = time.Now
	}
	v := &ServiceAccountVerifier{cfg: cfg, prefix: "/" + strings.Trim(cfg.Prefix, "/") + "/", issuers: map[string]bool{}, now: now,
		cache: make(map[saKey]saEntry)}
	macKey := make([]byte, 32)
	if _, err := rand.Read(macKey); err != nil {
		return nil, fmt.Errorf("cannot create the token cache key: %w", err)
	}
	v.macs.New = func() any { return hmac.New(sha256.New, macKey) }
	if cfg.Prefix == "" {
		v.prefix = "/registry/"
	}
	if cfg.Lookup == nil {
		return nil, errors.New("authn: ServiceAccounts.Lookup is required")
	}
	for _, k := range cfg.Keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("authn: unusable service account key: %w", err)
		}
		sum := crypto.SHA256.New()
		sum.Write(der)
		v.keys = append(v.keys, jose.JSONWebKey{Key: k, KeyID: base64.RawURLEncoding.EncodeToString(sum.Sum(nil))})
	}
	for _, iss := range cfg.Issuers {
		v.issuers[iss] = true
	}
	if len(v.cfg.Audiences) == 0 && len(cfg.Issuers) > 0 {
		v.cfg.Audiences = []string{cfg.Issuers[0]}
	}
	return v, nil
}

// errNotServiceAccount: the token is not a JWT of a known issuer (another
// authenticator's, or garbage).
var errNotServiceAccount = errors.New("not a service account token")

// authenticate verifies token. It returns errNotServiceAccount for a
// token that is not one of ours; other errors explain the refusal (they
// never contain the token).
func (v *ServiceAccountVerifier) authenticate(tok []byte) (*User, error) {
	now := v.now()
	key := v.cacheKey(tok)
	v.mu.Lock()
	e, ok := v.cache[key]
	v.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.user, nil
	}
	u, exp, err := v.verify(string(tok), now)
	if err != nil {
		// Failures are not cached (kube-apiserver's TokenFailureCacheTTL
		// is 0): a forged token costs a signature check per request and
		// nothing after it.
		return nil, err
	}
	expires := now.Add(saCacheTTL)
	if !exp.IsZero() && exp.Before(expires) {
		expires = exp
	}
	v.mu.Lock()
	if len(v.cache) >= saCacheSize {
		v.evictLocked(now)
	}
	v.cache[key] = saEntry{user: u, expires: expires}
	v.mu.Unlock()
	return u, nil
}

// cacheKey returns the HMAC of tok under the process's cache key.
func (v *ServiceAccountVerifier) cacheKey(tok []byte) saKey {
	h := v.macs.Get().(hash.Hash)
	h.Reset()
	h.Write(tok)
	var k saKey
	h.Sum(k[:0])
	v.macs.Put(h)
	return k
}

// evictLocked makes room in the full cache: it drops the expired entries,
// or all of them when none had expired.
func (v *ServiceAccountVerifier) evictLocked(now time.Time) {
	for k, e := range v.cache {
		if !now.Before(e.expires) {
			delete(v.cache, k)
		}
	}
	if len(v.cache) >= saCacheSize {
		clear(v.cache)
	}
}

// claims are the public and private claims of both token kinds.
type claims struct {
	jwt.Claims
	Kubernetes *struct {
		Namespace string   `json:"namespace,omitempty"`
		Svcacct   saRef    `json:"serviceaccount,omitempty"`
		Pod       *saRef   `json:"pod,omitempty"`
		Secret    *saRef   `json:"secret,omitempty"`
		Node      *saRef   `json:"node,omitempty"`
		Validate  *saRef   `json:"validatingwebhookconfiguration,omitempty"`
		Mutate    *saRef   `json:"mutatingwebhookconfiguration,omitempty"`
		WarnAfter *float64 `json:"warnafter,omitempty"`
	} `json:"kubernetes.io,omitempty"`
	// Legacy (Secret-based) tokens.
	LegacySAName   string `json:"kubernetes.io/serviceaccount/service-account.name"`
	LegacySAUID    string `json:"kubernetes.io/serviceaccount/service-account.uid"`
	LegacySecret   string `json:"kubernetes.io/serviceaccount/secret.name"`
	LegacyNamepace string `json:"kubernetes.io/serviceaccount/namespace"`
}

type saRef struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// peekIssuer returns the unverified "iss" of a compact JWS, as
// kube-apiserver's hasCorrectIssuer reads it.
func peekIssuer(token string) (string, bool) {
	if strings.HasPrefix(strings.TrimSpace(token), "{") {
		return "", false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", false
	}
	return c.Issuer, true
}

// verify is kube-apiserver's jwtTokenAuthenticator.AuthenticateToken and
// its validators (pkg/serviceaccount: claims.go for bound tokens,
// legacy.go for Secret-based ones). exp is the token's expiry (zero when
// it has none).
func (v *ServiceAccountVerifier) verify(token string, now time.Time) (u *User, exp time.Time, err error) {
	iss, ok := peekIssuer(token)
	legacy := iss == LegacyIssuer
	if !ok || (!legacy && !v.issuers[iss]) {
		return nil, exp, errNotServiceAccount
	}
	tok, err := jwt.ParseSigned(token)
	if err != nil {
		return nil, exp, errNotServiceAccount
	}
	var kid string
	for _, h := range tok.Headers {
		if h.KeyID != "" {
			kid = h.KeyID
			break
		}
	}
	var c claims
	verified := false
	for _, k := range v.keys {
		if kid != "" && k.KeyID != kid {
			continue
		}
		if tok.Claims(k.Key, &c) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, exp, errors.New("invalid signature")
	}
	if c.Issuer != iss {
		return nil, exp, fmt.Errorf("token issuer %q is invalid", c.Issuer)
	}
	// Audiences: a token without one gets the API audiences (legacy
	// tokens); else it must share one with them.
	if len(c.Audience) > 0 && len(v.cfg.Audiences) > 0 && !intersects(c.Audience, v.cfg.Audiences) {
		return nil, exp, fmt.Errorf("token audiences %q is invalid for the target audiences %q", []string(c.Audience), v.cfg.Audiences)
	}
	if c.Expiry != nil {
		exp = c.Expiry.Time()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if legacy {
		u, err = v.validateLegacy(ctx, token, &c)
	} else {
		u, err = v.validateBound(ctx, &c, now)
	}
	return u, exp, err
}

func intersects(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// objMeta is what validation reads of a bound object.
type objMeta struct {
	uid     string
	deleted *time.Time
}

// getMeta reads the UID and deletionTimestamp of the object at key.
func (v *ServiceAccountVerifier) getMeta(ctx context.Context, key string) (objMeta, bool, error) {
	val, found, err := v.cfg.Lookup.Get(ctx, key)
	if err != nil || !found {
		return objMeta{}, found, err
	}
	m, err := decodeMeta(val)
	if err != nil {
		// Not err itself: codec errors quote bytes of the value, which
		// for a Secret are secret.
		return objMeta{}, false, fmt.Errorf("cannot decode the object stored at %s", key)
	}
	return m, true, nil
}

// decodeMeta decodes the metadata of a stored object: field 1 of the
// protobuf object, or "metadata" of JSON.
func decodeMeta(stored []byte) (objMeta, error) {
	obj, err := codec.Unwrap(stored)
	if err != nil {
		return objMeta{}, err
	}
	var om metav1.ObjectMeta
	if obj.Format == codec.FormatProtobuf {
		b := obj.Raw
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return objMeta{}, protowire.ParseError(n)
			}
			b = b[n:]
			if num == 1 && typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return objMeta{}, protowire.ParseError(n)
				}
				// Repeated embedded messages merge, as proto does.
				if err := om.Unmarshal(v); err != nil {
					return objMeta{}, err
				}
				b = b[n:]
				continue
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return objMeta{}, protowire.ParseError(n)
			}
			b = b[n:]
		}
	} else {
		var o struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(obj.Raw, &o); err != nil {
			return objMeta{}, err
		}
		om = o.Metadata
	}
	m := objMeta{uid: string(om.UID)}
	if om.DeletionTimestamp != nil {
		t := om.DeletionTimestamp.Time
		m.deleted = &t
	}
	return m, nil
}

func (v *ServiceAccountVerifier) key(resource, ns, name string) string {
	if ns == "" {
		return v.prefix + resource + "/" + name
	}
	return v.prefix + resource + "/" + ns + "/" + name
}

// validateBound is claims.go's validator.Validate.
func (v *ServiceAccountVerifier) validateBound(ctx context.Context, c *claims, now time.Time) (*User, error) {
	switch err := c.Claims.Validate(jwt.Expected{Time: now}); err {
	case nil:
	case jwt.ErrExpired:
		return nil, errors.New("service account token has expired")
	case jwt.ErrNotValidYet:
		return nil, errors.New("service account token is not valid yet")
	case jwt.ErrIssuedInTheFuture:
		return nil, errors.New("service account token is issued in the future")
	default:
		return nil, fmt.Errorf("service account token claims could not be validated: %w", err)
	}
	k := c.Kubernetes
	if k == nil {
		return nil, errors.New("service account token has no kubernetes.io claims")
	}
	deletedBefore := now.Add(-jwt.DefaultLeeway)
	ns := k.Namespace
	sa, found, err := v.getMeta(ctx, v.key("serviceaccounts", ns, k.Svcacct.Name))
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("serviceaccounts %q not found", k.Svcacct.Name)
	}
	if sa.uid != k.Svcacct.UID {
		return nil, fmt.Errorf("service account UID (%s) does not match claim (%s)", sa.uid, k.Svcacct.UID)
	}
	if sa.deleted != nil && sa.deleted.Before(deletedBefore) {
		return nil, fmt.Errorf("service account %s/%s has been deleted", ns, k.Svcacct.Name)
	}
	check := func(what, key string, ref *saRef) error {
		m, found, err := v.getMeta(ctx, key)
		if err != nil {
			return err
		}
		if !found {
			return errors.New("service account token has been invalidated")
		}
		if m.uid != ref.UID {
			return fmt.Errorf("%s UID (%s) does not match service account %s ref claim (%s)", what, m.uid, strings.ToLower(what), ref.UID)
		}
		if m.deleted != nil && m.deleted.Before(deletedBefore) {
			return errors.New("service account token has been invalidated")
		}
		return nil
	}
	u := &User{Name: serviceAccountPrefix + ns + ":" + k.Svcacct.Name, UID: k.Svcacct.UID,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, AllAuthenticated}, Method: "serviceaccount"}
	extra := map[string][]string{}
	if k.Secret != nil {
		if err := check("secret", v.key("secrets", ns, k.Secret.Name), k.Secret); err != nil {
			return nil, err
		}
	}
	if k.Pod != nil {
		if err := check("pod", v.key("pods", ns, k.Pod.Name), k.Pod); err != nil {
			return nil, err
		}
		extra[ExtraPodName] = []string{k.Pod.Name}
		extra[ExtraPodUID] = []string{k.Pod.UID}
	}
	if k.Node != nil {
		if k.Pod == nil {
			if err := check("node", v.key("minions", "", k.Node.Name), k.Node); err != nil {
				return nil, err
			}
		}
		extra[ExtraNodeName] = []string{k.Node.Name}
		if k.Node.UID != "" {
			extra[ExtraNodeUID] = []string{k.Node.UID}
		}
	}
	if k.Validate != nil || k.Mutate != nil {
		return nil, errors.New("tokens bound to webhook configurations are not accepted by lazyapi")
	}
	if c.ID != "" {
		extra[ExtraCredentialID] = []string{"JTI=" + c.ID}
	}
	if len(extra) > 0 {
		u.Extra = extra
	}
	return u, nil
}

// validateLegacy is legacy.go's legacyValidator.Validate.
func (v *ServiceAccountVerifier) validateLegacy(ctx context.Context, token string, c *claims) (*User, error) {
	if c.Subject == "" {
		return nil, errors.New("sub claim is missing")
	}
	ns, secretName, saName, saUID := c.LegacyNamepace, c.LegacySecret, c.LegacySAName, c.LegacySAUID
	switch {
	case ns == "":
		return nil, errors.New("namespace claim is missing")
	case secretName == "":
		return nil, errors.New("secretName claim is missing")
	case saName == "":
		return nil, errors.New("serviceAccountName claim is missing")
	case saUID == "":
		return nil, errors.New("serviceAccountUID claim is missing")
	}
	if c.Subject != serviceAccountPrefix+ns+":"+saName {
		return nil, errors.New("sub claim is invalid")
	}
	if v.cfg.LookupLegacy {
		val, found, err := v.cfg.Lookup.Get(ctx, v.key("secrets", ns, secretName))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, errors.New("Token has been invalidated")
		}
		secret, err := decodeSecret(val)
		if err != nil {
			// Not err itself: it may quote bytes of the Secret.
			return nil, errors.New("cannot decode the token's Secret")
		}
		if secret.DeletionTimestamp != nil {
			return nil, errors.New("Token has been invalidated")
		}
		if subtle.ConstantTimeCompare(secret.Data[corev1.ServiceAccountTokenKey], []byte(token)) == 0 {
			return nil, errors.New("Token does not match server's copy")
		}
		sa, found, err := v.getMeta(ctx, v.key("serviceaccounts", ns, saName))
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, fmt.Errorf("serviceaccounts %q not found", saName)
		}
		if sa.deleted != nil {
			return nil, fmt.Errorf("ServiceAccount %s/%s has been deleted", ns, saName)
		}
		if sa.uid != saUID {
			return nil, fmt.Errorf("ServiceAccount UID (%s) does not match claim (%s)", sa.uid, saUID)
		}
		if secret.Labels["kubernetes.io/legacy-token-invalid-since"] != "" {
			return nil, fmt.Errorf("the token in secret %s/%s for service account %s/%s has been marked invalid", ns, secretName, ns, saName)
		}
	}
	return &User{Name: serviceAccountPrefix + ns + ":" + saName, UID: saUID,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, AllAuthenticated}, Method: "serviceaccount"}, nil
}

func decodeSecret(stored []byte) (*corev1.Secret, error) {
	obj, err := codec.Unwrap(stored)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{}
	if obj.Format == codec.FormatProtobuf {
		err = s.Unmarshal(obj.Raw)
	} else {
		err = json.NewDecoder(bytes.NewReader(obj.Raw)).Decode(s)
	}
	return s, err
}

// serviceAccountPrefix starts a service account's user name.
const serviceAccountPrefix = "system:serviceaccount:"
