package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
	"github.com/lazyapi/lazyapi/internal/testing/etcdtest"
)

// The etcd fault test: a real 3-member etcd cluster, one lazyapi per
// member (its own member first in --etcd-servers; two of them prefer it,
// --etcd-preferred-server, the third reads from all), client-go informers
// (classic and WatchList) and paged consistent LISTs and GETs spread over the
// three, while ConfigMaps are written and etcd's leader is killed, a member
// is stopped and restarted, a compaction and a defragmentation run and the
// whole cluster is restarted. It checks:
//   - no consistent read returns data older than a write etcd acknowledged
//     before the read was sent (write log), and every consistent LIST is
//     etcd's state at its resourceVersion exactly;
//   - every error a client sees is a documented Status: 503 with
//     Retry-After while etcd is unavailable, 504, 429 with Retry-After,
//     410 Expired for a compacted continue token, or a LIST stream aborted
//     mid-way (docs/operating.md, "Running against a real cluster's etcd");
//   - while the whole cluster is down, resourceVersion=0 LISTs are served
//     from the cache, consistent ones get 503, /readyz fails naming etcd;
//   - afterwards every informer and every cache equal etcd's state.

// faultKeys are ConfigMaps only ever updated (never deleted) by the writer,
// for the GET check.
const faultKeys = 10

// writeLog records writes etcd acknowledged.
type writeLog struct {
	mu     sync.Mutex
	acked  int64            // highest acknowledged revision
	byKey  map[string]int64 // ns/name -> revision of its last acknowledged put (faultKeys only)
	writes int
	failed int
}

func (w *writeLog) ack(key string, rev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acked = max(w.acked, rev)
	w.writes++
	if key != "" {
		w.byKey[key] = max(w.byKey[key], rev)
	}
}

func (w *writeLog) bound(key string) (acked, keyRev int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.byKey[key]
}

// clientErrors counts the errors clients saw by kind; violations are the
// ones that are not a documented Status.
type clientErrors struct {
	mu         sync.Mutex
	kinds      map[string]int
	violations []string
}

func (c *clientErrors) add(kind string, violation bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[kind]++
	if violation && len(c.violations) < 20 {
		c.violations = append(c.violations, kind)
	}
}

// total is the number of errors seen so far.
func (c *clientErrors) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, k := range c.kinds {
		n += k
	}
	return n
}

// checkStatus classifies a non-200 answer: a Status with a documented code
// and reason (and Retry-After where lazyapi promises it), else a violation.
func (c *clientErrors) checkStatus(who string, resp *http.Response, body []byte) {
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" {
		c.add(fmt.Sprintf("%s: %d without a Status: %.100q", who, resp.StatusCode, body), true)
		return
	}
	retry := resp.Header.Get("Retry-After")
	kind := fmt.Sprintf("%d %s", resp.StatusCode, st.Reason)
	switch {
	case resp.StatusCode == 503 && st.Reason == metav1.StatusReasonServiceUnavailable && retry != "",
		resp.StatusCode == 429 && st.Reason == metav1.StatusReasonTooManyRequests && retry != "",
		resp.StatusCode == 504 && st.Reason == metav1.StatusReasonTimeout,
		resp.StatusCode == 410 && st.Reason == metav1.StatusReasonExpired:
		c.add(kind, false)
	default:
		c.add(fmt.Sprintf("%s: %s (Retry-After %q): %s", who, kind, retry, st.Message), true)
	}
}

// checkClientErr classifies an error client-go returned.
func (c *clientErrors) checkClientErr(who string, err error) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		if errors.Is(err, context.Canceled) {
			return
		}
		c.add(fmt.Sprintf("%s: not a Status: %v", who, err), true)
		return
	}
	st := se.Status()
	kind := fmt.Sprintf("%d %s", st.Code, st.Reason)
	switch st.Reason {
	case metav1.StatusReasonServiceUnavailable, metav1.StatusReasonTooManyRequests, metav1.StatusReasonTimeout,
		metav1.StatusReasonExpired, metav1.StatusReasonGone:
		c.add("client-go "+kind, false)
	default:
		c.add(fmt.Sprintf("%s: client-go %s: %s", who, kind, st.Message), true)
	}
}

