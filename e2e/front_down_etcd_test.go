package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestFrontEtcdDownAgainstKubeAPIServer (LAZYAPI_KUBEAPISERVER=1): issue
// 25's "when etcd is down and kube-apiserver up, the same on the other
// side", with kube-apiserver v1.37.2 and lazyapi on one etcd, lazyapi
// reaching it through a proxy the test controls and kube-apiserver
// directly: etcd is down for lazyapi only, kube-apiserver keeps serving
// from it. The path is partitioned (connections open, nothing answers),
// healed, then cut (connections closed, new ones refused). While it is
// down, a consistent read gets 503 with Retry-After and a Status naming
// etcd within the etcd call bound (5 s), never a hang; a
// resourceVersion=0 LIST is served from the watch cache; /readyz fails
// naming etcd while /livez and /readyz/kube-apiserver stay ok; what
// lazyapi forwards (a write, a self review, discovery) is answered by
// kube-apiserver as with etcd up. Once healed, lazyapi serves what was
// written through it meanwhile.
func TestFrontEtcdDownAgainstKubeAPIServer(t *testing.T) {
	var px *etcdtest.Proxy
	f := startFrontVia(t, func(endpoint string) string {
		px = etcdtest.NewProxy(t, strings.TrimPrefix(endpoint, "http://"))
		return px.URL()
	})
	const cms = "/api/v1/namespaces/default/configmaps"
	// create writes a ConfigMap through lazyapi (forwarded) and returns
	// its name.
	create := func(what string) string {
		t.Helper()
		a := f.do(t, "POST", cms, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"etcd-down-"}}`)
		var cm struct {
			Metadata struct{ Name string } `json:"metadata"`
		}
		if a.code != 201 || json.Unmarshal([]byte(a.body), &cm) != nil || cm.Metadata.Name == "" {
			t.Fatalf("%s: a forwarded write: %d in %v: %.300s; want 201 from kube-apiserver", what, a.code, a.took, a.body)
		}
		if a.took > 5*time.Second {
			t.Errorf("%s: a forwarded write took %v", what, a.took)
		}
		return cm.Metadata.Name
	}
	name := create("etcd up")
	if a := f.do(t, "GET", cms+"/"+name, ""); a.code != 200 {
		t.Fatalf("etcd up: GET %s: %d %.300s", name, a.code, a.body)
	}
	// The watch cache of ConfigMaps is filled (state 2, ready) and holds
	// the write: a resourceVersion=0 LIST is then its answer.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		m := f.do(t, "GET", "/metrics", "")
		a := f.do(t, "GET", cms+"?resourceVersion=0", "")
		if strings.Contains(m.body, "\nlazyapi_cache_state{resource=\"configmaps\"} 2\n") && strings.Contains(a.body, name) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMaps cache is not ready with %s", name)
		}
	}

	var written []string
	down := func(how string) {
		t.Helper()
		callBound := 5*time.Second + 2*time.Second // and a margin for 2 loaded cores
		for _, path := range []string{cms, cms + "/" + name} {
			a := f.do(t, "GET", path, "")
			if a.code != 503 || a.retryAfter == "" || !strings.Contains(a.body, `"reason":"ServiceUnavailable"`) ||
				!strings.Contains(a.body, "etcd") || a.took > callBound {
				t.Errorf("%s: consistent GET %s: %d (Retry-After %q) in %v: %.300s; want 503 naming etcd within the call bound",
					how, path, a.code, a.retryAfter, a.took, a.body)
			}
		}
		if a := f.do(t, "GET", cms+"?resourceVersion=0", ""); a.code != 200 || !strings.Contains(a.body, name) || a.took > callBound {
			t.Errorf("%s: resourceVersion=0 LIST: %d in %v: %.200s; want the watch cache's ConfigMaps", how, a.code, a.took, a.body)
		}
		// Forwarded: kube-apiserver answers, from its own etcd connection.
		written = append(written, create(how))
		if a := f.do(t, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
			`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`); a.code != 201 || !strings.Contains(a.body, `"username":"alice"`) {
			t.Errorf("%s: a self review: %d in %v: %.300s; want kube-apiserver's 201 naming alice", how, a.code, a.took, a.body)
		}
		if a := f.do(t, "GET", "/apis", ""); a.code != 200 || !strings.Contains(a.body, `"apiregistration.k8s.io"`) || a.took > 2*time.Second {
			t.Errorf("%s: /apis: %d in %v: %.200s; want kube-apiserver's groups", how, a.code, a.took, a.body)
		}
		if a := f.do(t, "GET", "/version", ""); a.code != 200 || !strings.Contains(a.body, `"gitVersion"`) {
			t.Errorf("%s: /version: %d %.200s", how, a.code, a.body)
		}
		// Health: not ready for reads, alive, the upstream ok. The etcd
		// check's answer is reused for 1 s and bounded by 2 s.
		healthBound := 3*time.Second + 2*time.Second
		deadline := time.Now().Add(healthBound)
		for {
			a := f.do(t, "GET", "/readyz?verbose", "")
			if a.code == 500 && strings.Contains(a.body, "[-]etcd failed") {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: /readyz still %d:\n%s\nwant 500 naming etcd", how, a.code, a.body)
				break
			}
			time.Sleep(200 * time.Millisecond) // polling lazyapi's check to a deadline
		}
		for path, want := range map[string]int{"/readyz/etcd": 500, "/readyz/kube-apiserver": 200, "/livez": 200} {
			if a := f.do(t, "GET", path, ""); a.code != want || a.took > healthBound {
				t.Errorf("%s: %s: %d in %v: %s; want %d", how, path, a.code, a.took, a.body, want)
			}
		}
	}
	up := func(how string) {
		t.Helper()
		for _, n := range written {
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
				a := f.do(t, "GET", cms+"/"+n, "")
				if a.code == 200 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: GET %s written while etcd was down: still %d %.300s", how, n, a.code, a.body)
				}
			}
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			a := f.do(t, "GET", "/readyz", "")
			if a.code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: /readyz still %d %s", how, a.code, a.body)
				break
			}
		}
	}

	px.Partition()
	down("etcd partitioned from lazyapi")
	px.Heal()
	up("partition healed")
	px.Cut()
	down("etcd cut from lazyapi")
	px.Heal()
	up("cut healed")
}
