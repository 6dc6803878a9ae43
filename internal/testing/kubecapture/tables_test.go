package kubecapture

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/resource"
)

// capturedTable is one object's Table as kube-apiserver printed it, with
// the value it stored for the object (codec's table oracle).
type capturedTable struct {
	Group     string          `json:"group"`
	Version   string          `json:"version"`
	Resource  string          `json:"resource"`
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name"`
	Key       string          `json:"key"`
	Stored    []byte          `json:"stored"`
	Now       time.Time       `json:"now"`
	Table     json.RawMessage `json:"table"`
}

// captureTables creates tableObjects through kube-apiserver, then reads
// each one's Table (Accept as=Table, includeObject=None) and its stored
// value, and writes them to codec/testdata/tables/kube-apiserver.json.
func captureTables(t *testing.T, k *kube, etcd *etcdtest.Server) {
	table := resource.NewBuiltin()
	var out []capturedTable
	for _, o := range tableObjects {
		body := o.body
		switch body {
		case "CSR":
			body = csrObject(t)
		case "CTB":
			body = ctbObject(t)
		}
		if body != "" {
			code, _, b := k.doType("POST", o.path, "application/json", "application/json", []byte(body))
			if code != 201 {
				t.Errorf("create %s %s: %d %s", o.path, o.name, code, b)
				continue
			}
		}
		if o.status != "" {
			code, _, b := k.doType("PATCH", o.path+"/"+o.name+"/status", "application/json", "application/merge-patch+json", []byte(o.status))
			if code != 200 {
				t.Errorf("status of %s %s: %d %s", o.path, o.name, code, b)
			}
		}
	}
	for _, o := range tableObjects {
		group, version, ns, res := splitPath(o.path)
		var r *resource.Resource
		for _, c := range table.Resources() {
			if c.Group == group && c.Resource == res {
				r = c
			}
		}
		if r == nil {
			t.Errorf("no resource %s.%s in lazyapi's table", res, group)
			continue
		}
		key := "/registry/" + r.KeyPrefix + "/"
		if ns != "" {
			key += ns + "/"
		}
		key += o.name
		now := time.Now()
		code, _, tb := k.do("GET", o.path+"/"+o.name+"?includeObject=None", "application/json;as=Table;v=v1;g=meta.k8s.io", nil)
		if code != 200 {
			t.Logf("no table of %s %s: %d %.200s", o.path, o.name, code, tb)
			continue
		}
		resp, err := etcd.Client.Get(context.Background(), key)
		must(t, err)
		if len(resp.Kvs) != 1 {
			t.Errorf("no stored value at %s", key)
			continue
		}
		out = append(out, capturedTable{Group: group, Version: version, Resource: res, Namespace: ns, Name: o.name,
			Key: key, Stored: resp.Kvs[0].Value, Now: now.UTC(), Table: tb})
	}
	b, err := json.MarshalIndent(out, "", " ")
	must(t, err)
	writeFile(t, filepath.Join(repo, "codec", "testdata", "tables", "kube-apiserver.json"), b)
}

// splitPath splits a collection path into group, version, namespace and
// resource.
func splitPath(p string) (group, version, ns, res string) {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	if parts[0] == "api" {
		version, parts = parts[1], parts[2:]
	} else {
		group, version, parts = parts[1], parts[2], parts[3:]
	}
	if len(parts) == 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	return group, version, ns, parts[0]
}

func csrObject(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "alice", Organization: []string{"devs"}}}, key)
	must(t, err)
	req := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "csr"}, "spec": map[string]any{
		"request": req, "signerName": "kubernetes.io/kube-apiserver-client", "expirationSeconds": 86400, "usages": []string{"client auth"}}})
	must(t, err)
	return string(b)
}

func ctbObject(t *testing.T) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"name": "bundle"}, "spec": map[string]any{
		"trustBundle": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}})
	must(t, err)
	return string(b)
}

// doType is do with a request content type.
func (k *kube) doType(method, path, accept, contentType string, body []byte) (int, http.Header, []byte) {
	k.t.Helper()
	req, err := http.NewRequest(method, k.url+path, bytes.NewReader(body))
	must(k.t, err)
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set("Accept", accept)
	req.Header.Set("Content-Type", contentType)
	return k.send(req)
}