// faultInformer is newInformer with every error of its LIST and WATCH calls
// checked.
func faultInformer(url, format string, watchList bool, errs *clientErrors) testInformer {
	cfg := &rest.Config{Host: url, QPS: -1, ContentConfig: rest.ContentConfig{
		ContentType: "application/" + format, AcceptContentTypes: "application/" + format}}
	if format == "protobuf" {
		cfg.ContentType, cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf", "application/vnd.kubernetes.protobuf"
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	mode := "watchlist"
	if !watchList {
		mode = "classic"
	}
	name := mode + "/" + format + "@" + url
	lists, initial := new(atomic.Int64), new(atomic.Int64)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := cs.CoreV1().ConfigMaps("").List(ctx, o)
			if err != nil {
				errs.checkClientErr(name+" LIST", err)
			} else {
				lists.Add(1)
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := cs.CoreV1().ConfigMaps("").Watch(ctx, o)
			if err != nil {
				errs.checkClientErr(name+" WATCH", err)
			} else if o.SendInitialEvents != nil && *o.SendInitialEvents {
				initial.Add(1)
			}
			return w, err
		},
	}
	var lister cache.ListerWatcher = lw
	if !watchList {
		lister = classicLW{lw}
	}
	inf := cache.NewSharedIndexInformer(lister, &corev1.ConfigMap{}, 0, cache.Indexers{})
	return testInformer{name: name, inf: inf, lists: lists, initial: initial}
}

// faultReader sends consistent paged LISTs and GETs to one lazyapi and
// checks each answer against the write log and etcd.
type faultReader struct {
	url   string
	cli   *clientv3.Client // the oracle: etcd at the LIST's revision
	log   *writeLog
	errs  *clientErrors
	lists atomic.Int64 // consistent LISTs completed and checked
	gets  atomic.Int64
	stale atomic.Int64
	exact atomic.Int64 // LISTs compared to etcd at their revision
	mu    sync.Mutex
	bad   []string
}

func (r *faultReader) fail(format string, args ...any) {
	r.stale.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bad) < 10 {
		r.bad = append(r.bad, fmt.Sprintf(format, args...))
	}
}

func (r *faultReader) get(ctx context.Context, path string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", r.url+path, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// run reads until ctx ends.
func (r *faultReader) run(ctx context.Context, rnd *rand.Rand) {
	for ctx.Err() == nil {
		if rnd.IntN(3) == 0 {
			r.list(ctx)
		} else {
			r.getOne(ctx, rnd.IntN(faultKeys))
		}
	}
}

// list reads all ConfigMaps in pages of 100 with no resourceVersion
// (consistent), then checks the list's revision against the write log and
// its items against etcd at that revision.
func (r *faultReader) list(ctx context.Context) {
	acked, _ := r.log.bound("")
	items := map[string]string{}
	cont, listRV := "", ""
	for {
		path := "/api/v1/configmaps?limit=100"
		if cont != "" {
			path += "&continue=" + cont
		}
		resp, body, err := r.get(ctx, path)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// A LIST aborted mid-stream when etcd failed under it: the
			// client sees an incomplete response (documented), never a
			// short list.
			r.errs.add("LIST stream aborted", false)
			return
		}
		if resp.StatusCode != 200 {
			r.errs.checkStatus("LIST", resp, body)
			backoff(ctx)
			return
		}
		var l corev1.ConfigMapList
		if err := json.Unmarshal(body, &l); err != nil {
			r.errs.add("LIST stream aborted", false)
			return
		}
		if listRV == "" {
			listRV = l.ResourceVersion
		} else if l.ResourceVersion != listRV {
			r.fail("LIST pages at resourceVersion %s then %s", listRV, l.ResourceVersion)
			return
		}
		for _, cm := range l.Items {
			items[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	rv, err := strconv.ParseInt(listRV, 10, 64)
	if err != nil {
		r.fail("LIST resourceVersion %q", listRV)
		return
	}
	if rv < acked {
		r.fail("stale LIST: resourceVersion %d, but revision %d was acknowledged before it was sent", rv, acked)
	}
	r.lists.Add(1)
	// etcd at the list's revision is the oracle (unless compacted since).
	resp, err := r.cli.Get(ctx, "/registry/configmaps/", clientv3.WithPrefix(), clientv3.WithRev(rv), clientv3.WithKeysOnly())
	if err != nil {
		return
	}
	want := map[string]string{}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), "/registry/configmaps/")
		want[k] = strconv.FormatInt(kv.ModRevision, 10)
	}
	if !maps.Equal(want, items) {
		r.fail("LIST at resourceVersion %d differs from etcd at that revision: %s", rv, diffStates(want, items))
	}
	r.exact.Add(1)
}

