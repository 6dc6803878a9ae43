package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/proxy"
	"github.com/lazyapi/lazyapi/ratelimit"
)

// Shared LISTs (sharedlist.go): concurrent identical LISTs of a collection
// that is not cached read it from etcd once.

const sharedList = "/api/v1/namespaces/ns/configmaps"

// rawList GETs path and returns the status and body.
func rawList(ctx context.Context, e *env, path, accept string) (int, []byte, error) {
	resp, b, err := rawListEncoded(ctx, e, path, accept, false)
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, b, nil
}

// rawListEncoded GETs path, with Accept-Encoding: gzip when gz, and
// returns the response and its body as sent (not decompressed).
func rawListEncoded(ctx context.Context, e *env, path, accept string, gz bool) (*http.Response, []byte, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
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

// encodedList is one response of concurrentEncodedLists.
type encodedList struct {
	gzip bool // asked for gzip
	resp *http.Response
	body []byte // as sent
}

// concurrentEncodedLists runs a LIST of path at once for each element
// of gz (asking for gzip when true) and returns the responses.
func concurrentEncodedLists(t *testing.T, e *env, gz []bool, path, accept string) []encodedList {
	t.Helper()
	out := make([]encodedList, len(gz))
	var wg sync.WaitGroup
	for i, z := range gz {
		wg.Go(func() {
			resp, b, err := rawListEncoded(context.Background(), e, path, accept, z)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("%s (gzip %v): %v %.200s", path, z, err, b)
			}
			out[i] = encodedList{gzip: z, resp: resp, body: b}
		})
	}
	wg.Wait()
	return out
}

// checkEncoded checks a LIST response against the unshared identity
// body want: compressed (Content-Encoding: gzip, Vary: Accept-Encoding)
// exactly when it asked for gzip and want is larger than 128 KiB, as
// unshared; decoded, the bytes of want.
func checkEncoded(t *testing.T, what string, l encodedList, want []byte) {
	t.Helper()
	if l.resp == nil {
		return // failed: reported
	}
	compressed := l.gzip && len(want) > 128<<10
	if got := l.resp.Header.Get("Content-Encoding"); got != map[bool]string{true: "gzip"}[compressed] {
		t.Errorf("%s (gzip %v): Content-Encoding %q for %d bytes", what, l.gzip, got, len(want))
		return
	}
	body := l.body
	if compressed {
		if v := l.resp.Header.Get("Vary"); v != "Accept-Encoding" {
			t.Errorf("%s: Vary %q", what, v)
		}
		body = gunzip(t, body)
	}
	if string(body) != string(want) {
		t.Errorf("%s (gzip %v): body (%d bytes, %d as sent) differs from the unshared one (%d bytes)", what, l.gzip, len(body), len(l.body), len(want))
	}
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

// sharedListTwins returns a server on one bulk seat (so that concurrent
// LISTs gather while a group waits for it) and one on the same etcd
// without shared LISTs, with 80 ConfigMaps of ~30 KB of escape-dense text
// (streamed, over the gzip threshold) labelled app=x or app=y in turn.
func sharedListTwins(t *testing.T) (shared, plain *env, lim *ratelimit.Limiter) {
	t.Helper()
	lim = oneBulkSeat(t)
	shared = startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	plain = startEnvOn(t, shared)
	plain.srv.DisableSharedLists()
	for j := range 80 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%04d", j), UID: "uid",
			Labels: map[string]string{"app": []string{"x", "y"}[j%2]}},
			Data: map[string]string{"k": strings.Repeat("v\n\"é", 5000)}}
		shared.put(t, "configmaps", cm)
	}
	return shared, plain, lim
}

// TestSharedListIdentical: the bodies of concurrent shared LISTs are the
// bytes the unshared path writes on the same etcd: JSON and protobuf,
// streamed and inline, with limit and continue, with a selector; the
// members of each round share one etcd read (the requests gather while
// the group waits for the bulk seat).
func TestSharedListIdentical(t *testing.T) {
	e, plain, lim := sharedListTwins(t)
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
// is incomplete, never a well-formed short list). The same for a group
// that compresses its body (gzip): the window holds compressed chunks, so
// the objects are incompressible.
func TestSharedListStalledMember(t *testing.T) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "identity", true: "gzip"}[gz], func(t *testing.T) { testSharedListStalledMember(t, gz) })
	}
}

