package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

// TestTLSFlags: --tls-min-version and --tls-cipher-suites take
// kube-apiserver's names, a real TLS client below the version or with no
// allowed suite is refused, and a bad value is an error naming the flag.
func TestTLSFlags(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	tlsArgs := []string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	// handshake serves one TLS handshake with c's serving configuration
	// and returns the client's error.
	handshake := func(t *testing.T, c *Options, client *tls.Config) error {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			defer conn.Close()
			tc := tls.Server(conn, c.Serving.servingTLS)
			tc.SetDeadline(time.Now().Add(10 * time.Second)) //nolint:errcheck
			if tc.Handshake() == nil {
				tc.Write([]byte("x")) //nolint:errcheck
			}
		}()
		client.RootCAs, client.ServerName = pool, "localhost"
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	parse := func(t *testing.T, extra ...string) *Options {
		t.Helper()
		c, err := parseFlags(append(append([]string{}, tlsArgs...), extra...))
		if err != nil {
			t.Fatalf("parseFlags(%s) = %v", strings.Join(extra, " "), err)
		}
		return c
	}

	t.Run("default", func(t *testing.T) {
		c := parse(t)
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); err == nil {
			t.Error("TLS 1.1 client: handshake succeeded, want refused (default minimum TLS 1.2)")
		}
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12}); err != nil {
			t.Errorf("TLS 1.2 client: %v", err)
		}
	})
	t.Run("min version 1.3", func(t *testing.T) {
		c := parse(t, "--tls-min-version=VersionTLS13")
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12}); err == nil {
			t.Error("TLS 1.2 client: handshake succeeded, want refused with --tls-min-version=VersionTLS13")
		}
		if err := handshake(t, c, &tls.Config{MinVersion: tls.VersionTLS13}); err != nil {
			t.Errorf("TLS 1.3 client: %v", err)
		}
	})
	t.Run("cipher suites", func(t *testing.T) {
		// testpki keys are ECDSA.
		c := parse(t, "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384")
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305}}); err == nil {
			t.Error("TLS 1.2 client without the allowed suite: handshake succeeded, want refused")
		}
		if err := handshake(t, c, &tls.Config{MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}); err != nil {
			t.Errorf("TLS 1.2 client with the allowed suite: %v", err)
		}
		// kube-apiserver's legacy name is accepted too.
		c = parse(t, "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305, TLS_RSA_WITH_RC4_128_SHA")
		if got := c.Serving.insecureSuites(); len(got) != 1 || got[0] != "TLS_RSA_WITH_RC4_128_SHA" {
			t.Errorf("insecureSuites = %v, want the RC4 suite", got)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{append(tlsArgs[:3:3], "--tls-min-version=TLS13"), `--tls-min-version: "TLS13"`},
			{append(tlsArgs[:3:3], "--tls-min-version=VersionTLS14"), `--tls-min-version: "VersionTLS14"`},
			{append(tlsArgs[:3:3], "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,NOPE"), "--tls-cipher-suites: Cipher suite NOPE not supported"},
			{[]string{"--tls-min-version=VersionTLS13"}, "--tls-min-version: needs --secure-port"},
			{[]string{"--tls-cipher-suites=TLS_AES_128_GCM_SHA256"}, "--tls-cipher-suites: needs --secure-port"},
		} {
			_, err := parseFlags(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseFlags(%s) = %v, want an error with %q", strings.Join(tt.args, " "), err, tt.want)
			}
			if _, ok := err.(usageError); err != nil && !ok {
				t.Errorf("parseFlags(%s): %T is not a usage error (exit status 2)", strings.Join(tt.args, " "), err)
			}
		}
	})
}

