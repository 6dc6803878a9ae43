package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

const cmPrefix = "/registry/configmaps/"

var cmSpec = Spec{Name: "configmaps", Prefix: cmPrefix, Namespaced: true}

// configMap returns the key and stored bytes of a ConfigMap.
func configMap(t testing.TB, ns, name string, labels map[string]string, dataBytes int, seed uint64) (string, []byte) {
	t.Helper()
	data := make([]byte, dataBytes)
	for i := range data {
		data[i] = 'a' + byte((seed+uint64(i))%26)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, UID: types.UID("uid-" + ns + "-" + name)},
		Data:       map[string]string{"k": string(data)},
	}
	v, err := storagefmt.Protobuf(cm)
	if err != nil {
		t.Fatal(err)
	}
	return storagefmt.Key("/registry", "configmaps", ns, name), v
}

func put(t testing.TB, cli *clientv3.Client, key string, value []byte) int64 {
	t.Helper()
	resp, err := cli.Put(context.Background(), key, string(value))
	if err != nil {
		t.Fatalf("cannot put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func del(t testing.TB, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Delete(context.Background(), key)
	if err != nil {
		t.Fatalf("cannot delete %s: %v", key, err)
	}
	return resp.Header.Revision
}

func newTestCache(t testing.TB, cli *clientv3.Client, mutate func(*Config)) *Cache {
	t.Helper()
	cfg := Config{Client: cli, MemoryBytes: 256 << 20, Metrics: metrics.NewSet(), RetryInterval: 100 * time.Millisecond}
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// budgetCache is newTestCache with a budget of budget bytes, fills
// retried every retry and warnings logged to the returned observer (the
// refusal tests read the refusal's log line).
func budgetCache(t testing.TB, cli *clientv3.Client, budget int64, retry time.Duration) (*Cache, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.WarnLevel)
	c := newTestCache(t, cli, func(cfg *Config) {
		cfg.MemoryBytes = budget
		cfg.RetryInterval = retry
		cfg.Logger = zap.New(core)
	})
	return c, logs
}

// poll calls f until it returns nil or the deadline passes.
func poll(t testing.TB, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func waitState(t testing.TB, r *Resource, want State) {
	t.Helper()
	poll(t, "wait for state "+want.String(), func() error {
		if s, reason := r.Status(); s != want {
			return fmt.Errorf("state %s (%s)", s, reason)
		}
		return nil
	})
}

type kv struct {
	value string
	rev   int64
}

// etcdState reads prefix from etcd at rev (0: current).
func etcdState(t testing.TB, cli *clientv3.Client, prefix string, rev int64) (map[string]kv, []string, int64) {
	t.Helper()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := cli.Get(context.Background(), prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string]kv, len(resp.Kvs))
	keys := make([]string, 0, len(resp.Kvs))
	for _, x := range resp.Kvs {
		m[string(x.Key)] = kv{string(x.Value), x.ModRevision}
		keys = append(keys, string(x.Key))
	}
	return m, keys, resp.Header.Revision
}

// waitEtcdState polls until r's snapshot is at etcd's current revision (or
// later) and equals etcd's state under cmPrefix, and returns that state.
func waitEtcdState(t testing.TB, what string, r *Resource, cli *clientv3.Client) (map[string]kv, []string, int64) {
	t.Helper()
	want, wantKeys, rev := etcdState(t, cli, cmPrefix, 0)
	poll(t, what, func() error {
		s, err := r.Snapshot(context.Background(), ReadOptions{})
		if err != nil {
			return err
		}
		if s.Rev() < rev {
			return fmt.Errorf("cache at %d, etcd at %d", s.Rev(), rev)
		}
		return diffSnapshot(s, want, wantKeys)
	})
	return want, wantKeys, rev
}

// diffSnapshot compares a snapshot with etcd's state.
func diffSnapshot(s *Snapshot, want map[string]kv, wantKeys []string) error {
	i := 0
	for it := range s.Range(cmPrefix, prefixEnd(cmPrefix)) {
		if i >= len(wantKeys) {
			return fmt.Errorf("snapshot at %d has extra key %q", s.Rev(), it.Key)
		}
		if it.Key != wantKeys[i] {
			return fmt.Errorf("snapshot at %d: key %d is %q, want %q", s.Rev(), i, it.Key, wantKeys[i])
		}
		w := want[it.Key]
		if string(it.Value) != w.value || it.Rev != w.rev {
			return fmt.Errorf("snapshot at %d: %q has rev %d (%d bytes), want rev %d (%d bytes)", s.Rev(), it.Key, it.Rev, len(it.Value), w.rev, len(w.value))
		}
		i++
	}
	if i != len(wantKeys) || s.Len() != len(wantKeys) {
		return fmt.Errorf("snapshot at %d has %d keys (Len %d), want %d", s.Rev(), i, s.Len(), len(wantKeys))
	}
	return nil
}

func TestFillAndWatchRandomOps(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	for i := range 100 {
		k, v := configMap(t, fmt.Sprintf("ns%d", i%3), fmt.Sprintf("cm-%03d", i), nil, 100, uint64(i))
		put(t, cli, k, v)
	}
	put(t, cli, "/registry/secrets/ns0/s", []byte("not a configmap"))
	c := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"configmaps": 2000} })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)

	rng := rand.New(rand.NewPCG(7, 7))
	var checkpoints []int64
	for i := range 1000 {
		ns, name := fmt.Sprintf("ns%d", rng.IntN(3)), fmt.Sprintf("cm-%03d", rng.IntN(150))
		k, v := configMap(t, ns, name, map[string]string{"i": fmt.Sprint(i)}, rng.IntN(300), uint64(i))
		var rev int64
		if rng.IntN(4) == 0 {
			rev = del(t, cli, k)
		} else {
			rev = put(t, cli, k, v)
		}
		if i%100 == 0 {
			checkpoints = append(checkpoints, rev)
		}
	}
	want, wantKeys, rev := waitEtcdState(t, "cache equals etcd", r, cli)
	// A consistent read and Exact reads at past revisions (reconstructed
	// from the history) equal etcd at the same revisions.
	s, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent})
	if err != nil {
		t.Fatalf("consistent read: %v", err)
	}
	if err := diffSnapshot(s, want, wantKeys); err != nil {
		t.Fatal(err)
	}
	for _, cp := range checkpoints {
		s, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadExact, RV: cp})
		if err != nil {
			t.Fatalf("Exact %d: %v", cp, err)
		}
		if s.Rev() != cp {
			t.Fatalf("Exact %d: snapshot at %d", cp, s.Rev())
		}
		w, wk, _ := etcdState(t, cli, cmPrefix, cp)
		if err := diffSnapshot(s, w, wk); err != nil {
			t.Fatal(err)
		}
	}
	// GET by key.
	it, srev, ok, err := r.Get(context.Background(), wantKeys[0], ReadOptions{Mode: ReadAny})
	if err != nil || !ok || string(it.Value) != want[wantKeys[0]].value || srev < rev {
		t.Fatalf("Get(%q) = %v, %d, %v, %v", wantKeys[0], it.Rev, srev, ok, err)
	}
	if _, _, ok, _ := r.Get(context.Background(), cmPrefix+"ns0/absent", ReadOptions{}); ok {
		t.Fatalf("Get of an absent key found it")
	}
	// Budget accounting: the resource holds about its values.
	var valueBytes int64
	for _, x := range want {
		valueBytes += int64(len(x.value))
	}
	if b := r.Bytes(); b < valueBytes || c.UsedBytes() != b {
		t.Fatalf("resource charges %d bytes (cache %d), values are %d", b, c.UsedBytes(), valueBytes)
	}
}

