package authn_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/keyutil"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// Names and UIDs of the objects testdata/sa-tokens.json's tokens are bound
// to (authz/testdata/rbacgen/sagen).
const (
	saIssuer    = "https://kubernetes.default.svc.cluster.local"
	saNamespace = "apps"
	saName      = "reader"
	saUID       = "sa-uid-1"
	saPod       = "reader-pod"
	saPodUID    = "pod-uid-1"
	saSecret    = "reader-token"
	saSecretUID = "secret-uid-1"
	saNode      = "node-1"
	saNodeUID   = "node-uid-1"
)

// SATokens returns testdata/sa-tokens.json.
func saTokens(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile("testdata/sa-tokens.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// etcdLookup is authn.Lookup over an etcd client.
type etcdLookup struct{ cli *clientv3.Client }

func (l etcdLookup) Get(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := l.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, false, err
	}
	return resp.Kvs[0].Value, true, nil
}

func putObj(t testing.TB, cli *clientv3.Client, resource string, obj runtime.Object) {
	t.Helper()
	val, err := storagefmt.Protobuf(obj)
	if err != nil {
		t.Fatal(err)
	}
	m := obj.(metav1.Object)
	if _, err := cli.Put(context.Background(), storagefmt.Key("/registry", resource, m.GetNamespace(), m.GetName()), string(val)); err != nil {
		t.Fatal(err)
	}
}

func del(t testing.TB, cli *clientv3.Client, key string) {
	t.Helper()
	if _, err := cli.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
}

func objMeta(ns, name, uid string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}
}

// putBoundObjects stores the ServiceAccount, Pod, Secret (holding the
// legacy token) and Node.
func putBoundObjects(t testing.TB, cli *clientv3.Client, legacyToken string) {
	putObj(t, cli, "serviceaccounts", &corev1.ServiceAccount{ObjectMeta: objMeta(saNamespace, saName, saUID)})
	putObj(t, cli, "pods", &corev1.Pod{ObjectMeta: objMeta(saNamespace, saPod, saPodUID), Spec: corev1.PodSpec{NodeName: saNode}})
	putObj(t, cli, "secrets", &corev1.Secret{ObjectMeta: objMeta(saNamespace, saSecret, saSecretUID),
		Type: corev1.SecretTypeServiceAccountToken, Data: map[string][]byte{"token": []byte(legacyToken)}})
	putObj(t, cli, "minions", &corev1.Node{ObjectMeta: objMeta("", saNode, saNodeUID)})
}

func TestServiceAccountTokens(t *testing.T) {
	etcd := etcdtest.Start(t)
	toks := saTokens(t)
	putBoundObjects(t, etcd.Client, toks["legacy"])
	keys, err := keyutil.PublicKeysFromFile("testdata/sa.key")
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	tick := func() { clock.Add(int64(2 * time.Second)) } // past the verified-token cache
	v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{Keys: keys, Issuers: []string{saIssuer},
		LookupLegacy: true, Lookup: etcdLookup{etcd.Client}}, now)
	if err != nil {
		t.Fatal(err)
	}
	a := authn.New(authn.Config{ServiceAccounts: v})
	check := func(name, wantErr string) *authn.User {
		t.Helper()
		u, err := a.Authenticate([]byte("Bearer "+toks[name]), nil)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case wantErr != "" && (!errors.Is(err, authn.ErrInvalidToken) || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("%s: %v, %v; want an invalid token error containing %q", name, u, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), toks[name]) {
			t.Errorf("%s: the error shows the token", name)
		}
		return u
	}
	saGroups := []string{"system:serviceaccounts", "system:serviceaccounts:apps", "system:authenticated"}
	u := check("pod", "")
	if u != nil {
		jti := u.Extra["authentication.kubernetes.io/credential-id"]
		want := &authn.User{Name: "system:serviceaccount:apps:reader", UID: saUID, Groups: saGroups, Method: "serviceaccount",
			Extra: map[string][]string{
				"authentication.kubernetes.io/pod-name": {saPod}, "authentication.kubernetes.io/pod-uid": {saPodUID},
				"authentication.kubernetes.io/node-name": {saNode}, "authentication.kubernetes.io/node-uid": {saNodeUID},
				"authentication.kubernetes.io/credential-id": jti,
			}}
		if len(jti) != 1 || !strings.HasPrefix(jti[0], "JTI=") || !reflect.DeepEqual(u, want) {
			t.Errorf("pod-bound user = %+v\nwant %+v", u, want)
		}
	}
	for _, name := range []string{"secret", "node", "unbound", "two-audiences", "legacy"} {
		if u := check(name, ""); u != nil && (u.Name != "system:serviceaccount:apps:reader" || !reflect.DeepEqual(u.Groups, saGroups)) {
			t.Errorf("%s: user %+v", name, u)
		}
	}
	check("pod-other-uid", "pod UID (pod-uid-1) does not match service account pod ref claim (pod-uid-0)")
	check("expired", "service account token has expired")
	check("wrong-issuer", "invalid bearer token")
	check("wrong-audience", `token audiences ["https://vault.example.com"] is invalid for the target audiences ["https://kubernetes.default.svc.cluster.local"]`)
	check("wrong-key", "invalid signature")
	if _, err := a.Authenticate([]byte("Bearer not.a.jwt"), nil); !errors.Is(err, authn.ErrInvalidToken) {
		t.Errorf("garbage token: %v", err)
	}

	// The Pod is deleted: its token is refused once the cache entry ends.
	del(t, etcd.Client, "/registry/pods/apps/reader-pod")
	check("pod", "") // cached for up to a second
	tick()
	check("pod", "service account token has been invalidated")
	// Recreated with a new UID.
	putObj(t, etcd.Client, "pods", &corev1.Pod{ObjectMeta: objMeta(saNamespace, saPod, "pod-uid-2")})
	tick()
	check("pod", "pod UID (pod-uid-2) does not match service account pod ref claim (pod-uid-1)")
	// The Secret of the legacy token and of the secret-bound token.
	del(t, etcd.Client, "/registry/secrets/apps/reader-token")
	tick()
	check("legacy", "Token has been invalidated")
	check("secret", "service account token has been invalidated")
	// The ServiceAccount recreated with another UID.
	putObj(t, etcd.Client, "serviceaccounts", &corev1.ServiceAccount{ObjectMeta: objMeta(saNamespace, saName, "sa-uid-2")})
	tick()
	check("unbound", "service account UID (sa-uid-2) does not match claim (sa-uid-1)")
}

