package proxy_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/resource"
)

// compactLikeKubeAPIServer compacts etcd at its current revision as
// kube-apiserver's compactor does: compact_rev_key first, then Compact.
func compactLikeKubeAPIServer(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	ctx := context.Background()
	resp, err := cli.Get(ctx, "compact_rev_key")
	if err != nil {
		t.Fatal(err)
	}
	var version int64
	if len(resp.Kvs) > 0 {
		version = resp.Kvs[0].Version
	}
	rev := resp.Header.Revision
	tx, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("compact_rev_key"), "=", version)).
		Then(clientv3.OpPut("compact_rev_key", strconv.FormatInt(rev, 10))).Commit()
	if err != nil || !tx.Succeeded {
		t.Fatalf("compact_rev_key: %v", err)
	}
	if _, err := cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	return rev
}

// TestCompactedExactList: after kube-apiserver compacted etcd, a LIST at an
// exact revision older than the compaction, or the continue token of a
// paginated LIST from before it, is 410 Expired as kube-apiserver answers,
// not served from an older watch cache snapshot.
func TestCompactedExactList(t *testing.T) {
	etcd := etcdtest.Start(t)
	e := &env{etcd: etcd, cli: etcd.Client}
	put := func(name, v string) {
		e.put(t, "configmaps", &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "a", UID: types.UID("uid-" + name)}, Data: map[string]string{"v": v}})
	}
	for i := range 3 {
		put(fmt.Sprintf("cm-%d", i), "1")
	}
	p := startCachedProxy(t, etcd, resource.NewBuiltin(), "127.0.0.1:0", 64<<20, cache.StateReady)
	get := func(query string) (int, []byte) {
		resp, err := http.Get("http://" + p.addr + "/api/v1/namespaces/a/configmaps?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := get("limit=1")
	var first corev1.ConfigMapList
	if code != 200 || json.Unmarshal(body, &first) != nil || first.Continue == "" {
		t.Fatalf("first page = %d %s", code, body)
	}
	old := first.ResourceVersion
	exact := "resourceVersionMatch=Exact&resourceVersion=" + old
	if code, body := get(exact); code != 200 {
		t.Fatalf("Exact LIST at %s before compaction = %d %s", old, code, body)
	}
	for i := range 3 {
		put(fmt.Sprintf("cm-%d", i), "2")
	}
	// The cache has the new values, and still serves the old revision
	// from its snapshots.
	waitFor(t, "the cache has the new values", func() error {
		if _, body := get(""); contains(body, `"v":"1"`) {
			return fmt.Errorf("consistent LIST still has old values")
		}
		return nil
	})
	if code, body := get(exact); code != 200 || !contains(body, `"v":"1"`) {
		t.Fatalf("Exact LIST at %s before compaction = %d %s", old, code, body)
	}
	crev := compactLikeKubeAPIServer(t, etcd.Client)
	// Once lazyapi has seen the compaction (as kube-apiserver's watch of
	// compact_rev_key), the first Exact LIST below it is 410.
	waitFor(t, "lazyapi_etcd_compaction_revision", func() error {
		if v, err := metricValue(p.ms, "lazyapi_etcd_compaction_revision"); err != nil || int64(v) != crev {
			return fmt.Errorf("lazyapi_etcd_compaction_revision = %v (%v), want %d", v, err, crev)
		}
		return nil
	})
	if code, body := get(exact); code != 410 {
		t.Errorf("Exact LIST at %s after the compaction at %d = %d %s, want 410", old, crev, code, body)
	}
	_, body = get(exact)
	// As kube-apiserver v1.37.2 answered on a compacted etcd.
	if want := `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The resourceVersion for the provided list is too old.","reason":"Expired","code":410}` + "\n"; string(body) != want {
		t.Errorf("Exact LIST at a compacted revision = %s", body)
	}
	code, body = get("limit=1&continue=" + url.QueryEscape(first.Continue))
	// As kube-apiserver (etcd3 handleCompactedErrorForPaging): 410 with
	// an "inconsistent continuation" token (rv -1, the same start key)
	// in metadata.continue.
	wantTok := base64.RawURLEncoding.EncodeToString([]byte(`{"v":"meta.k8s.io/v1","rv":-1,"start":"cm-0\u0000"}`))
	if want := `{"kind":"Status","apiVersion":"v1","metadata":{"continue":"` + wantTok + `"},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.","reason":"Expired","code":410}` + "\n"; code != 410 || string(body) != want {
		t.Errorf("continue from before the compaction = %d %s, want kube-apiserver's 410\n%s", code, body, want)
	}
	// Following it lists the rest at the latest revision.
	code, body = get("continue=" + url.QueryEscape(wantTok))
	var rest corev1.ConfigMapList
	if err := json.Unmarshal(body, &rest); code != 200 || err != nil || len(rest.Items) != 2 || rest.Items[0].Name != "cm-1" ||
		rest.Items[0].Data["v"] != "2" || rest.ResourceVersion == old {
		t.Errorf("LIST with the inconsistent continuation = %d %s, want cm-1 and cm-2 at the latest revision", code, body)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }
