package proxy_test

import (
	"testing"
)

// BenchmarkEncryptedEtcdList: LISTs of encrypted Secrets served from etcd
// (no watch cache), the reads whose size pass decrypts values (a selector
// with limit; a protobuf LIST over 2 MiB), per provider, against the same
// LIST of Secrets stored unencrypted (provider=none, identity), with the
// process CPU per LIST (cpu-ns/op: lazyapi and the embedded etcd, which
// serves both of lazyapi's passes over the range). 5,000 Secrets of ~1.2
// KiB per provider, labelled parity=even|odd:
//
//	go test ./proxy -run '^$' -bench BenchmarkEncryptedEtcdList -benchtime 20x
func BenchmarkEncryptedEtcdList(b *testing.B) {
	order := []string{"none", "aesgcm", "kms"}
	e, _ := encryptedSecretsEnv(b, order, false, 5000, func(j int) map[string]string {
		return map[string]string{"parity": []string{"even", "odd"}[j%2]}
	})
	for _, c := range []struct{ name, accept, query string }{
		{"json-limit500-selector", "application/json", "?limit=500&labelSelector=parity%3Dodd"},
		{"table-limit500-selector", kubectlTableAccept, "?limit=500&labelSelector=parity%3Dodd"},
		{"yaml-limit500-selector", "application/yaml", "?limit=500&labelSelector=parity%3Dodd"},
		{"protobuf-all", "application/vnd.kubernetes.protobuf", ""},
	} {
		for _, p := range order {
			url := e.url + "/api/v1/namespaces/" + p + "/secrets" + c.query
			benchGets(b, "list="+c.name+"/provider="+p, url, c.accept)
		}
	}
}
