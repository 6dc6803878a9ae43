package main

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

func TestParseFlagsServing(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok-1,alice,uid-1,\"a,b\"\ntok-2,bob,uid-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := parseFlags([]string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile,
		"--client-ca-file=" + ca.File, "--token-auth-file=" + tokens})
	if err != nil {
		t.Fatalf("parseFlags = %v", err)
	}
	s := c.Serving
	if s.securePort != 6443 || s.servingTLS == nil || s.servingTLS.GetConfigForClient == nil || s.servingTLS.MinVersion != tls.VersionTLS12 {
		t.Fatalf("serving TLS = %+v", s.servingTLS)
	}
	// The configuration each handshake gets: the certificate and client
	// CAs in force (reloaded on change, internal/certfile).
	cur, err := s.servingTLS.GetConfigForClient(nil)
	if err != nil || cur.GetCertificate == nil || cur.ClientAuth != tls.RequestClientCert || cur.ClientCAs == nil || cur.MinVersion != tls.VersionTLS12 {
		t.Errorf("serving TLS per handshake = %+v, %v", cur, err)
	} else if cert, _ := cur.GetCertificate(nil); cert == nil || cert.Leaf == nil || !cert.Leaf.Equal(srv.Cert) {
		t.Errorf("serving certificate = %v, want %s", cert, srv.CertFile)
	}
	if s.authn.ClientCAs == nil || len(s.authn.Tokens) != 2 || s.authn.Tokens["tok-1"].Name != "alice" || s.authn.Anonymous {
		t.Errorf("authn config = %+v, want client CAs, 2 tokens, no anonymous", s.authn)
	}
	if got := strings.Join(s.authMethods(), ","); got != "x509,token (2 tokens)" {
		t.Errorf("authMethods = %q", got)
	}

	c, err = parseFlags([]string{"--token-auth-file=" + tokens, "--anonymous-auth=true", "--port=8080"})
	if err != nil || c.Serving.servingTLS != nil || !c.Serving.authn.Anonymous || c.Serving.authn.ClientCAs != nil {
		t.Errorf("tokens without TLS, anonymous: %+v, %v", c.Serving, err)
	}
	c, err = parseFlags(nil)
	if err != nil || c.Serving.securePort != 0 || c.Serving.authn.Tokens != nil || c.Serving.anonymousAuth {
		t.Errorf("defaults: %+v, %v; want no HTTPS, no authentication, --anonymous-auth=false", c.Serving, err)
	}
}

func TestParseFlagsServingErrors(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	badTokens := write("bad.csv", "secret-1,alice,uid\nsecret-2,bob\n")
	notPEM := write("not.pem", "hello")
	goodTokens := write("good.csv", "secret-1,alice,uid\n")
	missing := filepath.Join(dir, "missing")
	tlsArgs := []string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}
	with := func(extra ...string) []string { return append(append([]string{}, tlsArgs...), extra...) }
	checkFlagErrors(t, []flagErrorCase{
		{[]string{"--secure-port=70000"}, "--secure-port: 70000"},
		{append(tlsArgs[1:3:3], "--secure-port=8080"), "--secure-port: 8080: --port"},
		{[]string{"--secure-port=6443"}, "--secure-port: needs --tls-cert-file"},
		{[]string{"--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}, "--tls-cert-file: needs --secure-port"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile}, "--tls-private-key-file: needed with --tls-cert-file"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + missing, "--tls-private-key-file=" + srv.KeyFile}, "--tls-cert-file: cannot read"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + missing}, "--tls-private-key-file: cannot read"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + ca.Client(t, "x").KeyFile}, "--tls-cert-file/--tls-private-key-file"},
		{[]string{"--secure-port=6443", "--tls-cert-file=" + notPEM, "--tls-private-key-file=" + srv.KeyFile}, "--tls-cert-file/--tls-private-key-file"},
		{[]string{"--client-ca-file=" + ca.File}, "--client-ca-file: needs --secure-port"},
		{with("--client-ca-file=" + missing), "--client-ca-file: "},
		{with("--client-ca-file=" + notPEM), "--client-ca-file: "},
		{[]string{"--token-auth-file=" + missing}, "--token-auth-file: "},
		{[]string{"--token-auth-file=" + badTokens}, "--token-auth-file: cannot parse token file " + badTokens + ": line 2"},
		{[]string{"--anonymous-auth=maybe"}, "--anonymous-auth"},
		{[]string{"--authorization-mode=RBAC"}, "--authorization-mode: RBAC needs an authenticator"},
		{[]string{"--service-account-issuer=https://x"}, "--service-account-issuer: needs --service-account-key-file"},
		{[]string{"--api-audiences=a"}, "--api-audiences: needs --service-account-key-file"},
		{[]string{"--service-account-key-file=" + notPEM}, "--service-account-key-file: "},
		{[]string{"--service-account-key-file=" + missing}, "--service-account-key-file: "},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=RBAC,Magic"}, `--authorization-mode: unknown mode "Magic"`},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=Node,RBAC"}, `--authorization-mode: mode "Node" is not supported`},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=RBAC,RBAC"}, `--authorization-mode: mode "RBAC" is given twice`},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=RBAC,"}, `--authorization-mode: empty mode`},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=RBAC,Webhook"}, "--authorization-mode: RBAC,Webhook needs --authorization-kubeconfig or --authorization-webhook-config-file"},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-kubeconfig=" + goodTokens}, "--authorization-kubeconfig: is used by --authorization-mode Webhook only: add it"},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=RBAC", "--authorization-webhook-config-file=" + goodTokens}, "--authorization-webhook-config-file: is used by --authorization-mode Webhook only"},
		{[]string{"--token-auth-file=" + goodTokens, "--authorization-mode=Webhook", "--authorization-kubeconfig=" + missing}, "--authorization-kubeconfig: cannot read"},
		{[]string{"--authorization-kubeconfig=" + goodTokens, "--authorization-webhook-config-file=" + goodTokens}, "--authorization-kubeconfig: cannot be given with --authorization-webhook-config-file"},
		{[]string{"--authentication-kubeconfig=" + goodTokens, "--authentication-token-webhook-config-file=" + goodTokens}, "--authentication-kubeconfig: cannot be given with --authentication-token-webhook-config-file"},
		{[]string{"--authentication-token-webhook-config-file=" + missing}, "--authentication-token-webhook-config-file: cannot read"},
		{[]string{"--authentication-token-webhook-version=v2"}, `--authentication-token-webhook-version: "v2"`},
		{[]string{"--authorization-webhook-version=v1alpha1"}, `--authorization-webhook-version: "v1alpha1"`},
		{[]string{"--authentication-token-webhook-cache-ttl=-1s"}, "--authentication-token-webhook-cache-ttl: -1s"},
		{[]string{"--authorization-webhook-cache-unauthorized-ttl=-1s"}, "--authorization-webhook-cache-unauthorized-ttl: -1s"},
	})
}

