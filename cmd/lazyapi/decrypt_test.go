package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/enctest"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

func TestEncryptionFlagErrors(t *testing.T) {
	checkFlagErrors(t, []flagErrorCase{
		{[]string{"--encryption-provider-config-automatic-reload"}, "--encryption-provider-config"},
		{[]string{"--watch-cache-decrypted"}, "--encryption-provider-config"},
	})
	c, err := parseFlags([]string{"--encryption-provider-config=/x.yaml", "--encryption-provider-config-automatic-reload", "--watch-cache-decrypted"})
	if err != nil || c.Encryption != (encryptionOptions{file: "/x.yaml", reload: true, cacheDecrypted: true}) {
		t.Fatalf("parseFlags = %+v, %v", c, err)
	}
}

// TestRunEncryption: lazyapi started with --encryption-provider-config
// serves a Secret kube-apiserver's aesgcm transformer encrypted; a KMS v1
// configuration or a missing file is a start-up error naming the flag.
func TestRunEncryption(t *testing.T) {
	dir := t.TempDir()
	cfg, err := enctest.WriteFile(dir, "enc.yaml", enctest.Config(enctest.Rule{Resources: "secrets",
		Providers: []string{enctest.Provider("aesgcm", "", "k1"), enctest.Provider("identity", "")}},
		enctest.Rule{Resources: "*.*", Providers: []string{enctest.Provider("secretbox", "", "k1"), enctest.Provider("identity", "")}}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := enctest.NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	etcd := etcdtest.Start(t)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s1", Namespace: "ns", UID: "u1"}, Data: map[string][]byte{"k": []byte("v")}}
	plain, err := storagefmt.Protobuf(s)
	if err != nil {
		t.Fatal(err)
	}
	key := storagefmt.Key("/registry", "secrets", "ns", "s1")
	enc, err := w.Encrypt("secrets", key, plain)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Client.Put(context.Background(), key, string(enc)); err != nil {
		t.Fatal(err)
	}
	// "*.*": the CRD itself is encrypted too (the resource table decrypts
	// it), and so is the custom resource.
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.example.com", "uid": "u1"},
		"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
			"names":    map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"}},
	}}
	widget := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1", "namespace": "ns", "uid": "u2"}, "spec": map[string]any{"color": "blue"}}}
	for _, o := range []struct {
		res, key string
		obj      *unstructured.Unstructured
	}{{"customresourcedefinitions.apiextensions.k8s.io", "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com", crd},
		{"widgets.example.com", "/registry/example.com/widgets/ns/w1", widget}} {
		v, err := storagefmt.JSON(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := w.Encrypt(o.res, o.key, v)
		if err != nil || !bytes.HasPrefix(ev, []byte("k8s:enc:secretbox:v1:k1:")) {
			t.Fatalf("Encrypt(%s) = %.30q, %v", o.res, ev, err)
		}
		if _, err := etcd.Client.Put(context.Background(), o.key, string(ev)); err != nil {
			t.Fatal(err)
		}
	}

	for _, bad := range []struct{ name, content, want string }{
		{"kmsv1.yaml", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - kms:\n          name: p\n          endpoint: unix:///tmp/x.sock\n", "apiVersion v1"},
		{"", "", "no such file"},
	} {
		file := dir + "/missing.yaml"
		if bad.name != "" {
			if file, err = enctest.WriteFile(dir, bad.name, bad.content); err != nil {
				t.Fatal(err)
			}
		}
		err := run(context.Background(), []string{"--etcd-servers=" + etcd.Endpoint, freePortFlag(t), "--encryption-provider-config=" + file}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--encryption-provider-config") || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("run with %s = %v, want a start-up error naming the flag and %q", file, err, bad.want)
		}
	}

	for _, extra := range [][]string{nil, {"--watch-cache-decrypted"}, {"--watch-cache=false"}} {
		r := startServing(t, io.Discard, append([]string{"--etcd-servers=" + etcd.Endpoint, freePortFlag(t), "--encryption-provider-config=" + cfg}, extra...)...)
		url := r.url
		resp, err := http.Get(url + "/apis/example.com/v1/namespaces/ns/widgets/w1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"color":"blue"`)) {
			t.Errorf("%v GET widget (CRD and object encrypted): %s %s", extra, resp.Status, body)
		}
		for _, p := range []string{"/api/v1/namespaces/ns/secrets/s1", "/api/v1/secrets"} {
			resp, err := http.Get(url + p)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !bytes.Contains(body, []byte(`"k":"dg=="`)) {
				t.Errorf("%v GET %s: %s %s", extra, p, resp.Status, body)
			}
			var v map[string]any
			if json.Unmarshal(body, &v) != nil {
				t.Errorf("GET %s: not JSON", p)
			}
		}
		if err := r.stop(); err != nil {
			t.Errorf("run = %v", err)
		}
	}
}

// TestRBACDecrypt: RBAC objects are decrypted with their own resource's
// transformer (a rule for rolebindings only does not decrypt roles).
func TestRBACDecrypt(t *testing.T) {
	dir := t.TempDir()
	cfg, err := enctest.WriteFile(dir, "enc.yaml", enctest.Config(enctest.Rule{Resources: "rolebindings.rbac.authorization.k8s.io",
		Providers: []string{enctest.Provider("aesgcm", "", "k1")}}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := enctest.NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	o := &Options{Encryption: encryptionOptions{file: cfg}}
	tr, err := o.openEncryption(zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dec := rbacDecrypt(tr)
	key := "/registry/rolebindings/ns/rb"
	v, err := w.Encrypt("rolebindings.rbac.authorization.k8s.io", key, []byte("k8s\x00x"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dec(key, v); err != nil || string(got) != "k8s\x00x" {
		t.Fatalf("rbacDecrypt(rolebinding) = %q, %v", got, err)
	}
	if _, err := dec("/registry/roles/ns/rb", v); err == nil {
		t.Fatal("a rolebinding value decrypted as a role")
	}
}
