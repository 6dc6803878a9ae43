package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// Shared LISTs (sharedlist.go): concurrent identical LISTs of a collection
// that is not cached read it from etcd once.

const sharedList = "/api/v1/namespaces/ns/configmaps"

// rawList GETs path and returns the status and body.
func rawList(ctx context.Context, e *env, path, accept string) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// concurrentLists runs n LISTs of path at once and returns their bodies.
func concurrentLists(t *testing.T, e *env, n int, path, accept string) [][]byte {
	t.Helper()
	bodies := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			code, b, err := rawList(context.Background(), e, path, accept)
			if err != nil || code != 200 {
				t.Errorf("%s: %d %v %.200s", path, code, err, b)
			}
			bodies[i] = b
		})
	}
	wg.Wait()
	return bodies
}

// holdBulkSeat takes the limiter's one bulk seat: shared groups wait for
// their admission (and gather members) until release is called.
func holdBulkSeat(t *testing.T, lim *ratelimit.Limiter) (release func()) {
	t.Helper()
	tk, err := lim.Admit(context.Background(), ratelimit.Request{Client: "test", Class: "hold", Kind: ratelimit.Bulk, Bytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { tk.Release(0) }) }
}

func oneBulkSeat(t *testing.T) *ratelimit.Limiter {
	t.Helper()
	cfg := ratelimit.DefaultConfig()
	cfg.MaxInflightBytes = 512 << 20
	cfg.MaxBulkInflight = 1
	cfg.BulkListBytes = 1 << 20
	cfg.Metrics = metrics.NewSet()
	lim, err := ratelimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func waitMetric(t *testing.T, e *env, name string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for metricInt(t, e, name) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d", name, metricInt(t, e, name), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSharedListIdentical: the bodies of concurrent shared LISTs are the
// bytes the unshared path writes on the same etcd: JSON and protobuf,
// streamed and inline, with limit and continue, with a selector; the
// members of each round share one etcd read (the requests gather while
// the group waits for the bulk seat).
func TestSharedListIdentical(t *testing.T) {
	lim := oneBulkSeat(t)
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	plain := startEnvOn(t, e)
	plain.srv.DisableSharedLists()
	for j := range 80 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%04d", j), UID: "uid",
			Labels: map[string]string{"app": []string{"x", "y"}[j%2]}},
			Data: map[string]string{"k": strings.Repeat("v\n\"é", 5000)}} // 80 x 30 KB: streamed
		e.put(t, "configmaps", cm)
	}
	// The continue token of a limited list, for the continuation rows.
	_, b, err := rawList(context.Background(), plain, sharedList+"?limit=7", "")
	if err != nil {
		t.Fatal(err)
	}
	var lm struct {
		Metadata struct {
			Continue string `json:"continue"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &lm); err != nil || lm.Metadata.Continue == "" {
		t.Fatalf("no continue token: %v %.200s", err, b)
	}
	cont := url.QueryEscape(lm.Metadata.Continue)
	const pb = "application/vnd.kubernetes.protobuf"
	for _, tc := range []struct{ path, accept string }{
		{sharedList, ""},
		{sharedList + "?resourceVersion=0&limit=500", ""},
		{sharedList + "?resourceVersion=0&limit=500", pb},
		{sharedList, pb},
		{sharedList + "?limit=7", ""},
		{sharedList + "?limit=30", ""},
		{sharedList + "?limit=30", pb},
		{sharedList + "?limit=30&continue=" + cont, ""},
		{sharedList + "?labelSelector=app%3Dx&limit=25", ""},
		{sharedList + "?labelSelector=app%3Dy", pb},
		{sharedList + "?fieldSelector=metadata.name%3Dcm-0003", ""},
		{"/api/v1/configmaps?resourceVersion=0", "application/yaml"},
	} {
		_, want, err := rawList(context.Background(), plain, tc.path, tc.accept)
		if err != nil {
			t.Fatal(err)
		}
		groups := metricInt(t, e, "lazyapi_list_shared_reads_total")
		members := metricInt(t, e, "lazyapi_list_shared_read_members_total")
		release := holdBulkSeat(t, lim)
		const n = 6
		var bodies [][]byte
		done := make(chan struct{})
		go func() { bodies = concurrentLists(t, e, n, tc.path, tc.accept); close(done) }()
		waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+n)
		release()
		<-done
		for i, b := range bodies {
			if string(b) != string(want) {
				t.Errorf("%s %s: body %d (%d bytes) differs from the unshared one (%d bytes)", tc.path, tc.accept, i, len(b), len(want))
			}
		}
		if g := metricInt(t, e, "lazyapi_list_shared_reads_total") - groups; g != 1 {
			t.Errorf("%s %s: %d etcd reads for %d concurrent LISTs, want 1", tc.path, tc.accept, g, n)
		}
	}
}

// TestSharedListStalledMember: a member whose client stops reading does
// not stall the others, and the group holds no more than its window (and
// the chunks being written): the stalled member is ended (its response
// is incomplete, never a well-formed short list).
func TestSharedListStalledMember(t *testing.T) {
	const window = 4 << 20
	t.Cleanup(proxy.SetScanWindowBytes(window))
	lim := oneBulkSeat(t)
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim; c.WriteTimeout = 5 * time.Minute })
	const n, size = 200, 100 << 10 // 20 MB: more than the window and the socket buffers of the stalled client
	putConfigMaps(t, e, 0, n, size)
	_, want, err := rawList(context.Background(), e, sharedList+"?resourceVersion=0&limit=500", "")
	if err != nil {
		t.Fatal(err)
	}
	release := holdBulkSeat(t, lim)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stalled client: reads the headers, then nothing.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+sharedList+"?resourceVersion=0&limit=500", nil)
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	stalledResp := make(chan *http.Response, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Error(err)
			close(stalledResp)
			return
		}
		stalledResp <- resp
	}()
	members := metricInt(t, e, "lazyapi_list_shared_read_members_total")
	waitMetric(t, e, "lazyapi_list_shared_read_members_total", 1)
	const others = 8
	var bodies [][]byte
	done := make(chan struct{})
	start := time.Now()
	go func() {
		bodies = concurrentLists(t, e, others, sharedList+"?resourceVersion=0&limit=500", "")
		close(done)
	}()
	waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+others)
	release()
	peak := 0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(60 * time.Second):
			t.Fatal("the others did not get their list while one client was stalled")
		case <-time.After(5 * time.Millisecond):
			peak = max(peak, metricInt(t, e, "lazyapi_list_shared_read_bytes"))
		}
	}
	t.Logf("the others got their lists in %v; peak held %d bytes", time.Since(start), peak)
	// The window, the chunk the stalled member pins and one published
	// past the window (chunks are flushes of about flushSize).
	if limit := window + 2*(1<<20); peak > limit {
		t.Errorf("the group held %d bytes, over its bound %d", peak, limit)
	}
	for i, b := range bodies {
		if string(b) != string(want) {
			t.Errorf("body %d: %d bytes, want %d", i, len(b), len(want))
		}
	}
	if got := metricInt(t, e, "lazyapi_list_shared_reads_total"); got != 2 { // the first (alone) and this one
		t.Errorf("lazyapi_list_shared_reads_total = %d, want 2", got)
	}
	if got := metricInt(t, e, "lazyapi_list_shared_read_members_lagged_total"); got != 1 {
		t.Errorf("lazyapi_list_shared_read_members_lagged_total = %d, want 1", got)
	}
	resp := <-stalledResp
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && string(b) != string(want) {
		t.Errorf("the stalled client got a complete response of %d bytes that is not the list (%d bytes)", len(b), len(want))
	}
	t.Logf("stalled client: %d bytes, %v", len(b), err)
	if held := metricInt(t, e, "lazyapi_list_shared_read_bytes"); held != 0 {
		t.Errorf("%d bytes still held after every member left", held)
	}
}

// TestSharedListClientGo: 16 client-go LISTs as informers send them
// (resourceVersion=0, limit=500), JSON and protobuf, at once, each get
// the collection.
func TestSharedListClientGo(t *testing.T) {
	// Compression off (lazyapi's default): a LIST that may be gzipped is
	// not shared.
	e := startEnv(t, func(c *proxy.Config) { c.DisableCompression = true })
	const n = 300
	putConfigMaps(t, e, 0, n, 4<<10)
	want := cmNames(0, n)
	var wg sync.WaitGroup
	for i := range 16 {
		cs := e.cs
		if i%2 == 1 {
			cs = e.pcs
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := cs.CoreV1().ConfigMaps("ns").List(ctx, metav1.ListOptions{ResourceVersion: "0", Limit: 500})
			if err != nil {
				t.Error(err)
				return
			}
			if len(l.Items) != n || l.ResourceVersion == "" || l.Continue != "" {
				t.Errorf("list %d: %d items, rv %q, continue %q", i, len(l.Items), l.ResourceVersion, l.Continue)
				return
			}
			for j, it := range l.Items {
				if it.Name != want[j] {
					t.Errorf("list %d: item %d is %s, want %s", i, j, it.Name, want[j])
					return
				}
			}
		})
	}
	wg.Wait()
	reads, members := metricInt(t, e, "lazyapi_list_shared_reads_total"), metricInt(t, e, "lazyapi_list_shared_read_members_total")
	t.Logf("shared reads: %d, members %d", reads, members)
	if members != 16 {
		t.Errorf("%d LISTs took the shared path, want 16", members)
	}
}

// TestSharedListLoneSlowMember: a member alone in its group that reads
// nothing for longer than the lag bound, its window full, is not ended
// (no other member would gain): it gets the whole list, as unshared.
func TestSharedListLoneSlowMember(t *testing.T) {
	t.Cleanup(proxy.SetScanWindowBytes(1 << 20))
	e := startEnv(t, func(c *proxy.Config) { c.WriteTimeout = time.Minute })
	putConfigMaps(t, e, 0, 100, 100<<10) // 10 MB: more than the window and the socket buffers
	_, want, err := rawList(context.Background(), e, sharedList+"?resourceVersion=0", "")
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(e.url + sharedList + "?resourceVersion=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	time.Sleep(4 * time.Second) // twice the lag bound, reading nothing
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != string(want) {
		t.Errorf("lone slow member: %d bytes, %v; want the list (%d bytes)", len(b), err, len(want))
	}
	if got := metricInt(t, e, "lazyapi_list_shared_read_members_lagged_total"); got != 0 {
		t.Errorf("lazyapi_list_shared_read_members_lagged_total = %d, want 0", got)
	}
}
