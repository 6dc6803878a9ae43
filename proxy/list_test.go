package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/pager"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// seedConfigMaps writes n ConfigMaps cm-00000.. in ns with a label
// parity=even|odd and returns the revision after the last write.
func seedConfigMaps(t testing.TB, e *env, ns string, n, dataBytes int) int64 {
	t.Helper()
	kvs := make([][2]string, 0, n)
	payload := strings.Repeat("x", dataBytes)
	for i := range n {
		parity := "even"
		if i%2 == 1 {
			parity = "odd"
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", i),
			Labels: map[string]string{"parity": parity, "i": strconv.Itoa(i)}}, Data: map[string]string{"payload": payload}}
		val, err := storagefmt.Protobuf(cm)
		if err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, [2]string{storagefmt.Key("/registry", "configmaps", ns, cm.Name), string(val)})
	}
	return e.putMany(t, kvs)
}

func TestPager(t *testing.T) {
	e := startEnv(t)
	seedConfigMaps(t, e, "big", 5000, 10)
	seedConfigMaps(t, e, "other", 3, 10)
	ctx := context.Background()
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		t.Run(name, func(t *testing.T) {
			seen := map[string]int{}
			var order []string
			p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return cs.CoreV1().ConfigMaps("big").List(ctx, opts)
			})
			p.PageSize = 100
			pages := 0
			var firstRV string
			err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
				cm := obj.(*corev1.ConfigMap)
				seen[cm.Name]++
				order = append(order, cm.Name)
				return nil
			})
			if err != nil {
				t.Fatalf("pager: %v", err)
			}
			if len(seen) != 5000 || len(order) != 5000 {
				t.Fatalf("pager saw %d distinct / %d items, want 5000", len(seen), len(order))
			}
			for i, n := range order {
				if want := fmt.Sprintf("cm-%05d", i); n != want || seen[n] != 1 {
					t.Fatalf("item %d = %s (seen %d times), want %s once", i, n, seen[n], want)
				}
			}
			// The whole collection in one response (several etcd pages,
			// streamed; protobuf computes the size in a first pass).
			all, err := cs.CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
			if err != nil || len(all.Items) != 5000 || all.Items[4999].Name != "cm-04999" || all.Continue != "" {
				t.Fatalf("List all = %v items, %v", len(all.Items), err)
			}
			odd, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "parity=odd"})
			if err != nil || len(odd.Items) != 2501 {
				t.Fatalf("List odd across namespaces = %d items, %v; want 2501", len(odd.Items), err)
			}
			// Page by hand: RV of every page is the first page's; remaining
			// count exact; a write between pages is not visible.
			opts := metav1.ListOptions{Limit: 1000}
			total := 0
			for {
				l, err := cs.CoreV1().ConfigMaps("big").List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				pages++
				total += len(l.Items)
				if firstRV == "" {
					firstRV = l.ResourceVersion
					e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "cm-99999"}})
				} else if l.ResourceVersion != firstRV {
					t.Fatalf("page %d RV = %s, want first page's %s", pages, l.ResourceVersion, firstRV)
				}
				if l.Continue == "" {
					if l.RemainingItemCount != nil {
						t.Errorf("last page has remainingItemCount %d", *l.RemainingItemCount)
					}
					break
				}
				if l.RemainingItemCount == nil || *l.RemainingItemCount != int64(5000-total) {
					t.Fatalf("page %d remainingItemCount = %v, want %d", pages, l.RemainingItemCount, 5000-total)
				}
				opts.Continue = l.Continue
			}
			if total != 5000 || pages != 5 {
				t.Fatalf("paged %d items in %d pages, want 5000 in 5", total, pages)
			}
			// Remove the extra object for the next subtest.
			if _, err := e.cli.Delete(ctx, "/registry/configmaps/big/cm-99999"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSelectorWithLimit(t *testing.T) {
	e := startEnv(t)
	seedConfigMaps(t, e, "ns", 301, 10)
	ctx := context.Background()
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		t.Run(name, func(t *testing.T) {
			opts := metav1.ListOptions{LabelSelector: "parity=odd", Limit: 40}
			var got []string
			for {
				l, err := cs.CoreV1().ConfigMaps("ns").List(ctx, opts)
				if err != nil {
					t.Fatal(err)
				}
				if len(l.Items) > 40 {
					t.Fatalf("page of %d items > limit 40", len(l.Items))
				}
				if l.RemainingItemCount != nil {
					t.Fatalf("remainingItemCount %d with a selector", *l.RemainingItemCount)
				}
				for _, cm := range l.Items {
					got = append(got, cm.Name)
				}
				if l.Continue == "" {
					break
				}
				if len(l.Items) != 40 {
					t.Fatalf("page with continue has %d items, want the limit 40", len(l.Items))
				}
				opts.Continue = l.Continue
			}
			if len(got) != 150 {
				t.Fatalf("odd items = %d, want 150", len(got))
			}
			for i, n := range got {
				if want := fmt.Sprintf("cm-%05d", 2*i+1); n != want {
					t.Fatalf("item %d = %s, want %s", i, n, want)
				}
			}
		})
	}
}

func TestContinueAfterCompaction(t *testing.T) {
	e := startEnv(t)
	seedConfigMaps(t, e, "ns", 30, 10)
	ctx := context.Background()
	l, err := e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{Limit: 10})
	if err != nil || l.Continue == "" {
		t.Fatalf("first page: %v %v", l, err)
	}
	rev := e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "later"}})
	if _, err := e.cli.Compact(ctx, rev); err != nil {
		t.Fatal(err)
	}
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		_, err = cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{Limit: 10, Continue: l.Continue})
		if !apierrors.IsResourceExpired(err) {
			t.Fatalf("%s: continue after compaction = %v, want Expired (410)", name, err)
		}
	}
	// Exact at a compacted revision: 410 too.
	old, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	_, err = e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(old, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("Exact at compacted revision = %v, want Expired", err)
	}
}