// TestPlainPortRule: --port=0 turns the plain port off; with an
// authenticator it is off unless given, takes no bearer tokens unless
// --plain-port-tokens, and a command line that serves on no port is an
// error naming the flags.
func TestPlainPortRule(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok,alice,1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--secure-port=6443", "--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile}
	tok := "--token-auth-file=" + tokens
	with := func(extra ...string) []string { return append(append([]string{}, tlsArgs...), extra...) }
	for _, tt := range []struct {
		args        []string
		port        int
		plainTokens bool
	}{
		{nil, 8080, false},
		{with(), 8080, false},
		{with("--port=0"), 0, false},
		{with(tok), 0, false},
		{with("--client-ca-file=" + ca.File), 0, false},
		{with("--service-account-key-file=../../authn/testdata/sa.key"), 0, false},
		{with(tok, "--port=8081"), 8081, false},
		{with(tok, "--port=8081", "--plain-port-tokens"), 8081, true},
		{[]string{tok, "--port=8080"}, 8080, false},
	} {
		c, err := parseFlags(tt.args)
		if err != nil {
			t.Errorf("parseFlags(%s) = %v", strings.Join(tt.args, " "), err)
			continue
		}
		if c.Serving.port != tt.port || c.Serving.plainTokens != tt.plainTokens {
			t.Errorf("parseFlags(%s): port %d, plain tokens %v; want %d, %v", strings.Join(tt.args, " "), c.Serving.port, c.Serving.plainTokens, tt.port, tt.plainTokens)
		}
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--port=0"}, "nothing to serve on: --port and --secure-port are both 0"},
		{[]string{tok}, "nothing to serve on: with an authenticator --port is off unless given; add --secure-port"},
		{with(tok, "--plain-port-tokens"), "--plain-port-tokens: needs --port"},
		{with("--port=6443"), "--secure-port: 6443: --port is the same port"},
	} {
		_, err := parseFlags(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%s) = %v, want an error with %q", strings.Join(tt.args, " "), err, tt.want)
		}
		if _, ok := err.(usageError); err != nil && !ok {
			t.Errorf("parseFlags(%s): %T is not a usage error", strings.Join(tt.args, " "), err)
		}
	}
}