// backoff waits a little after an error, as a client honouring Retry-After
// would (shorter, to keep the test's reads dense).
func backoff(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// getOne GETs one of the faultKeys ConfigMaps and checks that it is not
// older than its last acknowledged write.
func (r *faultReader) getOne(ctx context.Context, i int) {
	ns, name := (&churner{}).key(i)
	_, keyRev := r.log.bound(ns + "/" + name)
	resp, body, err := r.get(ctx, "/api/v1/namespaces/"+ns+"/configmaps/"+name)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		r.errs.add("GET: "+err.Error(), true)
		return
	}
	if resp.StatusCode != 200 {
		r.errs.checkStatus("GET", resp, body)
		backoff(ctx)
		return
	}
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil {
		r.errs.add("GET: bad body: "+err.Error(), true)
		return
	}
	rv, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
	if rv < keyRev {
		r.fail("stale GET %s/%s: resourceVersion %d, but a write at %d was acknowledged before it was sent", ns, name, rv, keyRev)
	}
	r.gets.Add(1)
}

// faultWriter writes ConfigMaps as kube-apiserver would, one at a time,
// retrying while etcd is unavailable, and logs what etcd acknowledged.
func faultWriter(ctx context.Context, t *testing.T, ch *churner, log *writeLog) {
	for ctx.Err() == nil {
		i := ch.rnd.IntN(ch.n + ch.n/10)
		ns, name := ch.key(i)
		var op clientv3.Op
		logKey := ""
		if i >= faultKeys && ch.rnd.IntN(4) == 0 {
			op = clientv3.OpDelete(storagefmt.Key("/registry", "configmaps", ns, name))
		} else {
			op = ch.put(t, ctx, i)
			if i < faultKeys {
				logKey = ns + "/" + name
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := ch.cli.Do(wctx, op)
		cancel()
		if err != nil {
			log.mu.Lock()
			log.failed++
			log.mu.Unlock()
			continue // unknown outcome: the log stays a lower bound
		}
		var rev int64
		if op.IsPut() {
			rev = resp.Put().Header.Revision
		} else {
			rev = resp.Del().Header.Revision
		}
		log.ack(logKey, rev)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond): // pacing: about 150 writes/s
		}
	}
}

// faultLoad is the client load of the etcd fault tests: informers of the
// lazyapi servers, a writer of ConfigMaps with its write log, and checked
// readers, until stop.
type faultLoad struct {
	log     *writeLog
	infs    []testInformer
	readers []*faultReader
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
}

// startFaultLoad runs infs until the test ends and waits until they
// synced, then starts the writer on ch and the readers (reader i with
// random seed seed+i), each given the write log, until stop or the test's
// end.
func startFaultLoad(t *testing.T, ctx context.Context, ch *churner, infs []testInformer, seed uint64, readers ...*faultReader) *faultLoad {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, ti := range infs {
		go ti.inf.Run(stop)
	}
	for _, ti := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), ti.inf.HasSynced) {
			t.Fatalf("%s did not sync", ti.name)
		}
	}
	l := &faultLoad{log: &writeLog{byKey: map[string]int64{}}, infs: infs, readers: readers}
	wctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	l.wg.Add(1 + len(readers))
	go func() { defer l.wg.Done(); faultWriter(wctx, t, ch, l.log) }()
	for i, r := range readers {
		r.log = l.log
		go func() { defer l.wg.Done(); r.run(wctx, rand.New(rand.NewPCG(seed+uint64(i), 7))) }()
	}
	t.Cleanup(l.stop) // before the informers' (cleanups run last first)
	return l
}

// stop stops the writer and the readers and waits for them; later calls
// do nothing.
func (l *faultLoad) stop() {
	l.once.Do(func() {
		l.cancel()
		l.wg.Wait()
	})
}

// reads returns how many checked reads r completed.
func (r *faultReader) reads() int64 { return r.lists.Load() + r.gets.Load() }

// waitReads waits until each of readers completed n more checked reads
// (the cluster serves again), for 60 s.
func waitReads(n int64, readers ...*faultReader) error {
	start := make([]int64, len(readers))
	for i, r := range readers {
		start[i] = r.reads()
	}
	deadline := time.Now().Add(60 * time.Second)
	for i, r := range readers {
		for r.reads() < start[i]+n {
			if time.Now().After(deadline) {
				return fmt.Errorf("the reader of %s made no progress for 60s", r.url)
			}
			time.Sleep(20 * time.Millisecond) // polling a counter to a deadline
		}
	}
	return nil
}

