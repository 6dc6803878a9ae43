// Command sagen mints the service account tokens of lazyapi's token tests
// (authn TestServiceAccountTokens, e2e TestServiceAccountE2E) with
// kube-apiserver v1.37's own code: serviceaccount.JWTTokenGenerator over
// serviceaccount.Claims (bound tokens) and serviceaccount.LegacyClaims
// (Secret-based tokens). It writes the signing key (sa.key), a second,
// unrelated key (other.key) and the tokens (sa-tokens.json). Tokens that
// should verify expire in 100 years; "expired" expired an hour after it
// was minted. Run from the module directory:
//
//	GOFLAGS=-mod=mod GOPROXY=off go run ./sagen ../../../authn/testdata
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// The objects the tokens are bound to; the tests store them in etcd with
// these names and UIDs.
const (
	Issuer    = "https://kubernetes.default.svc.cluster.local"
	Namespace = "apps"
	SAName    = "reader"
	SAUID     = "sa-uid-1"
	PodName   = "reader-pod"
	PodUID    = "pod-uid-1"
	Secret    = "reader-token"
	SecretUID = "secret-uid-1"
	NodeName  = "node-1"
	NodeUID   = "node-uid-1"
)

const century = 100 * 365 * 24 * 3600

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "sagen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	der, _ := x509.MarshalECPrivateKey(other)
	if err := os.WriteFile(filepath.Join(dir, "other.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	sa := core.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: SAName, UID: SAUID}}
	pod := &core.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: PodName, UID: PodUID}, Spec: core.PodSpec{NodeName: NodeName}}
	oldPod := &core.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: PodName, UID: "pod-uid-0"}}
	secret := &core.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Secret, UID: SecretUID}}
	node := &core.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName, UID: NodeUID}}

	tokens := map[string]string{}
	mint := func(name, iss string, signer any, pod *core.Pod, secret *core.Secret, node *core.Node, exp int64, aud []string) error {
		gen, err := serviceaccount.JWTTokenGenerator(iss, signer)
		if err != nil {
			return err
		}
		pub, priv, err := serviceaccount.Claims(sa, pod, secret, node, nil, nil, exp, 0, aud, nil)
		if err != nil {
			return err
		}
		tok, err := gen.GenerateToken(nil, pub, priv)
		if err != nil {
			return err
		}
		tokens[name] = tok
		return nil
	}
	aud := []string{Issuer}
	for _, m := range []struct {
		name   string
		iss    string
		signer any
		pod    *core.Pod
		secret *core.Secret
		node   *core.Node
		exp    int64
		aud    []string
	}{
		{"pod", Issuer, key, pod, nil, node, century, aud},
		{"secret", Issuer, key, nil, secret, nil, century, aud},
		{"node", Issuer, key, nil, nil, node, century, aud},
		{"unbound", Issuer, key, nil, nil, nil, century, aud},
		{"pod-other-uid", Issuer, key, oldPod, nil, nil, century, aud},
		{"expired", Issuer, key, pod, nil, nil, -3600, aud},
		{"wrong-issuer", "https://other.example.com", key, pod, nil, nil, century, aud},
		{"wrong-audience", Issuer, key, pod, nil, nil, century, []string{"https://vault.example.com"}},
		{"two-audiences", Issuer, key, pod, nil, nil, century, []string{"https://vault.example.com", Issuer}},
		{"wrong-key", Issuer, other, pod, nil, nil, century, aud},
	} {
		if err := mint(m.name, m.iss, m.signer, m.pod, m.secret, m.node, m.exp, m.aud); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
	// A legacy token, as the token controller minted them into Secrets.
	gen, err := serviceaccount.JWTTokenGenerator(serviceaccount.LegacyIssuer, key)
	if err != nil {
		return err
	}
	v1sa := corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: SAName, UID: SAUID}}
	v1secret := corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Secret, UID: SecretUID}}
	pub, priv := serviceaccount.LegacyClaims(v1sa, v1secret)
	if tokens["legacy"], err = gen.GenerateToken(nil, pub, priv); err != nil {
		return err
	}
	b, err := json.MarshalIndent(tokens, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa-tokens.json"), append(b, '\n'), 0o644)
}