// freePortFlag returns --port with a loopback port that was free a moment
// ago (--port=0 turns the plain port off).
func freePortFlag(t *testing.T) string {
	t.Helper()
	return "--port=" + strconv.Itoa(freePort(t))
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestRunPlainPortCredentials runs lazyapi with TLS and a token file: the
// plain port is off unless given; given, a valid token sent to it is
// refused 401 and /debug/pprof/cmdline does not answer over it, while
// both answer over TLS (issue 23, finding 8).
func TestRunPlainPortCredentials(t *testing.T) {
	etcd := etcdtest.Start(t)
	ca := testpki.NewCA(t, "ca")
	srv := ca.Server(t)
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok,alice,1,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(url string) int {
		t.Helper()
		req, err := http.NewRequest("GET", url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck
		return resp.StatusCode
	}
	start := func(extra ...string) (*logSink, string, func()) {
		t.Helper()
		securePort := freePort(t)
		args := append([]string{"--etcd-servers=" + etcd.Endpoint, "--secure-port=" + strconv.Itoa(securePort),
			"--tls-cert-file=" + srv.CertFile, "--tls-private-key-file=" + srv.KeyFile, "--token-auth-file=" + tokens,
			"--profiling", "--watch-cache=false", "--logging-format=json"}, extra...)
		r := startServing(t, io.Discard, args...)
		url, sink := r.url, r.sink
		stop := func() {
			if err := r.stop(); err != nil {
				t.Errorf("run after cancel = %v", err)
			}
		}
		return sink, url + "|https://127.0.0.1:" + strconv.Itoa(securePort), stop
	}

	sink, urls, stop := start()
	plain, secure, _ := strings.Cut(urls, "|")
	if plain != "" || !strings.Contains(sink.String(), `"plainPort":"off`) {
		t.Errorf("with a token file and no --port: serving url %q, log:\n%s\nwant the plain port off", plain, sink)
	}
	if code := get(secure + "/debug/pprof/cmdline"); code != 200 {
		t.Errorf("TLS: /debug/pprof/cmdline with a token = %d, want 200", code)
	}
	stop()

	sink, urls, stop = start(freePortFlag(t))
	defer stop()
	plain, secure, _ = strings.Cut(urls, "|")
	if plain == "" || !strings.Contains(sink.String(), `"plainPortCredentials":"refused`) {
		t.Fatalf("with --port: serving url %q, log:\n%s", plain, sink)
	}
	for _, tt := range []struct {
		url  string
		want int
	}{
		{plain + "/api/v1/namespaces/ns/configmaps", 401},
		{plain + "/debug/pprof/cmdline", 401},
		{plain + "/livez", 200},
		{secure + "/api/v1/namespaces/ns/configmaps", 200},
	} {
		if code := get(tt.url); code != tt.want {
			t.Errorf("GET %s with a valid token = %d, want %d", tt.url, code, tt.want)
		}
	}
}

// TestRunAuditLog runs lazyapi with --audit-log-path: an allowed and a
// forbidden request (received and completed) are in the file when run returns, as audit.k8s.io/v1
// Events; bad audit flags are usage errors naming the flag.
func TestRunAuditLog(t *testing.T) {
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte("tok-admin,admin,1,system:masters\ntok-bob,bob,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit", "audit.log")
	args := []string{"--etcd-servers=" + etcd.Endpoint, freePortFlag(t), "--plain-port-tokens", "--token-auth-file=" + tokens,
		"--audit-log-path=" + logPath, "--watch-cache=false"}
	r := startServing(t, io.Discard, args...)
	url := r.url
	for _, c := range []struct {
		token string
		want  int
	}{{"tok-admin", 200}, {"tok-bob", 403}} {
		req, _ := http.NewRequest("GET", url+"/api/v1/namespaces/ns/secrets", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("GET secrets as %s = %d, want %d", c.token, resp.StatusCode, c.want)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatalf("run after cancel = %v", err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Each request's RequestReceived event (the default policy omits no
	// stage, as kube-apiserver's Metadata policy), then its ResponseComplete.
	var lines []string
	for l := range strings.Lines(strings.TrimSpace(string(data))) {
		if !strings.Contains(l, `"stage":"RequestReceived"`) {
			lines = append(lines, strings.TrimSpace(l))
		}
	}
	if len(lines) != 2 || strings.Count(string(data), `"stage":"RequestReceived"`) != 2 || strings.Contains(string(data), "tok-") {
		t.Fatalf("audit log:\n%s\nwant 2 RequestReceived and 2 ResponseComplete events and no token", data)
	}
	for i, want := range []struct {
		user, decision string
		code           int32
	}{{"admin", "allow", 200}, {"bob", "forbid", 403}} {
		var ev auditv1.Event
		dec := json.NewDecoder(strings.NewReader(lines[i]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, lines[i])
		}
		if ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" || ev.User.Username != want.user || ev.ResponseStatus.Code != want.code ||
			ev.Annotations["authorization.k8s.io/decision"] != want.decision || ev.ObjectRef == nil || ev.ObjectRef.Resource != "secrets" {
			t.Errorf("event %d: %s", i, lines[i])
		}
	}

	bad := filepath.Join(dir, "bad-policy.yaml")
	if err := os.WriteFile(bad, []byte("kind: Policy\napiVersion: audit.k8s.io/v1\nrules: [{level: Everything}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-log-path=" + logPath, "--audit-policy-file=" + bad}, "--audit-policy-file: "},
		{[]string{"--audit-policy-file=" + bad}, "--audit-policy-file: needs --audit-log-path"},
		{[]string{"--audit-log-path=" + logPath, "--audit-log-maxsize=-1"}, "--audit-log-maxsize: -1"},
		{[]string{"--audit-log-path=" + logPath, "--audit-log-format=legacy"}, `--audit-log-format: "legacy"`},
		{[]string{"--audit-log-path=" + logPath, "--audit-log-version=audit.k8s.io/v1beta1"}, `--audit-log-version: `},
	} {
		_, err := parseFlags(tt.args)
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%s) = %v, want a usage error with %q", strings.Join(tt.args, " "), err, tt.want)
		}
	}
}
