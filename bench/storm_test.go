package bench

import (
	"compress/gzip"
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// TestReflectorBackoff: the storm's re-list waits are client-go's
// reflector back-off, 800 ms doubling up to 30 s, jittered by up to as
// much again.
func TestReflectorBackoff(t *testing.T) {
	for n, base := range map[int]time.Duration{0: 800 * time.Millisecond, 1: 1600 * time.Millisecond,
		5: 25600 * time.Millisecond, 6: 30 * time.Second, 100: 30 * time.Second} {
		for range 20 {
			if d := reflectorBackoff(n); d < base || d >= 2*base {
				t.Fatalf("reflectorBackoff(%d) = %s, want in [%s, %s)", n, d, base, 2*base)
			}
		}
	}
}

// TestStormInformersStripData: with --informer-transform=strip-data the
// storm's client-go informers (protobuf, WatchList) count every Secret's
// data as decoded from etcd and keep its metadata only, and a count other
// than etcd's marks the informer wrong.
func TestStormInformersStripData(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sec, _ := LookupKind("secret")
	const n = 30
	if _, err := Seed(ctx, srv.Client, SeedConfig{Kind: sec, Count: n, Namespaces: 1, Size: SizeDist{Kind: "fixed", Size: 16 << 10}}); err != nil {
		t.Fatal(err)
	}
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	want, err := storedDataBytes(ctx, srv.Client, "/registry", sec, ns)
	if err != nil {
		t.Fatal(err)
	}
	if want < n*8<<10 {
		t.Fatalf("etcd's %d Secrets hold %d bytes of data; want about 16 KiB each", n, want)
	}
	hs := httptest.NewServer(NewRefServer(srv.Client, "/registry"))
	t.Cleanup(hs.Close)
	target := Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}

	// One informer: what its store keeps.
	cfg, err := target.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	inf, read, err := newStormInformer(cfg, &Scenario{Kind: sec, Namespace: ns}, InformerTransformStripData)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	go inf.Run(stop)
	synced := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	close(stop)
	if !synced {
		t.Fatal("informer not synced")
	}
	if got := read.Load(); got != want {
		t.Errorf("transform counted %d bytes of data, etcd holds %d", got, want)
	}
	objs := inf.GetStore().List()
	if len(objs) != n {
		t.Fatalf("store holds %d objects, want %d", len(objs), n)
	}
	for _, o := range objs {
		s := o.(*corev1.Secret)
		if s.Data != nil || s.StringData != nil || s.ManagedFields != nil || s.Name == "" || s.Namespace != ns || s.ResourceVersion == "" {
			t.Fatalf("stored %s/%s rv %q: %d data keys, managedFields %v; want metadata only", s.Namespace, s.Name, s.ResourceVersion, len(s.Data), s.ManagedFields)
		}
	}

	// The storm's informers row: checked against etcd's count.
	scfg := StormConfig{Kind: sec, Timeout: 30 * time.Second, InformerTransform: InformerTransformStripData}
	row := StormRow{Mode: StormInformers, Clients: 2}
	r := runStormRow(ctx, target, scfg, row, false, ns, n, want)
	if r.Synced != 2 || r.Wrong != 0 || r.Errors != 0 || r.DataBytes != 2*want || r.HarnessPeakRSS == 0 {
		t.Errorf("storm row %+v; want 2 synced, %d bytes of data counted, the harness's RSS", r, 2*want)
	}
	r = runStormRow(ctx, target, scfg, row, false, ns, n, want+1)
	if r.Synced != 2 || r.Wrong != 2 {
		t.Errorf("storm row expecting one byte more: %+v; want 2 synced wrong", r)
	}
	if err := CheckInformerTransform("strip"); err == nil {
		t.Error("CheckInformerTransform(strip) = nil, want an error")
	}
}

// fiveConfigMaps seeds 5 ConfigMaps of 1 KiB in a real etcd and returns a
// context bounded by a minute, the kind, and a reference server reading
// that etcd.
func fiveConfigMaps(t *testing.T) (context.Context, Kind, *RefServer) {
	t.Helper()
	srv := etcdtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cm, _ := LookupKind("configmap")
	if _, err := Seed(ctx, srv.Client, SeedConfig{Kind: cm, Count: 5, Namespaces: 1, Size: SizeDist{Kind: "fixed", Size: 1024}}); err != nil {
		t.Fatal(err)
	}
	return ctx, cm, NewRefServer(srv.Client, "/registry")
}

// sourcesServer serves rs over TLS with HTTP/2 as "reference" and records
// where each request came from as key(r); take returns the keys recorded
// since its last call, sorted.
func sourcesServer(t *testing.T, rs http.Handler, key func(*http.Request) string) (target Target, take func() []string) {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[key(r)] = true
		mu.Unlock()
		rs.ServeHTTP(w, r)
	}))
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	return Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}, func() []string {
		mu.Lock()
		defer mu.Unlock()
		got := slices.Sorted(maps.Keys(seen))
		clear(seen)
		return got
	}
}

