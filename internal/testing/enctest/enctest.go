// Package enctest writes values the way kube-apiserver encrypts them at
// rest, for tests and benchmarks: an EncryptionConfiguration file loaded by
// k8s.io/apiserver's own loader and its transformers' TransformToStorage
// (the oracle lazyapi's decryption is checked against).
package enctest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// Key returns a deterministic base64 secret of n bytes named name.
func Key(name string, n int) string {
	var b []byte
	for i := 0; len(b) < n; i++ {
		s := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", name, i)))
		b = append(b, s[:]...)
	}
	return base64.StdEncoding.EncodeToString(b[:n])
}

// Provider returns the YAML of one provider entry ("- aescbc: ..."),
// indented for a providers list, with keys named keyNames (secrets from
// Key). kind is aescbc, aesgcm, secretbox, identity, or kms (then
// keyNames[0] is the provider name and endpoint the plugin's).
func Provider(kind, endpoint string, keyNames ...string) string {
	var b strings.Builder
	switch kind {
	case "identity":
		return "      - identity: {}\n"
	case "kms":
		fmt.Fprintf(&b, "      - kms:\n          apiVersion: v2\n          name: %s\n          endpoint: %s\n          timeout: 3s\n", keyNames[0], endpoint)
		return b.String()
	}
	n := 32
	fmt.Fprintf(&b, "      - %s:\n          keys:\n", kind)
	for _, k := range keyNames {
		fmt.Fprintf(&b, "            - name: %s\n              secret: %s\n", k, Key(kind+"/"+k, n))
	}
	return b.String()
}

// Config returns an EncryptionConfiguration: one rule per element, each
// "resources" (comma-separated) -> providers (Provider outputs joined).
func Config(rules ...Rule) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n")
	for _, r := range rules {
		b.WriteString("  - resources:\n")
		for _, res := range strings.Split(r.Resources, ",") {
			fmt.Fprintf(&b, "      - %q\n", res)
		}
		b.WriteString("    providers:\n")
		for _, p := range r.Providers {
			b.WriteString(p)
		}
	}
	return b.String()
}

// Rule is one resources entry of Config.
type Rule struct {
	Resources string   // "secrets,configmaps", "*.apps", "*.*"
	Providers []string // Provider outputs, first one writes
}

// WriteFile writes content to dir/name and returns its path.
func WriteFile(dir, name, content string) (string, error) {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// Writer encrypts values as kube-apiserver with one configuration.
type Writer struct {
	tr     encryptionconfig.StaticTransformers
	cancel context.CancelFunc
}

// NewWriter loads the configuration in file with k8s.io/apiserver's loader.
// Names of KMS providers must differ between the writers and readers of one
// process only when KDF settings differ; the default (KDF on) is kept.
func NewWriter(file string) (*Writer, error) {
	ctx, cancel := context.WithCancel(context.Background())
	ec, err := encryptionconfig.LoadEncryptionConfig(ctx, file, false, "enctest-writer")
	if err != nil {
		cancel()
		return nil, err
	}
	return &Writer{tr: ec.Transformers, cancel: cancel}, nil
}

// Close releases the writer's KMS connections.
func (w *Writer) Close() { w.cancel() }

// Encrypt returns what kube-apiserver stores in etcd under key for
// plaintext of resource ("resource[.group]").
func (w *Writer) Encrypt(resource, key string, plaintext []byte) ([]byte, error) {
	t := w.tr.TransformerForResource(schema.ParseGroupResource(resource))
	return t.TransformToStorage(context.Background(), plaintext, value.DefaultContext(key))
}