func TestPaginationAtSnapshotWhileWriting(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	for i := range 300 {
		k, v := configMap(t, fmt.Sprintf("ns%d", i%2), fmt.Sprintf("cm-%03d", i), nil, 50, uint64(i))
		put(t, cli, k, v)
	}
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	first, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent})
	if err != nil {
		t.Fatal(err)
	}
	R := first.Rev()
	want, _, _ := etcdState(t, cli, cmPrefix+"ns1/", R)

	writes := make(chan error, 1)
	go func() {
		for i := range 200 {
			k, v := configMap(t, fmt.Sprintf("ns%d", i%2), fmt.Sprintf("cm-%03d", (i*7)%350), nil, 60, uint64(i+1000))
			var err error
			if i%3 == 0 {
				_, err = cli.Delete(context.Background(), k)
			} else {
				_, err = cli.Put(context.Background(), k, string(v))
			}
			if err != nil {
				writes <- err
				return
			}
		}
		writes <- nil
	}()
	// Page through namespace ns1 with limit 40, each page from its own
	// Exact snapshot at R, as a continue token would ask.
	from, to := cmPrefix+"ns1/", prefixEnd(cmPrefix+"ns1/")
	var got []string
	for page := 0; from != ""; page++ {
		s, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadExact, RV: R})
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		next, rem, err := s.page(from, to, 40, nil, func(it Item) error {
			w, ok := want[it.Key]
			if !ok || w.value != string(it.Value) || w.rev != it.Rev {
				return fmt.Errorf("page %d: %q at rev %d is not etcd's state at %d", page, it.Key, it.Rev, R)
			}
			got = append(got, it.Key)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if w := len(want) - len(got); rem != w || (next == "") != (w == 0) {
			t.Fatalf("page %d: next %q remaining %d, want %d", page, next, rem, w)
		}
		from = next
	}
	if len(got) != len(want) {
		t.Fatalf("paged %d items, etcd had %d at %d", len(got), len(want), R)
	}
	if err := <-writes; err != nil {
		t.Fatal(err)
	}
}

