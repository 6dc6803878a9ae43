package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lazyapi/lazyapi/forward"
	"github.com/lazyapi/lazyapi/internal/testing/testpki"
)

func writeUpstreamKubeconfig(t *testing.T, user string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "upstream.kubeconfig")
	body := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: k, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: %s}]
contexts: [{name: k, context: {cluster: k, user: u}}]
current-context: k
`, user)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestForwardFlags: --upstream-kubeconfig is loaded at start (a missing
// file, a token instead of the front-proxy certificate: errors naming
// the flag), its reserve comes out of the derived in-flight budget, and
// --help has the section.
func TestForwardFlags(t *testing.T) {
	ca := testpki.NewCA(t, "front-proxy-ca")
	cert := ca.Client(t, "front-proxy-client")
	good := writeUpstreamKubeconfig(t, fmt.Sprintf("{client-certificate: %q, client-key: %q}", cert.CertFile, cert.KeyFile))
	for name, args := range map[string][]string{
		"missing":  {"--upstream-kubeconfig", filepath.Join(t.TempDir(), "none")},
		"token":    {"--upstream-kubeconfig", writeUpstreamKubeconfig(t, "{token: secret-token}")},
		"streams0": {"--upstream-kubeconfig", good, "--max-forwarded-streams-inflight", "0"},
	} {
		_, err := parseFlags(args)
		if err == nil || !strings.Contains(err.Error(), "--") || strings.Contains(err.Error(), "secret-token") {
			t.Errorf("%s: parseFlags = %v, want an error naming the flag (and no token)", name, err)
		}
	}
	readOnly, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"--upstream-kubeconfig", good})
	if err != nil {
		t.Fatalf("parseFlags(good) = %v", err)
	}
	if !o.Forward.on() || o.Forward.upstream.String() != "https://127.0.0.1:6443" {
		t.Fatalf("forwarding %v to %v", o.Forward.on(), o.Forward.upstream)
	}
	a, _ := readOnly.inflightBytes()
	b, _ := o.inflightBytes()
	if want := int64(o.Forward.maxShort+o.Forward.maxStreams) * forward.DefaultReservedBytes; a-b != want || want > a/4 {
		t.Errorf("derived in-flight bytes %d read-only, %d forwarding: differ by %d, want the forward reserve %d", a, b, a-b, want)
	}
	if !strings.Contains(strings.ToLower(o.usage(100)), "forwarding to kube-apiserver flags:") {
		t.Error("--help has no forwarding section")
	}
}