func testSharedListStalledMember(t *testing.T, gz bool) {
	// 20 MB (13 MB compressed): more than the window and the socket
	// buffers of the stalled client (its receive buffer is 16 KiB; the
	// server's send buffer grows to tcp_wmem's 4 MiB). Under -race half the
	// window, 13 MB (8 MB compressed) and 3 others instead of 8: the race
	// detector's checks of the nine 20 MB copies took most of the test's
	// 107 s in CI.
	window, n, size, others := int64(4<<20), 200, 100<<10, 8
	if raceEnabled {
		window, n, others = 2<<20, 130, 3
	}
	t.Cleanup(proxy.SetScanWindowBytes(window))
	lim := oneBulkSeat(t)
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim; c.WriteTimeout = 5 * time.Minute })
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		data := make([]byte, size)
		for j := range data {
			data[j] = 'a' + byte(rnd.IntN(26))
		}
		e.put(t, "configmaps", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%04d", i), UID: "uid"},
			Data: map[string]string{"k": string(data)}})
	}
	const path = sharedList + "?resourceVersion=0&limit=500"
	_, want, err := rawList(context.Background(), e, path, "")
	if err != nil {
		t.Fatal(err)
	}
	release := holdBulkSeat(t, lim)
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The stalled client: reads the headers, then nothing.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+path, nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	tr := smallReadBuffer()
	defer tr.CloseIdleConnections()
	stalledResp := make(chan *http.Response, 1)
	members := metricInt(t, e, "lazyapi_list_shared_read_members_total")
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Error(err)
			close(stalledResp)
			return
		}
		stalledResp <- resp
	}()
	waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+1)
	var bodies []encodedList
	done := make(chan struct{})
	start := time.Now()
	go func() {
		bodies = concurrentEncodedLists(t, e, slices.Repeat([]bool{gz}, others), path, "")
		close(done)
	}()
	waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+1+others)
	release()
	peak := peakUntil(t, e, "lazyapi_list_shared_read_bytes", done, "the others' lists while one client was stalled")
	t.Logf("the others got their lists in %v; peak held %d bytes", time.Since(start), peak)
	// The window, the chunk the stalled member pins and one published
	// past the window (chunks are flushes of about flushSize).
	if limit := int(window) + 2*(1<<20); peak > limit {
		t.Errorf("the group held %d bytes, over its bound %d", peak, limit)
	}
	for i, l := range bodies {
		checkEncoded(t, fmt.Sprintf("body %d", i), l, want)
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
	if got := resp.Header.Get("Content-Encoding") == "gzip"; got != gz {
		t.Errorf("the stalled client's response: Content-Encoding %q, want gzip %v", resp.Header.Get("Content-Encoding"), gz)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil && gz {
		b = gunzip(t, b)
	}
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
// the collection: the objects an unshared LIST gives. client-go asks for
// gzip and decompresses transparently: with compression on (lazyapi's
// default) the 1.2 MB answers come compressed and are shared too.
func TestSharedListClientGo(t *testing.T) {
	for _, compress := range []bool{true, false} {
		t.Run(map[bool]string{true: "gzip", false: "compression-off"}[compress], func(t *testing.T) {
			testSharedListClientGo(t, compress)
		})
	}
}

func testSharedListClientGo(t *testing.T, compress bool) {
	e := startEnv(t, func(c *proxy.Config) { c.DisableCompression = !compress })
	plain := startEnvOn(t, e)
	plain.srv.DisableSharedLists()
	const n = 300
	putConfigMaps(t, e, 0, n, 4<<10)
	opts := metav1.ListOptions{ResourceVersion: "0", Limit: 500}
	want, err := plain.cs.CoreV1().ConfigMaps("ns").List(context.Background(), opts)
	if err != nil || len(want.Items) != n {
		t.Fatalf("unshared list: %v", err)
	}
	// Each client notes whether its responses came compressed (net/http
	// decoded them: Response.Uncompressed).
	var gzipped atomic.Int64
	clientset := func(cfg *rest.Config) kubernetes.Interface {
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil && resp.Uncompressed {
					gzipped.Add(1)
				}
				return resp, err
			})
		})
		return kubernetes.NewForConfigOrDie(cfg)
	}
	cs, pcs := clientset(e.jsonCfg), clientset(e.protCfg)
	var wg sync.WaitGroup
	for i := range 16 {
		cs := cs
		if i%2 == 1 {
			cs = pcs
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := cs.CoreV1().ConfigMaps("ns").List(ctx, opts)
			if err != nil {
				t.Error(err)
				return
			}
			if l.ResourceVersion == "" || l.Continue != "" {
				t.Errorf("list %d: rv %q, continue %q", i, l.ResourceVersion, l.Continue)
			}
			if !reflect.DeepEqual(l.Items, want.Items) {
				t.Errorf("list %d: %d items that are not the unshared LIST's %d", i, len(l.Items), len(want.Items))
			}
		})
	}
	wg.Wait()
	reads, members := metricInt(t, e, "lazyapi_list_shared_reads_total"), metricInt(t, e, "lazyapi_list_shared_read_members_total")
	t.Logf("shared reads: %d, members %d, compressed responses %d", reads, members, gzipped.Load())
	if members != 16 {
		t.Errorf("%d LISTs took the shared path, want 16", members)
	}
	if want := map[bool]int64{true: 16, false: 0}[compress]; gzipped.Load() != want {
		t.Errorf("%d responses came compressed, want %d", gzipped.Load(), want)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestSharedListGzip: concurrent LISTs that accept gzip share one etcd
// read, and each response is what the unshared path sends for the same
// request: compressed exactly when larger than 128 KiB (streamed, and
// encoded whole), with or without a Content-Length as unshared, decoding
// to the bytes of the unshared identity LIST; small ones (whole, or
// streamed from etcd but under the threshold) are sent as they are.
// JSON, protobuf and YAML.
func TestSharedListGzip(t *testing.T) {
	e, plain, lim := sharedListTwins(t)
	const pb = "application/vnd.kubernetes.protobuf"
	compressed := 0
	for _, tc := range []struct{ path, accept string }{
		{sharedList, ""}, // streamed, compressed
		{sharedList + "?resourceVersion=0&limit=500", pb},           // encoded whole (the size pass), compressed
		{sharedList + "?limit=7", ""},                               // one page, whole, compressed
		{sharedList + "?limit=3", ""},                               // one page, whole, under the threshold
		{sharedList + "?fieldSelector=metadata.name%3Dcm-0003", ""}, // streamed (80 items read), under the threshold
		{sharedList + "?labelSelector=app%3Dy", "application/yaml"}, // streamed, compressed
	} {
		// The unshared answers: identity, and gzip (its headers).
		_, want, err := rawList(context.Background(), plain, tc.path, tc.accept)
		if err != nil {
			t.Fatal(err)
		}
		unshared, _, err := rawListEncoded(context.Background(), plain, tc.path, tc.accept, true)
		if err != nil {
			t.Fatal(err)
		}
		groups := metricInt(t, e, "lazyapi_list_shared_reads_total")
		members := metricInt(t, e, "lazyapi_list_shared_read_members_total")
		release := holdBulkSeat(t, lim)
		const n = 6
		var lists []encodedList
		done := make(chan struct{})
		go func() {
			lists = concurrentEncodedLists(t, e, slices.Repeat([]bool{true}, n), tc.path, tc.accept)
			close(done)
		}()
		waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+n)
		release()
		<-done
		what := tc.path + " " + tc.accept
		t.Logf("%s: %d bytes, unshared gzip: Content-Encoding %q, Content-Length %d", what, len(want),
			unshared.Header.Get("Content-Encoding"), unshared.ContentLength)
		for i, l := range lists {
			checkEncoded(t, fmt.Sprintf("%s: body %d", what, i), l, want)
			if l.resp == nil {
				continue
			}
			if got, u := l.resp.Header.Get("Content-Encoding"), unshared.Header.Get("Content-Encoding"); got != u {
				t.Errorf("%s: Content-Encoding %q, unshared %q", what, got, u)
			}
			if got, u := l.resp.ContentLength >= 0, unshared.ContentLength >= 0; got != u {
				t.Errorf("%s: Content-Length %d, unshared %d", what, l.resp.ContentLength, unshared.ContentLength)
			}
			if l.resp.Header.Get("Content-Encoding") == "gzip" {
				compressed++
			}
		}
		if g := metricInt(t, e, "lazyapi_list_shared_reads_total") - groups; g != 1 {
			t.Errorf("%s: %d etcd reads for %d concurrent LISTs, want 1", what, g, n)
		}
	}
	if compressed < 3*6 {
		t.Errorf("%d compressed answers, want at least %d", compressed, 3*6)
	}
}