// TestStormInformersOwnConnections: the storm's informers share client-go's
// cached transport (their requests on one HTTP/2 connection to a server
// that speaks it) unless OwnConnections gives each its own.
func TestStormInformersOwnConnections(t *testing.T) {
	ctx, cm, rs := fiveConfigMaps(t)
	target, take := sourcesServer(t, rs, func(r *http.Request) string { return r.Proto + " " + r.RemoteAddr })
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	row := StormRow{Mode: StormInformers, Clients: 3}
	for own, want := range map[bool]int{false: 1, true: 3} {
		take()
		r := runStormRow(ctx, target, StormConfig{Kind: cm, Timeout: 30 * time.Second, OwnConnections: own}, row, false, ns, 5, -1)
		got := take()
		if r.Synced != 3 || r.Wrong != 0 || len(got) != want || !strings.HasPrefix(got[0], "HTTP/2.0 ") {
			t.Errorf("own connections %v: %d synced (%d wrong, %s), requests from %v; want 3 synced over %d HTTP/2 connections", own, r.Synced, r.Wrong, r.FirstError, got, want)
		}
	}
}

// TestStormInformersDistinctAddresses: with DistinctAddresses each
// informer connects from its own loopback address (127.0.1.x), as
// informers in different pods do, so that a server keying clients by
// address sees one client per informer.
func TestStormInformersDistinctAddresses(t *testing.T) {
	ctx, cm, rs := fiveConfigMaps(t)
	target, take := sourcesServer(t, rs, func(r *http.Request) string {
		host, _, _ := strings.Cut(r.RemoteAddr, ":")
		return host
	})
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	r := runStormRow(ctx, target, StormConfig{Kind: cm, Timeout: 30 * time.Second, DistinctAddresses: true}, StormRow{Mode: StormInformers, Clients: 3}, false, ns, 5, -1)
	got := take()
	want := []string{"127.0.1.1", "127.0.1.2", "127.0.1.3"}
	if r.Synced != 3 || r.Wrong != 0 || !slices.Equal(got, want) {
		t.Errorf("%d synced (%d wrong, %s), requests from %v; want 3 synced from %v", r.Synced, r.Wrong, r.FirstError, got, want)
	}
	if a := stormLocalAddr(254).String(); a != "127.0.2.1" {
		t.Errorf("stormLocalAddr(254) = %s, want 127.0.2.1", a)
	}
}

// TestStormListWatchGzip: with Gzip the LIST+WATCH streams ask for gzip
// (Go's transport: Accept-Encoding: gzip) and decode a compressed LIST,
// counted; without it they ask for none.
func TestStormListWatchGzip(t *testing.T) {
	ctx, cm, rs := fiveConfigMaps(t)
	var asked atomic.Int64 // requests that accepted gzip
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			rs.ServeHTTP(w, r)
			return
		}
		asked.Add(1)
		if r.URL.Query().Get("watch") != "" {
			rs.ServeHTTP(w, r)
			return
		}
		// The LIST compressed, as lazyapi and kube-apiserver send a large one.
		rec := httptest.NewRecorder()
		rs.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(rec.Code)
		z := gzip.NewWriter(w)
		_, _ = z.Write(rec.Body.Bytes())
		_ = z.Close()
	}))
	hs.StartTLS()
	t.Cleanup(hs.Close)
	target := Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	row := StormRow{Mode: StormListWatch, Clients: 3}
	for _, gz := range []bool{false, true} {
		asked.Store(0)
		r := runStormRow(ctx, target, StormConfig{Kind: cm, Timeout: 30 * time.Second, Gzip: gz}, row, false, ns, 5, -1)
		want := map[bool]int64{false: 0, true: 3}[gz]
		if r.Synced != 3 || r.Wrong != 0 || r.Gzipped != want || asked.Load() != 2*want {
			t.Errorf("gzip %v: %d synced (%d wrong, %s), %d compressed LISTs, %d requests asked for gzip; want 3 synced, %d compressed, %d asked",
				gz, r.Synced, r.Wrong, r.FirstError, r.Gzipped, asked.Load(), want, 2*want)
		}
	}
}