func TestParseFlagsAuthorizationMode(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok,alice,1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--authorization-mode=AlwaysAllow"}, ""},
		{[]string{"--token-auth-file=" + tokens}, "RBAC"},
		{[]string{"--token-auth-file=" + tokens, "--authorization-mode=AlwaysDeny, RBAC"}, "AlwaysDeny,RBAC"},
		{[]string{"--token-auth-file=" + tokens, "--authorization-mode=AlwaysAllow"}, "AlwaysAllow"},
		{[]string{"--service-account-key-file=../../authn/testdata/sa.key", "--service-account-issuer=https://a", "--service-account-issuer=https://b"}, "RBAC"},
		// A TokenReview is an authenticator too.
		{[]string{"--authentication-kubeconfig=" + tokens}, "RBAC"},
		{[]string{"--authentication-kubeconfig=" + tokens, "--authorization-mode=RBAC,Webhook", "--authorization-kubeconfig=" + tokens}, "RBAC,Webhook"},
		{[]string{"--token-auth-file=" + tokens, "--authorization-mode=Webhook", "--authorization-webhook-config-file=" + tokens}, "Webhook"},
	} {
		c, err := parseFlags(append(tt.args, "--port=8080"))
		if err != nil {
			t.Fatalf("parseFlags(%q) = %v", tt.args, err)
		}
		if got := strings.Join(c.Serving.modes, ","); got != tt.want {
			t.Errorf("parseFlags(%q): modes %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestStartHint(t *testing.T) {
	for _, tt := range []struct {
		secure  string
		methods []string
		want    string
	}{
		{"", nil, "try: kubectl --server http://127.0.0.1:8080 get configmaps -A\n"},
		{"https://127.0.0.1:6443", []string{"token (1 tokens)"}, "try: kubectl --server https://127.0.0.1:6443 --certificate-authority=<CA of --tls-cert-file> --token=<token> get configmaps -A\n"},
		{"", []string{"token (1 tokens)"}, "note: authentication is on and kubectl sends no credentials over plain HTTP (http://127.0.0.1:8080 answers it 401): add --secure-port with --tls-cert-file and --tls-private-key-file\n"},
	} {
		if got := startHint("http://127.0.0.1:8080", tt.secure, tt.methods); got != tt.want {
			t.Errorf("startHint(%q, %q) = %q, want %q", tt.secure, tt.methods, got, tt.want)
		}
	}
	// --port=0 without an authenticator: the TLS URL.
	if got, want := startHint("", "https://127.0.0.1:6443", nil), "try: kubectl --server https://127.0.0.1:6443 --certificate-authority=<CA of --tls-cert-file> get configmaps -A\n"; got != want {
		t.Errorf("startHint with the plain port off = %q, want %q", got, want)
	}
}