func TestResourceVersionSemantics(t *testing.T) {
	e := startEnv(t)
	rev1 := seedConfigMaps(t, e, "ns", 5, 10)
	rev2 := e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-late"}})
	ctx := context.Background()
	cms := e.cs.CoreV1().ConfigMaps("ns")

	l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev1, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil || len(l.Items) != 5 || l.ResourceVersion != strconv.FormatInt(rev1, 10) {
		t.Fatalf("Exact %d = %d items at %s, %v; want 5 at %d", rev1, len(l.Items), l.ResourceVersion, err, rev1)
	}
	// Legacy: resourceVersion=N with limit and no match is Exact.
	l, err = cms.List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev1, 10), Limit: 100})
	if err != nil || len(l.Items) != 5 {
		t.Fatalf("legacy exact = %d items, %v; want 5", len(l.Items), err)
	}
	l, err = cms.List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev1, 10), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil || len(l.Items) != 6 {
		t.Fatalf("NotOlderThan %d = %d items, %v; want 6 (current)", rev1, len(l.Items), err)
	}
	l, err = cms.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil || len(l.Items) != 6 {
		t.Fatalf("rv=0 = %d items, %v", len(l.Items), err)
	}
	// Future Exact: 504 Timeout with ResourceVersionTooLarge.
	future := strconv.FormatInt(rev2+100, 10)
	// (Without retries: client-go retries a 504 with Retry-After ten
	// times, 4 s each, 44 of the test's 48 s.)
	err = e.cs.CoreV1().RESTClient().Get().Namespace("ns").Resource("configmaps").
		VersionedParams(&metav1.ListOptions{ResourceVersion: future, ResourceVersionMatch: metav1.ResourceVersionMatchExact}, scheme.ParameterCodec).
		MaxRetries(0).Do(ctx).Error()
	if !apierrors.IsTimeout(err) || !apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("future Exact = %v, want Timeout with ResourceVersionTooLarge", err)
	}
	// Future NotOlderThan: waits ~3s, then 504 with retryAfterSeconds 1.
	start := time.Now()
	code, _, body := e.raw(t, http.MethodGet, "/api/v1/namespaces/ns/configmaps?resourceVersionMatch=NotOlderThan&resourceVersion="+future, "")
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("future NotOlderThan body %s: %v", body, err)
	}
	if code != 504 || st.Reason != metav1.StatusReasonTimeout || st.Details == nil || st.Details.RetryAfterSeconds != 1 ||
		len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge {
		t.Fatalf("future NotOlderThan = %d %s", code, body)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("future NotOlderThan answered after %v, want after waiting ~3s", d)
	}
	// A write that arrives while waiting satisfies NotOlderThan.
	target := rev2 + 1
	done := make(chan error, 1)
	go func() {
		l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(target, 10), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err == nil && len(l.Items) != 7 {
			err = fmt.Errorf("got %d items, want 7", len(l.Items))
		}
		done <- err
	}()
	e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-later"}})
	if err := <-done; err != nil {
		t.Fatalf("NotOlderThan satisfied by a later write: %v", err)
	}
	// GET with rv=0 and rv=N.
	if _, err := cms.Get(ctx, "cm-late", metav1.GetOptions{ResourceVersion: "0"}); err != nil {
		t.Fatalf("Get rv=0: %v", err)
	}
	if _, err := cms.Get(ctx, "cm-late", metav1.GetOptions{ResourceVersion: strconv.FormatInt(rev2, 10)}); err != nil {
		t.Fatalf("Get rv=N: %v", err)
	}
}

// TestRelistAtOldRevision: a reflector's relist after a broken watch is
// LIST resourceVersion=N&limit=500 (legacy Exact) followed by continue
// pages; it must return etcd's state at N exactly, not the current one.
func TestRelistAtOldRevision(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	rev := seedConfigMaps(t, e, "ns", 1200, 10)
	// Changes after rev: updates, deletes, creates.
	for i := 0; i < 1200; i += 7 {
		name := fmt.Sprintf("cm-%05d", i)
		switch i % 3 {
		case 0:
			e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"payload": "changed"}})
		case 1:
			if _, err := e.cli.Delete(ctx, "/registry/configmaps/ns/"+name); err != nil {
				t.Fatal(err)
			}
		default:
			e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-new"}})
		}
	}
	want := map[string]string{}
	resp, err := e.cli.Get(ctx, "/registry/configmaps/ns/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		want[strings.TrimPrefix(string(kv.Key), "/registry/configmaps/ns/")] = strconv.FormatInt(kv.ModRevision, 10)
	}
	for name, cs := range map[string]kubernetes.Interface{"json": e.cs, "protobuf": e.pcs} {
		got := map[string]string{}
		opts := metav1.ListOptions{ResourceVersion: strconv.FormatInt(rev, 10), Limit: 500}
		for {
			l, err := cs.CoreV1().ConfigMaps("").List(ctx, opts)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if l.ResourceVersion != strconv.FormatInt(rev, 10) {
				t.Fatalf("%s: list RV %s, want %d", name, l.ResourceVersion, rev)
			}
			for _, cm := range l.Items {
				if cm.Data["payload"] == "changed" {
					t.Fatalf("%s: %s has a value written after %d", name, cm.Name, rev)
				}
				got[cm.Name] = cm.ResourceVersion
			}
			if l.Continue == "" {
				break
			}
			opts = metav1.ListOptions{Limit: 500, Continue: l.Continue}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: relist at %d = %d objects, want %d", name, rev, len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: %s RV %q, want %q", name, k, got[k], v)
			}
		}
	}
}