// TestStormStreamsHeldOpen: a synced stream stays open, as a reflector's
// watch does, until the row ends (every stream synced), with a
// reflector's timeoutSeconds (5 to 10 minutes); --close-streams closes it
// at once (issue 29: closing streams at the bookmark measured storms no
// reflector makes).
func TestStormStreamsHeldOpen(t *testing.T) {
	ctx, cm, rs := fiveConfigMaps(t)
	var mu sync.Mutex
	var ended []time.Time
	var timeouts []string
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" {
			rs.ServeHTTP(w, r)
			return
		}
		rs.ServeHTTP(w, r)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		<-r.Context().Done() // held until the client closes the stream
		mu.Lock()
		ended = append(ended, time.Now())
		timeouts = append(timeouts, r.URL.Query().Get("timeoutSeconds"))
		mu.Unlock()
	}))
	hs.StartTLS()
	t.Cleanup(hs.Close)
	target := Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	for _, mode := range []string{StormWatchList, StormListWatch} {
		mu.Lock()
		ended, timeouts = nil, nil
		mu.Unlock()
		start := time.Now()
		r := runStormRow(ctx, target, StormConfig{Kind: cm, Timeout: 30 * time.Second}, StormRow{Mode: mode, Clients: 3}, false, ns, 5, -1)
		if r.Synced != 3 {
			t.Fatalf("%s: %d synced (%s), want 3", mode, r.Synced, r.FirstError)
		}
		allSynced := start.Add(r.AllTime)
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(ended)
			mu.Unlock()
			if n == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		for i, e := range ended {
			if e.Before(allSynced) {
				t.Errorf("%s: a stream closed %s before the last one synced, want held open to the row's end", mode, allSynced.Sub(e))
			}
			if n, err := strconv.Atoi(timeouts[i]); err != nil || n < 300 || n >= 600 {
				t.Errorf("%s: timeoutSeconds=%q, want a reflector's, 300 to 599", mode, timeouts[i])
			}
		}
		if len(ended) != 3 {
			t.Errorf("%s: %d streams ended after the row, want 3", mode, len(ended))
		}
		mu.Unlock()
	}
}

// TestStormHold: with Hold each synced stream, and each synced informer's
// watch, stays open that long after its own sync and is then closed, and
// the row ends when the last hold does (issue 29's storm: watches held
// 150 s, so that the streams still syncing compete with them).
func TestStormHold(t *testing.T) {
	ctx, cm, rs := fiveConfigMaps(t)
	var mu sync.Mutex
	var ended []time.Time // when each watch request ended
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.ServeHTTP(w, r) // a watch: until the client closes it
		if r.URL.Query().Get("watch") != "" {
			mu.Lock()
			ended = append(ended, time.Now())
			mu.Unlock()
		}
	}))
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	target := Target{Name: "reference", URL: hs.URL, PID: os.Getpid()}
	ns := NamespaceName(DefaultNamespacePrefix, 0)
	const hold = 1500 * time.Millisecond
	for _, mode := range []string{StormWatchList, StormListWatch, StormInformers} {
		mu.Lock()
		ended = nil
		mu.Unlock()
		start := time.Now()
		r := runStormRow(ctx, target, StormConfig{Kind: cm, Timeout: 30 * time.Second, Hold: hold}, StormRow{Mode: mode, Clients: 3}, false, ns, 5, -1)
		returned := time.Since(start)
		if r.Synced != 3 || r.Errors != 0 {
			t.Fatalf("%s: %d synced, %d errors (%s), want 3 synced", mode, r.Synced, r.Errors, r.FirstError)
		}
		if r.Ended < r.AllTime+hold || r.Ended > returned {
			t.Errorf("%s: row ended at %s, all synced at %s, returned at %s; want the end after the last sync's hold of %s", mode, r.Ended, r.AllTime, returned, hold)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(ended)
			mu.Unlock()
			if n >= 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		if len(ended) < 3 {
			t.Errorf("%s: %d watches ended after the row, want 3", mode, len(ended))
		}
		for _, e := range ended {
			if d := e.Sub(start); d < hold || d > r.AllTime+hold+2*time.Second {
				t.Errorf("%s: a watch ended %s after the start; want between the hold (%s) and the last sync plus the hold (%s) and 2 s", mode, d, hold, r.AllTime+hold)
			}
		}
		mu.Unlock()
	}
}

// TestStripDataCountsOnce: the strip-data transform counts an object's data
// once per resourceVersion, so that a reflector that lists again after its
// stream was cut (issue 29's storm: 16 informers whose streams lazyapi
// ended by --write-timeout counted 8 objects twice) counts what its store
// holds; a new resourceVersion replaces the count.
func TestStripDataCountsOnce(t *testing.T) {
	var read atomic.Int64
	tf := stripData(&read)
	cm := func(rv, value string) *corev1.ConfigMap {
		c := &corev1.ConfigMap{Data: map[string]string{"k": value}}
		c.Namespace, c.Name, c.ResourceVersion = "ns", "a", rv
		return c
	}
	for i, step := range []struct {
		obj  *corev1.ConfigMap
		want int64
	}{
		{cm("5", "0123456789"), 11},
		{cm("5", "0123456789"), 11}, // listed again
		{cm("6", "0123"), 5},        // updated
	} {
		got, err := tf(step.obj)
		if err != nil {
			t.Fatal(err)
		}
		if c := got.(*corev1.ConfigMap); c.Data != nil || read.Load() != step.want {
			t.Errorf("step %d: counted %d, data %v; want %d counted, data stripped", i, read.Load(), c.Data, step.want)
		}
		if _, err := tf(got); err != nil || read.Load() != step.want { // transformed again (idempotent)
			t.Errorf("step %d: the transform applied again: counted %d (%v), want %d", i, read.Load(), err, step.want)
		}
	}
}
