package encryption_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/kmstest"
)

func writeConfig(t *testing.T, dir, name string, rules ...enctest.Rule) string {
	t.Helper()
	p, err := enctest.WriteFile(dir, name, enctest.Config(rules...))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newWriter(t *testing.T, file string) *enctest.Writer {
	t.Helper()
	w, err := enctest.NewWriter(file)
	if err != nil {
		t.Fatalf("NewWriter(%s): %v", file, err)
	}
	t.Cleanup(w.Close)
	return w
}

func newTransformers(t *testing.T, cfg encryption.Config) *encryption.Transformers {
	t.Helper()
	tr, err := encryption.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// TestRotation: for each local provider, values written by
// k8s.io/apiserver's transformers before a rotation (key1 only) and after
// it (key2 first, key1 still listed) decrypt with the rotated
// configuration, for Secrets, ConfigMaps (wildcard "*.") and a custom
// resource ("*.example.com"); aesgcm binds the etcd key (authenticated
// data).
func TestRotation(t *testing.T) {
	for _, p := range []string{"aescbc", "aesgcm", "secretbox"} {
		t.Run(p, func(t *testing.T) {
			dir := t.TempDir()
			rules := func(keys ...string) []enctest.Rule {
				return []enctest.Rule{
					{Resources: "secrets", Providers: []string{enctest.Provider(p, "", keys...), enctest.Provider("identity", "")}},
					{Resources: "*.", Providers: []string{enctest.Provider(p, "", keys...), enctest.Provider("identity", "")}},
					{Resources: "*.example.com", Providers: []string{enctest.Provider(p, "", keys...)}},
				}
			}
			before := newWriter(t, writeConfig(t, dir, "before.yaml", rules("key1")...))
			after := newWriter(t, writeConfig(t, dir, "after.yaml", rules("key2", "key1")...))
			tr := newTransformers(t, encryption.Config{File: writeConfig(t, dir, "read.yaml", rules("key2", "key1")...)})
			for _, res := range []string{"secrets", "configmaps", "widgets.example.com"} {
				for _, w := range []struct {
					name string
					w    *enctest.Writer
					key  string
				}{{"before", before, "key1"}, {"after", after, "key2"}} {
					key := "/registry/" + res + "/ns/obj-" + w.name
					plain := []byte("k8s\x00plaintext of " + key)
					stored, err := w.w.Encrypt(res, key, plain)
					if err != nil {
						t.Fatal(err)
					}
					prefix := "k8s:enc:" + p + ":v1:" + w.key + ":"
					if !bytes.HasPrefix(stored, []byte(prefix)) {
						t.Fatalf("%s %s: stored %q, want prefix %q", res, w.name, stored[:min(len(stored), 40)], prefix)
					}
					got, err := tr.Decrypt(context.Background(), res, []byte(key), stored)
					if err != nil {
						t.Fatalf("Decrypt(%s, %s): %v", res, w.name, err)
					}
					if !bytes.Equal(got, plain) {
						t.Fatalf("Decrypt(%s, %s) = %q, want %q", res, w.name, got, plain)
					}
					// Another key's authenticated data: aesgcm refuses it.
					_, err = tr.Decrypt(context.Background(), res, []byte(key+"-moved"), stored)
					if p == "aesgcm" && err == nil {
						t.Fatalf("aesgcm value decrypted under another etcd key")
					}
				}
			}
			// Unencrypted values: served by identity where it is listed,
			// refused where it is not (kube-apiserver: no matching prefix).
			plain := []byte("k8s\x00plain")
			if got, err := tr.Decrypt(context.Background(), "secrets", []byte("/registry/secrets/ns/p"), plain); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Decrypt(plain secret) = %q, %v", got, err)
			}
			if _, err := tr.Decrypt(context.Background(), "widgets.example.com", []byte("/registry/example.com/widgets/ns/p"), plain); !errors.Is(err, encryption.ErrDecrypt) {
				t.Fatalf("Decrypt(plain widget without identity) = %v, want ErrDecrypt", err)
			}
			// Not configured: as stored.
			if got, err := tr.Decrypt(context.Background(), "deployments.apps", []byte("/registry/deployments/ns/p"), plain); err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("Decrypt(plain deployment) = %q, %v", got, err)
			}
		})
	}
}

