package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/store"
)

// compactBetweenPages is an interceptor on the etcd client of lazyapi's
// store: before a range of the ConfigMaps at a pinned revision (a LIST's
// page after its first, which fixed the revision) it updates cm-00 and
// compacts etcd to the new head, the next n times. The range then finds
// its revision compacted, as when kube-apiserver's compactor (or the
// robustness suite's compact-head fault) lands between two pages.
type compactBetweenPages struct {
	admin *clientv3.Client // etcd's own client, not intercepted

	mu    sync.Mutex
	n     int     // compactions still to inject
	revs  []int64 // the revisions compacted to
	err   error   // the first failure to update or compact
	gen   int
	ready bool
}

func (h *compactBetweenPages) arm(n int) {
	h.mu.Lock()
	h.n, h.revs, h.ready = n, nil, true
	h.mu.Unlock()
}

func (h *compactBetweenPages) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if rr, ok := req.(*pb.RangeRequest); ok && rr.Revision > 0 && strings.HasPrefix(string(rr.Key), "/registry/configmaps/") {
		h.mu.Lock()
		if h.ready && h.n > 0 {
			h.n--
			h.gen++
			rev, err := h.compact(ctx, h.gen)
			if err != nil && h.err == nil {
				h.err = err
			}
			h.revs = append(h.revs, rev)
		}
		h.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// compact writes cm-00 with data gen and compacts etcd to that write.
func (h *compactBetweenPages) compact(ctx context.Context, gen int) (int64, error) {
	val, err := storagefmt.Protobuf(listCM(0, gen))
	if err != nil {
		return 0, err
	}
	resp, err := h.admin.Put(ctx, "/registry/configmaps/ns/cm-00", string(val))
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	_, err = h.admin.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return rev, err
}

func (h *compactBetweenPages) compacted() ([]int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int64(nil), h.revs...), h.err
}

func listCM(i, gen int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i), Namespace: "ns", UID: "u"},
		Data:       map[string]string{"gen": fmt.Sprint(gen)},
	}
}

// TestListRestartsAfterCompaction: a LIST that names no revision (no
// continue token, resourceVersion "") reads etcd in pages at the revision
// of its first page. When etcd compacts that revision between two pages,
// before the first byte, the LIST is read again from its start at the new
// current revision, never answered 410 (kube-apiserver reads it in one
// range): the 1-hour robustness run (seed 101) got a 410 for a consistent
// LIST of ConfigMaps after a compaction to etcd's head. A streamed list
// none of whose bytes has left is read again too. The answer is one
// snapshot: it holds the write made just before the compaction. A
// continue token at a compacted revision stays 410, as from
// kube-apiserver; a LIST compacted at every read is 503 after the bounded
// restarts.
func TestListRestartsAfterCompaction(t *testing.T) {
	etcd := etcdtest.Start(t)
	hook := &compactBetweenPages{admin: etcd.Client}
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Client.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(hook.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	e := startEnvWith(t, etcd, nil, func(c *proxy.Config) {
		c.Store = store.New(cli, store.Config{Prefix: "/registry", PageSize: 5, Metrics: c.Metrics})
	})
	const n = 30
	for i := range n {
		e.put(t, "configmaps", listCM(i, 0))
	}
	ctx := context.Background()
	restarts := func() int {
		v, _ := metricValue(e.ms, "lazyapi_list_restarts_total")
		return int(v)
	}

	// Protobuf, no limit: the size pass reads every page at the pinned
	// revision before the first byte.
	hook.arm(1)
	list, err := e.pcs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	checkRestartedList(t, "protobuf LIST", hook, list, err, n)

	// JSON, no limit: streamed after its first page; etcd compacts the
	// revision before the second page is read, before any byte of the
	// list has left (it is smaller than a flush).
	hook.arm(1)
	list, err = e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{})
	checkRestartedList(t, "JSON LIST", hook, list, err, n)

	// JSON, limit 20 (a paginated LIST's first page): the plan pass reads
	// the keys up to the 20th at the pinned revision.
	hook.arm(1)
	list, err = e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{Limit: 20})
	checkRestartedList(t, "JSON LIST limit=20", hook, list, err, 20)
	if list != nil && list.Continue == "" {
		t.Errorf("JSON LIST limit=20: no continue token")
	}
	if got := restarts(); got != 3 {
		t.Errorf("lazyapi_list_restarts_total = %d, want 3", got)
	}

	// A continue token at a revision compacted after it was given: 410
	// Expired, as kube-apiserver answers, with a token for the rest at
	// the latest revision.
	hook.arm(0)
	first, err := e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{Limit: 10})
	if err != nil || first.Continue == "" {
		t.Fatalf("first page: %v (continue %q)", err, first.Continue)
	}
	hook.arm(1)
	_, err = e.cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{Limit: 10, Continue: first.Continue})
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Code != 410 || se.ErrStatus.ListMeta.Continue == "" {
		t.Errorf("continue at a compacted revision: %v, want 410 Expired with a continue token", err)
	}
	if got := restarts(); got != 3 {
		t.Errorf("lazyapi_list_restarts_total after the continue = %d, want 3 (a continue is not restarted)", got)
	}

	// Compacted at every read: the restarts are bounded, and the answer
	// is 503 with Retry-After (the client named no revision: never 410).
	hook.arm(100)
	// (Raw: client-go retries a 503 with Retry-After.)
	code, hdr, body := e.raw(t, "GET", "/api/v1/namespaces/ns/configmaps", "application/vnd.kubernetes.protobuf")
	if code != 503 || hdr.Get("Retry-After") == "" {
		t.Errorf("LIST compacted at every read: %d (Retry-After %q) %q, want 503 with Retry-After", code, hdr.Get("Retry-After"), body)
	}
	if revs, _ := hook.compacted(); len(revs) != 4 {
		t.Errorf("LIST compacted at every read: read %d times, want 4 (3 restarts)", len(revs))
	}
}

// checkRestartedList checks a LIST compacted once between its pages: all
// want items, at a revision not older than the compaction, holding the
// write made just before it (cm-00 at that revision): one snapshot.
func checkRestartedList(t *testing.T, what string, hook *compactBetweenPages, list *corev1.ConfigMapList, err error, want int) {
	t.Helper()
	revs, herr := hook.compacted()
	if herr != nil {
		t.Fatalf("%s: the hook's compaction: %v", what, herr)
	}
	if len(revs) != 1 {
		t.Fatalf("%s: compacted %d times between pages, want 1 (the hook did not fire: the test is void)", what, len(revs))
	}
	if err != nil {
		t.Fatalf("%s compacted at %d between its pages: %v, want the list read again", what, revs[0], err)
	}
	if len(list.Items) != want {
		t.Errorf("%s: %d items, want %d", what, len(list.Items), want)
	}
	if rv, perr := strconv.ParseInt(list.ResourceVersion, 10, 64); perr != nil || rv < revs[0] {
		t.Errorf("%s: resourceVersion %s, older than the compaction at %d", what, list.ResourceVersion, revs[0])
	}
	cm := list.Items[0]
	if cm.Name != "cm-00" || cm.ResourceVersion != fmt.Sprint(revs[0]) {
		t.Errorf("%s: first item %s at %s, want cm-00 at %d (written before the compaction)", what, cm.Name, cm.ResourceVersion, revs[0])
	}
}