// collect reads n events from w.
func collect(t *testing.T, w *Watcher, n int) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var out []Event
	for len(out) < n {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("after %d events: %v", len(out), err)
		}
		if ev.Type == Bookmark && !ev.InitialEventsEnd {
			continue
		}
		out = append(out, ev)
	}
	return out
}

func TestWatchFromHistoryFromZeroAndTooOld(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	k1, v1 := configMap(t, "ns", "a", nil, 10, 1)
	k2, v2 := configMap(t, "ns", "b", nil, 10, 2)
	put(t, cli, k1, v1)
	put(t, cli, k2, v2)
	c := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"configmaps": 10} })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	fillRev := r.Revision()

	// From 0: the current state as ADDED, the end bookmark, then changes.
	w0, err := r.Watch(context.Background(), WatchOptions{Initial: true, InitialEventsEnd: true, Mode: ReadAny})
	if err != nil {
		t.Fatal(err)
	}
	defer w0.Close()
	_, v1b := configMap(t, "ns", "a", nil, 10, 3)
	rUpd := put(t, cli, k1, v1b)
	rDel := del(t, cli, k2)
	evs := collect(t, w0, 5)
	type ev struct {
		typ EventType
		key string
		rev int64
		end bool
	}
	var gotEvs []ev
	for _, e := range evs {
		gotEvs = append(gotEvs, ev{e.Type, e.Key, e.Rev, e.InitialEventsEnd})
	}
	wantEvs := []ev{{Added, k1, fillRev - 1, false}, {Added, k2, fillRev, false}, {Bookmark, "", fillRev, true},
		{Modified, k1, rUpd, false}, {Deleted, k2, rDel, false}}
	if fmt.Sprint(gotEvs) != fmt.Sprint(wantEvs) {
		t.Fatalf("watch from 0:\n got %v\nwant %v", gotEvs, wantEvs)
	}
	if !bytes.Equal(evs[4].Value, v2) || !bytes.Equal(evs[3].PrevValue, v1) || !bytes.Equal(evs[3].Value, v1b) {
		t.Fatalf("event values are not the stored bytes")
	}

	// From history: the events after fillRev.
	wh, err := r.Watch(context.Background(), WatchOptions{RV: fillRev})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	if rev, ok := wh.Bookmark(); ok {
		t.Fatalf("Bookmark() = %d with events pending", rev)
	}
	evs = collect(t, wh, 2)
	if evs[0].Type != Modified || evs[0].Rev != rUpd || evs[1].Type != Deleted || evs[1].Rev != rDel {
		t.Fatalf("watch from %d: %v %d, %v %d", fillRev, evs[0].Type, evs[0].Rev, evs[1].Type, evs[1].Rev)
	}
	// Bookmarks: an idle watcher that asked for them gets the revision
	// etcd reports, after its last event.
	wb, err := r.Watch(context.Background(), WatchOptions{RV: rDel, Bookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/registry/secrets/ns/other", []byte("x")) // advances etcd, not configmaps
	_, _, etcdRev := etcdState(t, cli, "/registry/secrets/", 0)
	c.cfg.BookmarkInterval = time.Millisecond
	poll(t, "bookmark at etcd's revision", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		r.requestProgress()
		e, err := wb.Next(ctx)
		if err != nil {
			return err
		}
		if e.Type != Bookmark || e.Rev < etcdRev {
			return fmt.Errorf("got %v at %d, want BOOKMARK at >= %d", e.Type, e.Rev, etcdRev)
		}
		return nil
	})
	if rev, ok := wb.Bookmark(); !ok || rev < etcdRev {
		t.Fatalf("idle watcher Bookmark() = %d, %v, want >= %d", rev, ok, etcdRev)
	}
	wb.Close()

	// Too old: push the history past fillRev (size 10).
	for i := range 15 {
		_, v := configMap(t, "ns", "a", nil, 10, uint64(10+i))
		put(t, cli, k1, v)
	}
	_, _, last := etcdState(t, cli, cmPrefix, 0)
	poll(t, "cache reaches etcd", func() error {
		if r.Revision() < last {
			return fmt.Errorf("at %d, want %d", r.Revision(), last)
		}
		return nil
	})
	_, err = r.Watch(context.Background(), WatchOptions{RV: fillRev})
	var tooOld *TooOldError
	if !errors.As(err, &tooOld) || !errors.Is(err, ErrTooOld) || tooOld.RV != fillRev || tooOld.Oldest <= fillRev {
		t.Fatalf("watch from %d = %v, want TooOldError", fillRev, err)
	}
	if !strings.HasPrefix(tooOld.Message(), fmt.Sprintf("too old resource version: %d (", fillRev)) {
		t.Fatalf("message %q", tooOld.Message())
	}
	// The watcher from history that never read again fell out of it.
	if _, err := wh.Next(context.Background()); !errors.Is(err, ErrLagging) {
		t.Fatalf("stale watcher: Next = %v, want ErrLagging", err)
	}
	// A future revision: ErrTooLarge after WaitTimeout.
	c.cfg.WaitTimeout = 200 * time.Millisecond
	if _, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadNotOlderThan, RV: last + 100}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("NotOlderThan future = %v, want ErrTooLarge", err)
	}
}