// TestDecryptErrors: an unknown key, a corrupted ciphertext and a wrong
// provider fail with a DecryptError naming resource, key and provider,
// counted in lazyapi_decrypt_failures_total; nothing of the data is in the
// message.
func TestDecryptErrors(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, writeConfig(t, dir, "w.yaml", enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "other")}}))
	ms := metrics.NewSet()
	tr := newTransformers(t, encryption.Config{Metrics: ms, File: writeConfig(t, dir, "r.yaml", enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "key1"), enctest.Provider("aescbc", "", "key1")}})})
	key := "/registry/secrets/ns/s1"
	secret := "TOP-SECRET-PAYLOAD"
	unknownKey, err := w.Encrypt("secrets", key, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	wOK := newWriter(t, writeConfig(t, dir, "w2.yaml", enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "key1")}}))
	good, err := wOK.Encrypt("secrets", key, []byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	corrupted := bytes.Clone(good)
	corrupted[len(corrupted)-1] ^= 1
	cases := []struct {
		name, provider, keyName string
		v                       []byte
	}{
		{"unknown key", "aesgcm", "other", unknownKey},
		{"bad MAC", "aesgcm", "key1", corrupted},
		{"truncated", "aesgcm", "key1", good[:len("k8s:enc:aesgcm:v1:key1:")+3]},
		{"unconfigured provider", "secretbox", "key1", []byte("k8s:enc:secretbox:v1:key1:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")},
		{"not encrypted", "identity", "", []byte("k8s\x00" + secret)},
	}
	for _, c := range cases {
		_, err := tr.Decrypt(context.Background(), "secrets", []byte(key), c.v)
		var de *encryption.DecryptError
		if !errors.As(err, &de) {
			t.Fatalf("%s: Decrypt = %v, want *DecryptError", c.name, err)
		}
		if de.Provider != c.provider || de.KeyName != c.keyName || de.Resource != "secrets" || de.Key != key {
			t.Errorf("%s: error = %+v, want provider %q key %q", c.name, de, c.provider, c.keyName)
		}
		msg := err.Error()
		if strings.Contains(msg, secret) || !strings.Contains(msg, key) || !strings.Contains(msg, "secrets") {
			t.Errorf("%s: message %q must name resource and key and not the data", c.name, msg)
		}
	}
	var b bytes.Buffer
	ms.WritePrometheus(&b)
	if !strings.Contains(b.String(), `lazyapi_decrypt_failures_total{resource="secrets",provider="aesgcm"} 3`) {
		t.Errorf("metrics:\n%s\nwant 3 aesgcm failures", b.String())
	}
}

// TestKMSv1Refused: a KMS v1 provider (or one without apiVersion) is a
// start-up error saying so.
func TestKMSv1Refused(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"", "apiVersion: v1\n          "} {
		p, err := enctest.WriteFile(dir, "kms1.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - kms:\n          "+v+"name: old\n          endpoint: unix:///tmp/none.sock\n          cachesize: 10\n")
		if err != nil {
			t.Fatal(err)
		}
		_, err = encryption.New(encryption.Config{File: p})
		if err == nil || !strings.Contains(err.Error(), "v1") || !strings.Contains(err.Error(), `"old"`) {
			t.Fatalf("New(KMS v1 %q) = %v, want an error naming KMS v1 and the provider", v, err)
		}
	}
	if _, err := encryption.New(encryption.Config{File: filepath.Join(dir, "missing.yaml")}); err == nil {
		t.Fatal("New(missing file) succeeded")
	}
	p, _ := enctest.WriteFile(dir, "bad.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: k\n              secret: c2hvcnQ=\n")
	_, err := encryption.New(encryption.Config{File: p})
	if err == nil || strings.Contains(err.Error(), "c2hvcnQ=") {
		t.Fatalf("New(short key) = %v, want an error without the secret", err)
	}
}