// TestServiceAccountLegacyNoLookup: with --service-account-lookup=false a
// legacy token is accepted without its Secret, as kube-apiserver.
func TestServiceAccountLegacyNoLookup(t *testing.T) {
	etcd := etcdtest.Start(t)
	toks := saTokens(t)
	keys, err := keyutil.PublicKeysFromFile("testdata/sa.key")
	if err != nil {
		t.Fatal(err)
	}
	v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{Keys: keys, Lookup: etcdLookup{etcd.Client}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := authn.New(authn.Config{ServiceAccounts: v})
	if u, err := a.Authenticate([]byte("Bearer "+toks["legacy"]), nil); err != nil || u.Name != "system:serviceaccount:apps:reader" {
		t.Errorf("legacy without lookup: %v, %v", u, err)
	}
	// No --service-account-issuer: bound tokens are not ours.
	if _, err := a.Authenticate([]byte("Bearer "+toks["pod"]), nil); !errors.Is(err, authn.ErrInvalidToken) {
		t.Errorf("bound token without issuer: %v", err)
	}
}

// FuzzServiceAccountToken feeds arbitrary bearer tokens to the service
// account verifier: it must refuse them without panicking (the seeds
// include real tokens and their mutations).
func FuzzServiceAccountToken(f *testing.F) {
	toks := saTokens(f)
	for _, tok := range toks {
		f.Add(tok)
		f.Add(tok[:len(tok)/2])
		parts := strings.Split(tok, ".")
		f.Add(parts[0] + "." + parts[1] + ".")
		f.Add("e30." + parts[1] + "." + parts[2])
	}
	f.Add("{}")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.")
	keys, err := keyutil.PublicKeysFromFile("testdata/sa.key")
	if err != nil {
		f.Fatal(err)
	}
	// A lookup that finds nothing: no etcd in a fuzz loop.
	v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{Keys: keys, Issuers: []string{saIssuer},
		LookupLegacy: true, Lookup: emptyLookup{}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	a := authn.New(authn.Config{ServiceAccounts: v})
	f.Fuzz(func(t *testing.T, tok string) {
		u, err := a.Authenticate([]byte("Bearer "+tok), nil)
		if err == nil {
			t.Fatalf("token %q accepted as %+v with no bound objects", tok, u)
		}
		if !errors.Is(err, authn.ErrInvalidToken) && !errors.Is(err, authn.ErrNoCredentials) {
			t.Fatalf("token %q: %v", tok, err)
		}
	})
}

type emptyLookup struct{}

func (emptyLookup) Get(context.Context, string) ([]byte, bool, error) { return nil, false, nil }

// TestServiceAccountForgedTokensNotRetained: forged tokens of a public
// issuer (a valid-looking JWS signed by another key, 0.5 MB each) are
// refused and leave nothing of themselves in the verifier. The cache keyed
// failures by the whole token: 1,500 such tokens held 1 GB (issue 23).
func TestServiceAccountForgedTokensNotRetained(t *testing.T) {
	toks := saTokens(t)
	keys, err := keyutil.PublicKeysFromFile("testdata/sa.key")
	if err != nil {
		t.Fatal(err)
	}
	v, err := authn.NewServiceAccountVerifier(authn.ServiceAccounts{Keys: keys, Issuers: []string{saIssuer},
		LookupLegacy: true, Lookup: emptyLookup{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := authn.New(authn.Config{ServiceAccounts: v})
	// A real token's header and signature around a 0.5 MB payload of the
	// public issuer: parsed, then refused for its signature.
	parts := strings.Split(toks["pod"], ".")
	const n = 64
	for i := range n {
		payload := fmt.Sprintf(`{"iss":%q,"sub":"forged-%d","pad":%q}`, saIssuer, i, strings.Repeat("x", 512<<10))
		tok := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + parts[2]
		if _, err := a.Authenticate([]byte("Bearer "+tok), nil); !errors.Is(err, authn.ErrInvalidToken) || !strings.Contains(err.Error(), "invalid signature") {
			t.Fatalf("forged token %d: %v; want an invalid signature", i, err)
		}
	}
	if entries, keyBytes := v.CacheRetained(); keyBytes > n*64 {
		t.Errorf("after %d forged 0.5 MB tokens the cache holds %d entries, %d bytes of keys; want no token bytes", n, entries, keyBytes)
	}
}