// waitInformersEqual waits until every informer's store equals etcd's
// ConfigMaps (read through cli).
func (l *faultLoad) waitInformersEqual(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	for _, ti := range l.infs {
		waitEqualEtcd(t, ti.name, cli, func() map[string]string { return storeState(ti.inf.GetStore()) })
	}
}

// count is the number of writes etcd acknowledged so far.
func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

// summary lists the errors seen by kind, e.g. "503 ServiceUnavailable ×4".
func (c *clientErrors) summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []string
	for k, n := range c.kinds {
		ks = append(ks, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// report logs what r read as who and fails t for each stale read.
func (r *faultReader) report(t *testing.T, who string) {
	t.Helper()
	t.Logf("%s: %d consistent LISTs (%d compared with etcd at their revision), %d GETs, %d stale",
		who, r.lists.Load(), r.exact.Load(), r.gets.Load(), r.stale.Load())
	for _, b := range r.bad {
		t.Errorf("%s: %s", who, b)
	}
}

// report fails t for each undocumented error a client of who saw.
func (c *clientErrors) report(t *testing.T, who string) {
	t.Helper()
	for _, v := range c.violations {
		t.Errorf("%s: undocumented error: %s", who, v)
	}
}

func TestEtcdFaults(t *testing.T) {
	began := time.Now()
	cl := etcdtest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ch := &churner{cli: cl.Client, rnd: rand.New(rand.NewPCG(16, 3)), n: 400}
	ch.seed(t, ctx)

	eps := cl.Endpoints()
	var urls []string
	var procs []*process
	for i := range eps {
		// The member's own endpoint first, then the others. Two prefer
		// their member (the static Pod), the third spreads its reads
		// over all (the Deployment).
		order := append([]string{eps[i]}, append(append([]string(nil), eps[:i]...), eps[i+1:]...)...)
		args := []string{"--etcd-servers=" + strings.Join(order, ",")}
		if i < 2 {
			args = append(args, "--etcd-preferred-server="+eps[i])
		}
		p := start(t, args...)
		procs = append(procs, p)
		urls = append(urls, p.URL)
	}

	errs := &clientErrors{kinds: map[string]int{}}
	var infs []testInformer
	var readers []*faultReader
	for i, u := range urls {
		f := []string{"json", "protobuf"}[i%2]
		infs = append(infs, faultInformer(u, f, false, errs), faultInformer(u, f, true, errs))
		readers = append(readers, &faultReader{url: u, cli: cl.Client, errs: errs})
	}
	load := startFaultLoad(t, ctx, ch, infs, 0, readers...)

	phase := time.Now()
	step := func(name string) {
		t.Logf("%-28s %5.1fs (writes acknowledged %d)", name, time.Since(phase).Seconds(), load.log.count())
		phase = time.Now()
	}
	// progress waits until every reader completed n more checked reads
	// (the cluster serves again).
	progress := func(n int64) {
		t.Helper()
		if err := waitReads(n, readers...); err != nil {
			t.Fatal(err)
		}
	}
	progress(20)
	step("warm")

	// 1. The leader is killed; a new one is elected; it comes back.
	leader := cl.Leader(ctx)
	if leader < 0 {
		t.Fatal("no leader")
	}
	cl.Stop(leader)
	progress(20)
	if nl := cl.Leader(ctx); nl == leader || nl < 0 {
		t.Fatalf("leader %d -> %d after a kill", leader, nl)
	}
	step(fmt.Sprintf("leader m%d killed", leader))
	if err := cl.Start(leader); err != nil {
		t.Fatal(err)
	}
	progress(20)
	step("old leader back")

	// 2. A follower is stopped (its lazyapi fails over), then restarted.
	follower := (cl.Leader(ctx) + 1) % 3
	cl.Stop(follower)
	progress(20)
	step(fmt.Sprintf("follower m%d stopped", follower))
	if err := cl.Start(follower); err != nil {
		t.Fatal(err)
	}
	progress(20)
	step("follower back")

	// 3. Compaction of everything but the last 50 revisions, then
	// defragmentation of each member.
	resp, err := cl.Client.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Client.Compact(ctx, resp.Header.Revision-50, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	for _, ep := range eps {
		if _, err := cl.Client.Defragment(ctx, ep); err != nil {
			t.Fatalf("defragment %s: %v", ep, err)
		}
	}
	progress(20)
	step("compacted, defragmented")

	// 4. The whole cluster stops. resourceVersion=0 LISTs are served from
	// the caches; consistent reads get 503; /readyz names etcd.
	cl.StopAll()
	var dwg sync.WaitGroup
	for _, u := range urls {
		dwg.Add(1)
		go func() { defer dwg.Done(); checkDegraded(t, u) }()
	}
	dwg.Wait()
	step("cluster down")
	if err := cl.StartAll(); err != nil {
		t.Fatal(err)
	}
	progress(20)
	step("cluster restarted")

	load.stop()

	// Informers and caches end equal to etcd.
	load.waitInformersEqual(t, cl.Client)
	for i, u := range urls {
		checkCacheEqual(t, u, cl.Client)
		if code, body := rawGet(t, u+"/readyz?verbose"); code != 200 {
			t.Errorf("lazyapi %d /readyz after the faults = %d:\n%s\nstderr:\n%s", i, code, body, procs[i].stderr)
		}
	}
	step("informers equal etcd")

	// The reads' verdicts.
	for _, r := range readers {
		r.report(t, "reader "+r.url)
	}
	t.Logf("writes: %d acknowledged, %d failed or unknown; client errors: %s; total %.1fs",
		load.log.writes, load.log.failed, errs.summary(), time.Since(began).Seconds())
	errs.report(t, "lazyapi")
}

func rawGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkDegraded checks lazyapi at url while etcd is down: /readyz fails
// naming etcd, a consistent LIST gets 503 with Retry-After (or 504), a
// resourceVersion=0 LIST is served from the cache.
func checkDegraded(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var code int
	var body string
	for time.Now().Before(deadline) {
		if code, body = rawGet(t, url+"/readyz?verbose"); code != 200 {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling /readyz to a deadline (it caches etcd's answer 1 s)
	}
	if code != 500 || !strings.Contains(body, "[-]etcd failed") {
		t.Errorf("%s/readyz with etcd down = %d:\n%s\nwant 500 naming etcd", url, code, body)
	}
	t0 := time.Now()
	resp, err := http.Get(url + "/api/v1/configmaps?limit=100")
	if err != nil {
		t.Error(err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if (resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "") && resp.StatusCode != 504 {
		t.Errorf("consistent LIST with etcd down = %d (Retry-After %q): %.200s; want 503 with Retry-After or 504",
			resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	t.Logf("%s: consistent LIST with etcd down: %d in %s", url, resp.StatusCode, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	resp, err = http.Get(url + "/api/v1/configmaps?resourceVersion=0")
	if err != nil {
		t.Error(err)
		return
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var l corev1.ConfigMapList
	if resp.StatusCode != 200 || json.Unmarshal(b, &l) != nil || len(l.Items) == 0 {
		t.Errorf("resourceVersion=0 LIST with etcd down = %d: %.200s; want the cache's ConfigMaps", resp.StatusCode, b)
	} else {
		t.Logf("%s: resourceVersion=0 LIST with etcd down: %d ConfigMaps at %s in %s", url, len(l.Items), l.ResourceVersion, time.Since(t0).Round(time.Millisecond))
	}
}

// waitEqualEtcd polls got until it equals etcd's ConfigMaps, for 60 s. A
// write cancelled in flight when the writer stopped may still commit after
// a first read of etcd, so etcd is read again at each poll.
func waitEqualEtcd(t *testing.T, what string, cli *clientv3.Client, got func() map[string]string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		want, g := etcdState(t, context.Background(), cli), got()
		if maps.Equal(want, g) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: store differs from etcd: %s", what, diffStates(want, g))
		}
		time.Sleep(100 * time.Millisecond) // polling the informer's store to a deadline
	}
}

// checkCacheEqual polls a resourceVersion=0 LIST (the cache) until it equals
// etcd's state (the cache re-synced on its own), reading etcd at each poll.
func checkCacheEqual(t *testing.T, url string, cli *clientv3.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		want := etcdState(t, context.Background(), cli)
		code, body := rawGet(t, url+"/api/v1/configmaps?resourceVersion=0")
		got := map[string]string{}
		if code == 200 {
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(body), nil, nil)
			if err == nil {
				for _, cm := range obj.(*corev1.ConfigMapList).Items {
					got[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion + " " + cm.Data["gen"] + " " + strconv.Itoa(len(cm.Data["pad"]))
				}
			}
		}
		if maps.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: cache (resourceVersion=0 LIST) differs from etcd: %s", url, diffStates(want, got))
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the cache to a deadline
	}
}
