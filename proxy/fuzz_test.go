package proxy

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// FuzzParseRequest feeds request parsing (path, query, continue token,
// selectors, Accept) with arbitrary input: it must never panic, accepted
// input must be consistent, and continue tokens must round-trip.
// Seed corpus: testdata/fuzz/FuzzParseRequest.
//
//	go test ./proxy -run '^$' -fuzz FuzzParseRequest -fuzztime=10s
func FuzzParseRequest(f *testing.F) {
	f.Add("/api/v1/namespaces/ns/configmaps", "limit=500&resourceVersion=0", "", "app=a", "", "application/json")
	f.Add("/apis/apps/v1/watch/deployments", "watch=1&allowWatchBookmarks=true", "", "", "metadata.name=x", "*/*")
	f.Add("/api/v1/namespaces/ns/configmaps", "continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDIsInN0YXJ0IjoiY20tMVx1MDAwMCJ9",
		"eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NDIsInN0YXJ0IjoiY20tMVx1MDAwMCJ9", "app in (a,b),!c", "spec.nodeName!=n",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	f.Fuzz(func(t *testing.T, path, query, token, labelSel, fieldSel, accept string) {
		if p, ok := parsePath(path); ok {
			if p.Version == "" || p.Resource == "" || strings.Contains(p.Name, "/") || strings.Contains(p.Namespace, "/") {
				t.Fatalf("parsePath(%q) accepted %+v", path, p)
			}
		}
		var args fasthttp.Args
		args.Parse(query)
		q, err := parseParams(func(fn func(k, v []byte)) { args.VisitAll(fn) })
		if err != nil && !isBadRequest(err) {
			t.Fatalf("parseParams(%q) = %v, not a bad request", query, err)
		}
		if err == nil && q.Continue != "" && q.ResourceVersion != "" && q.ResourceVersion != "0" {
			t.Fatalf("parseParams(%q) accepted resourceVersion with continue", query)
		}
		const prefix = "/registry/configmaps/ns/"
		if key, rev, err := decodeContinue(token, prefix); err == nil {
			if !strings.HasPrefix(key, prefix) || rev <= 0 {
				t.Fatalf("decodeContinue(%q) = %q, %d", token, key, rev)
			}
			if strings.Contains(key[len(prefix):], "..") && strings.Contains(key, "/../") {
				t.Fatalf("decodeContinue(%q) escaped the prefix: %q", token, key)
			}
			// Re-encoding the key (as "last key + \x00") round-trips.
			if strings.HasSuffix(key, "\x00") && len(key) > len(prefix)+1 {
				tok, err := encodeContinue([]byte(key[:len(key)-1]), prefix, rev)
				if err != nil {
					t.Fatal(err)
				}
				k2, r2, err := decodeContinue(tok, prefix)
				if err != nil || k2 != key || r2 != rev {
					t.Fatalf("round trip of %q: %q %d %v", key, k2, r2, err)
				}
			}
		} else if !isBadRequest(err) {
			t.Fatalf("decodeContinue(%q) = %v, not a bad request", token, err)
		}
		convert := func(l string) (string, error) {
			if l == "metadata.name" || l == "metadata.namespace" || l == "spec.nodeName" {
				return l, nil
			}
			return "", badf("field label not supported: %s", l)
		}
		if _, err := parseFilter(labelSel, fieldSel, convert); err != nil && !isBadRequest(err) {
			t.Fatalf("parseFilter(%q, %q) = %v", labelSel, fieldSel, err)
		}
		for _, list := range []bool{false, true} {
			if o, ok := negotiate(accept, list, false); ok && o.target == targetTable && o.format != formatJSON {
				t.Fatalf("negotiate(%q) = %v", accept, o)
			}
		}
		_ = errorFormat(accept)
		_ = wantsAggregated(accept)
	})
}
