package authn_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/authn"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want authn.Tokens
	}{
		{"three columns", "tok1,alice,uid-1\n", authn.Tokens{"tok1": {Name: "alice", UID: "uid-1", Method: "token"}}},
		{"quoted groups", "tok2,bob,uid-2,\"g1,g2\"\n", authn.Tokens{"tok2": {Name: "bob", UID: "uid-2", Groups: []string{"g1", "g2"}, Method: "token"}}},
		{"one group, extra columns", "tok3,carol,,ops,extra\n", authn.Tokens{"tok3": {Name: "carol", Groups: []string{"ops"}, Method: "token"}}},
		{"empty token skipped", ",dave,uid\ntok4,erin,uid-4", authn.Tokens{"tok4": {Name: "erin", UID: "uid-4", Method: "token"}}},
		{"duplicate keeps the last", "t,a,1\nt,b,2\n", authn.Tokens{"t": {Name: "b", UID: "2", Method: "token"}}},
		{"empty file", "", authn.Tokens{}},
		{"CRLF", "t,a,1\r\n", authn.Tokens{"t": {Name: "a", UID: "1", Method: "token"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := authn.ParseTokens([]byte(tt.in), "tokens.csv")
			if err != nil {
				t.Fatalf("ParseTokens(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseTokens(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseTokensErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"secret-a,alice,1\nsecret-b,bob\n", "tokens.csv: line 2: must have at least 3 columns (token, user name, user uid), found 2"},
		{"secret-a\n", "line 1: must have at least 3 columns"},
		{"secret-a,alice,1\nsecret-b,\"bob,1\n", "tokens.csv: line 2, column"},
		{"secret-a,al\"ice,1\n", "line 1, column"},
	}
	for _, tt := range tests {
		_, err := authn.ParseTokens([]byte(tt.in), "tokens.csv")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseTokens(%q) error = %v, want it to contain %q", tt.in, err, tt.want)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseTokens(%q) error %q shows a token", tt.in, err)
		}
	}
}

func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(path, []byte("tok,alice,1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := authn.LoadTokenFile(path); err != nil || tok["tok"].Name != "alice" {
		t.Errorf("LoadTokenFile = %v, %v", tok, err)
	}
	if _, err := authn.LoadTokenFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("LoadTokenFile(missing): no error")
	}
	if _, err := authn.LoadClientCAFile(path); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("LoadClientCAFile(not PEM) error = %v", err)
	}
	ca := testpki.NewCA(t, "ca")
	pool, err := authn.LoadClientCAFile(ca.File)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Client(t, "u").Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client cert does not verify against the loaded pool: %v", err)
	}
}