// TestSharedListGzipMixed: LISTs that accept gzip and LISTs that do not,
// otherwise identical, form two groups (two etcd reads, not one per
// LIST): the first get the compressed body, the others the plain one.
func TestSharedListGzipMixed(t *testing.T) {
	lim := oneBulkSeat(t)
	e := startEnv(t, func(c *proxy.Config) { c.Limiter = lim })
	putConfigMaps(t, e, 0, 100, 20<<10) // 2 MB: over the bulk threshold (1 MiB), so the groups wait for the held seat
	const path = sharedList + "?resourceVersion=0&limit=500"
	_, want, err := rawList(context.Background(), e, path, "")
	if err != nil {
		t.Fatal(err)
	}
	groups := metricInt(t, e, "lazyapi_list_shared_reads_total")
	members := metricInt(t, e, "lazyapi_list_shared_read_members_total")
	release := holdBulkSeat(t, lim)
	gz := []bool{true, false, true, false, true, false, true, false}
	var lists []encodedList
	done := make(chan struct{})
	go func() { lists = concurrentEncodedLists(t, e, gz, path, ""); close(done) }()
	waitMetric(t, e, "lazyapi_list_shared_read_members_total", members+len(gz))
	release()
	<-done
	for i, l := range lists {
		checkEncoded(t, fmt.Sprintf("LIST %d", i), l, want)
	}
	if g := metricInt(t, e, "lazyapi_list_shared_reads_total") - groups; g != 2 {
		t.Errorf("%d etcd reads for 4 gzip and 4 identity LISTs, want 2", g)
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