// TestKMSv2: values written by kube-apiserver's KMS v2 transformer through
// a real gRPC plugin decrypt; 1,000 values of one DEK seed cost one plugin
// Decrypt; a key-ID change (new seed) costs one more; the plugin down
// fails reads that need it (Unavailable) and the health check, and both
// recover when it is back.
func TestKMSv2(t *testing.T) {
	dir, err := os.MkdirTemp("", "kms") // short: a Unix socket path is limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	plugin, err := kmstest.Start(filepath.Join(dir, "p.sock"), "kek-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plugin.Stop)
	cfg := writeConfig(t, dir, "kms.yaml", enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("kms", plugin.Endpoint(), "testkms")}})
	w := newWriter(t, cfg)
	tr := newTransformers(t, encryption.Config{File: cfg})
	if !tr.KMS() {
		t.Fatal("KMS() = false")
	}
	if err := tr.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	write := func(n int, tag string) (keys []string, vals [][]byte) {
		for i := range n {
			k := "/registry/secrets/ns/" + tag + "-" + string(rune('a'+i%26)) + "-" + time.Duration(i).String()
			v, err := w.Encrypt("secrets", k, []byte("k8s\x00"+k))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(v, []byte("k8s:enc:kms:v2:testkms:")) {
				t.Fatalf("stored %q", v[:30])
			}
			keys, vals = append(keys, k), append(vals, v)
		}
		return keys, vals
	}
	read := func(keys []string, vals [][]byte) error {
		for i := range keys {
			got, err := tr.Decrypt(context.Background(), "secrets", []byte(keys[i]), vals[i])
			if err != nil {
				return err
			}
			if string(got) != "k8s\x00"+keys[i] {
				t.Fatalf("Decrypt(%s) = %q", keys[i], got)
			}
		}
		return nil
	}
	keys1, vals1 := write(1000, "a")
	before := plugin.DecryptCalls.Load()
	if err := read(keys1, vals1); err != nil {
		t.Fatal(err)
	}
	if n := plugin.DecryptCalls.Load() - before; n > 1 {
		t.Fatalf("1,000 values of one seed cost %d plugin Decrypt calls, want at most 1", n)
	}

	// Key-ID change: a writer loaded after it (kube-apiserver's probe
	// does the same within a minute) writes with a new seed under kek-2;
	// old and new values read, for one more plugin call.
	plugin.SetKeyID("kek-2")
	w = newWriter(t, cfg)
	keys2, vals2 := write(1000, "b")
	if !bytes.Contains(vals2[0], []byte("kek-2")) {
		t.Fatalf("value after the key-ID change does not name kek-2")
	}
	before = plugin.DecryptCalls.Load()
	if err := read(append(keys1, keys2...), append(vals1, vals2...)); err != nil {
		t.Fatal(err)
	}
	if n := plugin.DecryptCalls.Load() - before; n > 1 {
		t.Fatalf("2,000 values of two seeds (one cached) cost %d plugin Decrypt calls, want at most 1", n)
	}

	// Plugin down: values of a seed not yet seen fail, Unavailable; the
	// cached seeds still read (as kube-apiserver); the health check fails.
	plugin.SetKeyID("kek-3")
	w = newWriter(t, cfg)
	keys3, vals3 := write(10, "c")
	plugin.Stop()
	err = read(keys3, vals3)
	var de *encryption.DecryptError
	if !errors.As(err, &de) || !de.Unavailable || de.Provider != "kms" || de.KeyName != "testkms" {
		t.Fatalf("read with the plugin down = %v, want an Unavailable DecryptError naming kms testkms", err)
	}
	if err := read(keys1, vals1); err != nil {
		t.Fatalf("cached seed with the plugin down: %v", err)
	}
	if err := waitCheck(tr, false); err != nil {
		t.Fatal(err)
	}
	if err := plugin.Restart(); err != nil {
		t.Fatal(err)
	}
	// The health check first: it polls until the gRPC client has
	// reconnected. A read at once can meet the client's reconnect backoff,
	// which grows while the plugin is down (under the race detector the
	// plugin was down ~25 s, and the read's call timed out waiting for the
	// next dial).
	if err := waitCheck(tr, true); err != nil {
		t.Fatal(err)
	}
	if err := read(keys3, vals3); err != nil {
		t.Fatalf("after the plugin restart: %v", err)
	}
}

// waitCheck polls Check until it passes (ok) or fails (!ok), at most 30 s
// (k8s.io/apiserver caches a probe's answer for a few seconds).
func waitCheck(tr *encryption.Transformers, ok bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := tr.Check(context.Background())
		if (err == nil) == ok {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("health check did not change: " + errString(err))
		}
		time.Sleep(200 * time.Millisecond) // polling to a deadline
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// TestAutomaticReload: a rotation written to the file (a new key first)
// is picked up without a restart; a broken file keeps the previous
// configuration (counted as a failed reload).
func TestAutomaticReload(t *testing.T) {
	dir := t.TempDir()
	rule := func(keys ...string) enctest.Rule {
		return enctest.Rule{Resources: "secrets", Providers: []string{enctest.Provider("aesgcm", "", keys...)}}
	}
	file := writeConfig(t, dir, "read.yaml", rule("key1"))
	ms := metrics.NewSet()
	tr := newTransformers(t, encryption.Config{File: file, AutomaticReload: true, ReloadInterval: 50 * time.Millisecond, Metrics: ms})
	w2 := newWriter(t, writeConfig(t, dir, "w2.yaml", rule("key2")))
	key := []byte("/registry/secrets/ns/s")
	v2, err := w2.Encrypt("secrets", string(key), []byte("k8s\x00v"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Decrypt(context.Background(), "secrets", key, v2); err == nil {
		t.Fatal("key2 value decrypted before the rotation")
	}
	reloads := func(status string) float64 {
		var b bytes.Buffer
		ms.WritePrometheus(&b)
		for _, l := range strings.Split(b.String(), "\n") {
			if v, ok := strings.CutPrefix(l, `lazyapi_encryption_config_reloads_total{status="`+status+`"} `); ok {
				var f float64
				_, _ = fmt.Sscan(v, &f)
				return f
			}
		}
		return 0
	}
	// A broken file: kept the old configuration.
	if err := os.WriteFile(file, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: [{resources: [secrets], providers: [{aesgcm: {keys: [{name: k, secret: bad}]}}]}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	poll(t, "a failed reload", func() bool { return reloads("failure") > 0 })
	// The rotation.
	if err := os.WriteFile(file, []byte(enctest.Config(rule("key2", "key1"))), 0o600); err != nil {
		t.Fatal(err)
	}
	poll(t, "the rotated configuration", func() bool {
		got, err := tr.Decrypt(context.Background(), "secrets", key, v2)
		return err == nil && string(got) == "k8s\x00v"
	})
	if reloads("success") != 1 {
		t.Errorf("successful reloads = %v, want 1", reloads("success"))
	}
}

// poll waits up to 20 s for cond.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond) // polling to a deadline
	}
}