func TestAuthenticate(t *testing.T) {
	ca := testpki.NewCA(t, "client-ca")
	other := testpki.NewCA(t, "other-ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tokens := authn.Tokens{"good": {Name: "alice", UID: "1", Groups: []string{"g"}, Method: "token"}}
	alice := ca.Client(t, "alice-cert", "team-a", "team-b")
	noCN := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{Organization: []string{"o"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Hour)
	serverOnly := ca.Server(t)
	chain := func(c *testpki.Cert) []*x509.Certificate { return []*x509.Certificate{c.Cert} }

	tests := []struct {
		name      string
		anonymous bool
		header    string
		certs     []*x509.Certificate
		wantUser  string
		wantErr   error
	}{
		{"token", false, "Bearer good", nil, "alice", nil},
		{"token, scheme case and spaces", false, "  bearer good  ", nil, "alice", nil},
		{"wrong token", false, "Bearer bad", nil, "", authn.ErrInvalidToken},
		{"wrong token, anonymous on", true, "Bearer bad", nil, "", authn.ErrInvalidToken},
		{"no credentials", false, "", nil, "", authn.ErrNoCredentials},
		{"no credentials, anonymous on", true, "", nil, "system:anonymous", nil},
		{"basic auth is no credentials", false, "Basic YTpi", nil, "", authn.ErrNoCredentials},
		{"empty bearer is no credentials", true, "Bearer ", nil, "system:anonymous", nil},
		{"certificate", false, "", chain(alice), "alice-cert", nil},
		{"certificate wins over token", false, "Bearer good", chain(alice), "alice-cert", nil},
		{"certificate of another CA", true, "", chain(other.Client(t, "mallory")), "", authn.ErrInvalidCertificate},
		{"certificate of another CA, good token", false, "Bearer good", chain(other.Client(t, "mallory")), "alice", nil},
		{"expired certificate", false, "", chain(ca.Expired(t, "old")), "", authn.ErrInvalidCertificate},
		{"server certificate", false, "", chain(serverOnly), "", authn.ErrInvalidCertificate},
		{"certificate without CN", false, "", chain(noCN), "", authn.ErrNoCredentials},
		{"certificate without CN, anonymous on", true, "", chain(noCN), "system:anonymous", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := authn.New(authn.Config{ClientCAs: pool, Tokens: tokens, Anonymous: tt.anonymous})
			for range 2 { // the second time from the certificate cache
				u, err := a.Authenticate([]byte(tt.header), tt.certs)
				if tt.wantErr != nil {
					if !errors.Is(err, tt.wantErr) {
						t.Fatalf("Authenticate(%q) = %v, %v; want error %v", tt.header, u, err, tt.wantErr)
					}
					continue
				}
				if err != nil || u.Name != tt.wantUser {
					t.Fatalf("Authenticate(%q) = %v, %v; want user %q", tt.header, u, err, tt.wantUser)
				}
			}
		})
	}

	a := authn.New(authn.Config{ClientCAs: pool})
	u, err := a.Authenticate(nil, chain(alice))
	if err != nil || !reflect.DeepEqual(u, &authn.User{Name: "alice-cert", Groups: []string{"team-a", "team-b", "system:authenticated"}, Method: "x509"}) {
		t.Errorf("certificate user = %+v, %v; want CN as name and O as groups", u, err)
	}
	if u, err := a.Authenticate([]byte("Bearer good"), nil); !errors.Is(err, authn.ErrNoCredentials) {
		t.Errorf("token without --token-auth-file = %v, %v; want ErrNoCredentials", u, err)
	}
}

// TestCertCacheExpiry: a certificate remembered as verified stops
// authenticating when it expires.
func TestCertCacheExpiry(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "short"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, time.Minute)
	now := time.Now()
	a := authn.New(authn.Config{ClientCAs: pool, Now: func() time.Time { return now }})
	if _, err := a.Authenticate(nil, []*x509.Certificate{c.Cert}); err != nil {
		t.Fatalf("valid certificate: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if u, err := a.Authenticate(nil, []*x509.Certificate{c.Cert}); !errors.Is(err, authn.ErrInvalidCertificate) {
		t.Errorf("after expiry = %v, %v; want ErrInvalidCertificate", u, err)
	}
}

func TestEnabled(t *testing.T) {
	var nilA *authn.Authenticator
	if nilA.Enabled() || authn.New(authn.Config{Anonymous: true}).Enabled() {
		t.Error("Enabled without authenticators = true")
	}
	if !authn.New(authn.Config{Tokens: authn.Tokens{}}).Enabled() {
		t.Error("Enabled with tokens = false")
	}
}

func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{
		"tok,alice,1\n", "tok,bob,2,\"g1,g2\"\n", ",empty,1\n", "a,b\n", "\"unterminated,b,c\n",
		"t,a,1\r\nu,b,2,g,extra\n", "x,\"y\"\"z\",1\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tokens, err := authn.ParseTokens(b, "fuzz.csv")
		if err != nil {
			if tokens != nil {
				t.Fatalf("ParseTokens error %v with tokens %v", err, tokens)
			}
			return
		}
		for tok, u := range tokens {
			if tok == "" || u == nil || u.Method != "token" {
				t.Fatalf("ParseTokens: entry %q -> %+v", tok, u)
			}
			a := authn.New(authn.Config{Tokens: tokens})
			if strings.TrimSpace(tok) != tok || strings.Contains(tok, " ") {
				continue // not sendable as one bearer token (kube-apiserver trims and splits too)
			}
			got, err := a.Authenticate([]byte("Bearer "+tok), nil)
			if err != nil || got.Name != u.Name || got.UID != u.UID || !slices.Equal(got.Groups, authenticatedGroups(u.Name, u.Groups)) {
				t.Fatalf("Authenticate(token %q) = %v, %v; want %v with system:authenticated", tok, got, err, u)
			}
		}
	})
}

// authenticatedGroups is groups as kube-apiserver's AuthenticatedGroupAdder
// leaves them for a user that is not system:anonymous.
func authenticatedGroups(name string, groups []string) []string {
	if name == "system:anonymous" || slices.Contains(groups, "system:authenticated") || slices.Contains(groups, "system:unauthenticated") {
		return groups
	}
	return append(slices.Clone(groups), "system:authenticated")
}