func TestSlowWatcherClosedFastKeepsReceiving(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	c := newTestCache(t, cli, func(c *Config) { c.WatcherLagBytes = 256 << 10 })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	rev := r.Revision()
	slow, err := r.Watch(context.Background(), WatchOptions{RV: rev})
	if err != nil {
		t.Fatal(err)
	}
	fast, err := r.Watch(context.Background(), WatchOptions{RV: rev})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600 // 600 KiB of events: the slow watcher passes the 256 KiB limit
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := range n {
			ev, err := fast.Next(ctx)
			if err != nil {
				got <- fmt.Errorf("fast watcher after %d events: %w", i, err)
				return
			}
			if ev.Type != Added {
				got <- fmt.Errorf("fast watcher event %d is %v", i, ev.Type)
				return
			}
		}
		got <- nil
	}()
	for i := range n {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, 1024, uint64(i))
		put(t, cli, k, v)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	select {
	case <-slow.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("slow watcher was not closed")
	}
	if _, err := slow.Next(context.Background()); !errors.Is(err, ErrLagging) {
		t.Fatalf("slow watcher: %v, want ErrLagging", err)
	}
	if r.lagging.Get() == 0 {
		t.Fatal("lagging watchers metric not incremented")
	}
}

func TestBudgetRefuseAndEvict(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	for i := range 50 {
		k, v := configMap(t, "ns", fmt.Sprintf("cm-%03d", i), nil, 10<<10, uint64(i))
		put(t, cli, k, v)
	}
	for i := range 5 {
		put(t, cli, fmt.Sprintf("/registry/secrets/ns/s-%d", i), bytes.Repeat([]byte("s"), 1000))
	}
	set := metrics.NewSet()
	core, logs := observer.New(zap.InfoLevel)
	c := newTestCache(t, cli, func(c *Config) {
		c.MemoryBytes = 200 << 10
		c.Metrics = set
		c.Logger = zap.New(core)
		c.RetryInterval = time.Hour
	})
	cms := c.Resource(cmSpec)
	waitState(t, cms, StateRefused)
	if _, reason := cms.Status(); !strings.Contains(reason, "MemoryBytes=") {
		t.Fatalf("refusal reason %q does not name the budget's Config field", reason)
	}
	if _, err := cms.Snapshot(context.Background(), ReadOptions{}); !errors.Is(err, ErrNotCached) {
		t.Fatalf("refused resource read: %v, want ErrNotCached", err)
	}
	if c.UsedBytes() != 0 {
		t.Fatalf("refused fill left %d bytes charged", c.UsedBytes())
	}
	secrets := c.Resource(Spec{Name: "secrets", Prefix: "/registry/secrets/", Namespaced: true})
	waitState(t, secrets, StateReady)
	used := c.UsedBytes()
	if used <= 5000 || used > 200<<10 {
		t.Fatalf("used %d bytes after caching 5 secrets of 1000 bytes", used)
	}
	// Grow secrets past the budget: the resource is evicted, not grown.
	for i := range 40 {
		put(t, cli, fmt.Sprintf("/registry/secrets/ns/big-%d", i), bytes.Repeat([]byte("b"), 8<<10))
		if c.UsedBytes() > 200<<10 {
			t.Fatalf("used %d bytes, budget %d", c.UsedBytes(), 200<<10)
		}
	}
	waitState(t, secrets, StateEvicted)
	for _, st := range c.Statuses() {
		if st.Name == "secrets" && (st.State != StateEvicted || st.Bytes != 0 || !strings.Contains(st.Reason, "grew past")) {
			t.Fatalf("Statuses: %+v", st)
		}
	}
	if c.UsedBytes() != 0 {
		t.Fatalf("eviction left %d bytes charged", c.UsedBytes())
	}
	for _, want := range []string{"resource not cached: it does not fit", "resource evicted from the cache"} {
		if logs.FilterMessageSnippet(want).Len() != 1 {
			t.Errorf("no log line %q: %v", want, logs.All())
		}
	}
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	for _, want := range []string{
		`lazyapi_cache_not_cached_total{resource="configmaps",reason="too_large"} 1`,
		`lazyapi_cache_not_cached_total{resource="secrets",reason="evicted"} 1`,
		`lazyapi_cache_requests_total{resource="configmaps",result="miss"} 1`,
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
	// Disabled by Config.Sizes (a size of 0) and Config.Disabled.
	c2 := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"configmaps": 0} })
	if s, reason := c2.Resource(cmSpec).Status(); s != StateDisabled || !strings.Contains(reason, `Sizes["configmaps"]`) {
		t.Fatalf("configmaps#0: %s %q", s, reason)
	}
	c3 := newTestCache(t, cli, func(c *Config) { c.Disabled = true })
	if _, err := c3.Resource(cmSpec).Watch(context.Background(), WatchOptions{}); !errors.Is(err, ErrNotCached) {
		t.Fatalf("Disabled cache watch: %v", err)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	k, v := configMap(t, "ns", "a", nil, 10, 1)
	put(t, cli, k, v)
	// Let the client's own goroutines settle before counting.
	if _, err := cli.Get(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	c, err := New(Config{Client: cli, MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Resource(cmSpec)
	sec := c.Resource(Spec{Name: "secrets", Prefix: "/registry/secrets/"})
	waitState(t, r, StateReady)
	waitState(t, sec, StateReady)
	// Drop stops one resource (a deleted CRD) and returns its budget.
	used := c.UsedBytes()
	put(t, cli, "/registry/secrets/s", []byte("secret"))
	poll(t, "secret cached", func() error {
		if c.UsedBytes() == used {
			return errors.New("not yet")
		}
		return nil
	})
	c.Drop("/registry/secrets/")
	if s, _ := sec.Status(); s != StateClosed || c.UsedBytes() != r.Bytes() {
		t.Fatalf("after Drop: state %s, %d bytes charged, configmaps hold %d", s, c.UsedBytes(), r.Bytes())
	}
	w, err := r.Watch(context.Background(), WatchOptions{Initial: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Next(context.Background()); err == nil {
		// the initial ADDED may come first; then the end
		if _, err := w.Next(context.Background()); !errors.Is(err, ErrClosed) {
			t.Fatalf("watch after Close: %v, want ErrClosed", err)
		}
	}
	if s, _ := r.Status(); s != StateClosed {
		t.Fatalf("state after Close: %s", s)
	}
	if c.UsedBytes() != 0 {
		t.Fatalf("%d bytes charged after Close", c.UsedBytes())
	}
	poll(t, "goroutines return to the count before New", func() error {
		if n := runtime.NumGoroutine(); n > before {
			return fmt.Errorf("%d goroutines, %d before", n, before)
		}
		return nil
	})
}

func TestWatchSelectorMovesInAndOut(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	c := newTestCache(t, cli, nil)
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	rev := r.Revision()
	sel := func(a Attrs) bool {
		if !a.Valid() {
			t.Errorf("attrs of %s/%s not derived", a.Namespace(), a.Name())
		}
		v, ok := a.Label("app")
		return ok && v == "web" && a.Namespace() == "ns"
	}
	w, err := r.Watch(context.Background(), WatchOptions{RV: rev, Filter: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	k, out1 := configMap(t, "ns", "a", map[string]string{"app": "db"}, 10, 1)
	put(t, cli, k, out1) // not selected: nothing
	_, in1 := configMap(t, "ns", "a", map[string]string{"app": "web", "tier": "x"}, 10, 2)
	rIn := put(t, cli, k, in1) // moves in: ADDED
	_, in2 := configMap(t, "ns", "a", map[string]string{"app": "web"}, 10, 3)
	rMod := put(t, cli, k, in2) // stays in: MODIFIED
	_, out2 := configMap(t, "ns", "a", map[string]string{"app": "db"}, 10, 4)
	rOut := put(t, cli, k, out2) // moves out: DELETED with the previous state
	k2, other := configMap(t, "other", "a", map[string]string{"app": "web"}, 10, 5)
	put(t, cli, k2, other) // other namespace: nothing
	_, in3 := configMap(t, "ns", "a", map[string]string{"app": "web"}, 10, 6)
	rIn2 := put(t, cli, k, in3)
	rDel := del(t, cli, k) // deleted while in: DELETED
	evs := collect(t, w, 5)
	type ev struct {
		typ EventType
		rev int64
		val []byte
	}
	want := []ev{{Added, rIn, in1}, {Modified, rMod, in2}, {Deleted, rOut, in2}, {Added, rIn2, in3}, {Deleted, rDel, in3}}
	for i, e := range evs {
		if e.Type != want[i].typ || e.Rev != want[i].rev || !bytes.Equal(e.Value, want[i].val) {
			t.Errorf("event %d: %v at %d, want %v at %d (value equal: %v)", i, e.Type, e.Rev, want[i].typ, want[i].rev, bytes.Equal(e.Value, want[i].val))
		}
	}
	// An initial-events watch in one namespace with the selector: only the
	// selected objects of the namespace, then the end bookmark.
	kx, x := configMap(t, "ns", "x", map[string]string{"app": "web"}, 10, 7)
	put(t, cli, kx, x)
	ky, y := configMap(t, "ns", "y", map[string]string{"app": "db"}, 10, 8)
	put(t, cli, ky, y)
	wi, err := r.Watch(context.Background(), WatchOptions{Initial: true, InitialEventsEnd: true, Mode: ReadConsistent,
		From: cmPrefix + "ns/", To: prefixEnd(cmPrefix + "ns/"), Filter: sel})
	if err != nil {
		t.Fatal(err)
	}
	defer wi.Close()
	evs = collect(t, wi, 2)
	if evs[0].Type != Added || evs[0].Key != kx || evs[1].Type != Bookmark || !evs[1].InitialEventsEnd {
		t.Fatalf("initial events: %v %s, %v %v", evs[0].Type, evs[0].Key, evs[1].Type, evs[1].InitialEventsEnd)
	}
	// Derived data: labels and fields read from the stored bytes.
	s, err := r.Snapshot(context.Background(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	it, ok := s.Get(k2)
	if !ok {
		t.Fatalf("snapshot lacks %s", k2)
	}
	a := it.Attrs
	if a.Namespace() != "other" || a.Name() != "a" || a.LabelSet().Get("app") != "web" || a.LabelSet().Has("tier") {
		t.Fatalf("attrs of %s: ns %q name %q app %q", k2, a.Namespace(), a.Name(), a.LabelSet().Get("app"))
	}
	if v, ok := a.Field("metadata.name"); !ok || v != "a" {
		t.Fatalf("Field(metadata.name) = %q, %v", v, ok)
	}
}

func TestAttrsFieldsOfPods(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"a": "1", "b": "2"}},
		Spec:       corev1.PodSpec{NodeName: "node-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
	}
	v, err := storagefmt.Protobuf(pod)
	if err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/registry/pods/ns/p", v)
	c := newTestCache(t, cli, nil)
	r := c.Resource(Spec{Name: "pods", Prefix: "/registry/pods/", Namespaced: true, Fields: []string{"spec.nodeName", "status.phase", "status.podIPs", "spec.schedulerName"}})
	waitState(t, r, StateReady)
	s, err := r.Snapshot(context.Background(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	it, ok := s.Get("/registry/pods/ns/p")
	if !ok || !it.Attrs.Valid() {
		t.Fatalf("pod missing or attrs not derived: %v", ok)
	}
	fs := it.Attrs.FieldSet()
	tests := []struct{ path, want string }{
		{"spec.nodeName", "node-1"}, {"status.phase", "Running"}, {"spec.schedulerName", ""},
		{"status.podIPs", ""}, // a list: not a field the cache derives (read as absent)
		{"metadata.name", "p"}, {"metadata.namespace", "ns"},
	}
	for _, tt := range tests {
		if got := fs.Get(tt.path); got != tt.want {
			t.Errorf("Field(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	var kvs []string
	it.Attrs.Labels(func(k, v string) { kvs = append(kvs, k+"="+v) })
	if strings.Join(kvs, ",") != "a=1,b=2" {
		t.Errorf("labels %v", kvs)
	}
	// apimachinery's parsed selectors match through the adapters.
	for _, tt := range []struct {
		lsel, fsel string
		want       bool
	}{
		{"a=1,b in (2,3)", "spec.nodeName=node-1,status.phase!=Pending", true},
		{"a=1,!c", "metadata.name=p,metadata.namespace=ns", true},
		{"a=2", "", false},
		{"", "spec.nodeName=node-2", false},
	} {
		ls, err := labels.Parse(tt.lsel)
		if err != nil {
			t.Fatal(err)
		}
		fsel, err := fields.ParseSelector(tt.fsel)
		if err != nil {
			t.Fatal(err)
		}
		if got := ls.Matches(it.Attrs.LabelSet()) && fsel.Matches(it.Attrs.FieldSet()); got != tt.want {
			t.Errorf("labels %q fields %q match = %v, want %v", tt.lsel, tt.fsel, got, tt.want)
		}
	}
	// Stored as JSON (--storage-media-type=application/json): same attrs.
	pod.Name = "j"
	jv, err := storagefmt.JSON(pod)
	if err != nil {
		t.Fatal(err)
	}
	rev := put(t, cli, "/registry/pods/ns/j", jv)
	jt, _, ok, err := r.Get(context.Background(), "/registry/pods/ns/j", ReadOptions{Mode: ReadNotOlderThan, RV: rev})
	if err != nil || !ok || !jt.Attrs.Valid() {
		t.Fatalf("JSON pod: %v %v", ok, err)
	}
	if got := jt.Attrs.FieldSet().Get("status.phase"); got != "Running" {
		t.Errorf("JSON pod status.phase = %q", got)
	}
	if got, _ := jt.Attrs.Label("b"); got != "2" {
		t.Errorf("JSON pod label b = %q", got)
	}
}

func TestConsistentReadCatchesUpAndExactFallback(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client
	k, v := configMap(t, "ns", "a", nil, 10, 1)
	put(t, cli, k, v)
	c := newTestCache(t, cli, func(c *Config) { c.Sizes = map[string]int{"configmaps": 3} })
	r := c.Resource(cmSpec)
	waitState(t, r, StateReady)
	fillRev := r.Revision()
	// Writes elsewhere move etcd's revision, not the configmaps' events: a
	// consistent read learns it through a progress notification.
	var etcdRev int64
	for i := range 5 {
		etcdRev = put(t, cli, fmt.Sprintf("/registry/secrets/ns/s%d", i), []byte("x"))
	}
	s, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent})
	if err != nil {
		t.Fatalf("consistent read: %v", err)
	}
	if s.Rev() < etcdRev || s.Len() != 1 {
		t.Fatalf("consistent read at %d with %d items, etcd at %d", s.Rev(), s.Len(), etcdRev)
	}
	// Exact at a revision the history no longer covers: fall back.
	for i := range 5 {
		_, v := configMap(t, "ns", "a", nil, 10, uint64(i+2))
		put(t, cli, k, v)
	}
	if _, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadConsistent}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Snapshot(context.Background(), ReadOptions{Mode: ReadExact, RV: fillRev}); !errors.Is(err, ErrSnapshotUnavailable) {
		t.Fatalf("Exact %d after the history moved on: %v, want ErrSnapshotUnavailable", fillRev, err)
	}
	if r.fallbacks.Get() != 1 {
		t.Fatalf("fallbacks metric = %d, want 1", r.fallbacks.Get())
	}
	// A watch without a revision and without initial events starts now.
	w, err := r.Watch(context.Background(), WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.More() {
		t.Fatal("a watch from now has events before any change")
	}
	rev := del(t, cli, k)
	if evs := collect(t, w, 1); evs[0].Type != Deleted || evs[0].Rev != rev {
		t.Fatalf("got %v at %d, want DELETED at %d", evs[0].Type, evs[0].Rev, rev)
	}
}
