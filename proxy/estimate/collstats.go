package estimate

import (
	"context"
	"math"
	"sync"
	"time"
)

// Collection statistics.
//
// Admission (proxy's admit.go) and the first page of a LIST need numbers
// about a collection that only the proxy sees: the average size of its
// stored values (from the pages it reads), how many keys it has (one etcd
// range of one key), and how large its responses turned out. Stats keeps
// them, per collection key prefix; the limiter receives the numbers
// derived from them (a reservation in bytes, a response size to classify)
// and keeps none of its own.

// Collection describes a collection for the classification of its LISTs.
type Collection struct {
	Items    int64 // number of objects
	AvgBytes int64 // average stored size of one object; 0 when unknown
}

const (
	// sizeTTL is how long a remembered collection size (SetSize) is used.
	sizeTTL = 5 * time.Second
	// observedTTL is how long a response size seen by ObserveResponse is
	// used.
	observedTTL = time.Minute
	// MaxCollections bounds the sizes and response sizes remembered; when
	// full, all of one kind are forgotten.
	MaxCollections = 1024
)

// Stats remembers, per collection key prefix: the average stored value
// size of the last LIST's first page (Hint: it sizes the next first page
// and the admission estimates), the collection's size (SetSize, 5 s) and
// the largest response of the last minute (ObserveResponse). Keys are
// "<prefix>/<resource key prefix>/[<namespace>/]". The zero value is not
// usable: use NewStats. Safe for concurrent use.
type Stats struct {
	// hints is read on every LIST (string -> int): a sync.Map, whose Load
	// takes no lock and allocates nothing.
	hints sync.Map

	max      int        // most entries of sizes and of observed
	mu       sync.Mutex // guards sizes, observed, sampling and waiting
	sizes    map[string]sizeEntry
	observed map[string]observedEntry
	// sampling holds the samples of collection sizes in flight
	// (SampleSize), waiting the callers waiting for one (for tests).
	sampling map[string]*sizeSample
	waiting  int
}

// sizeSample is a sample of a collection's size in flight; sz and err are
// set before done is closed.
type sizeSample struct {
	done chan struct{}
	sz   Collection
	err  error
}

// sizeEntry is a remembered collection size.
type sizeEntry struct {
	Collection
	at time.Time
}

// observedEntry is a response size recorded by ObserveResponse.
type observedEntry struct {
	n  int64
	at time.Time
}

func NewStats(max int) *Stats {
	return &Stats{max: max, sizes: map[string]sizeEntry{}, observed: map[string]observedEntry{}, sampling: map[string]*sizeSample{}}
}

// SampleSize returns the size remembered for the collection key (Size),
// else the one sample returns, called once for all the callers that ask
// while it is in flight (and remembered with SetSize when it succeeds).
// A burst of LISTs of a collection that is not cached (or still filling)
// thus reads one value from etcd, not one each: 256 LIST+WATCH streams on
// 400 Secrets of 1 MiB read 256 values of 1 MiB at once, outside
// admission (bench/RESULTS.md, ## storm: 400 Secrets, lazyapi and
// kube-apiserver in one run). A waiting caller whose ctx ends returns its
// error; the sample goes on for the others.
func (c *Stats) SampleSize(ctx context.Context, key string, now time.Time, sample func() (Collection, error)) (Collection, error) {
	if sz, ok := c.Size(key, now); ok {
		return sz, nil
	}
	c.mu.Lock()
	if sm, ok := c.sampling[key]; ok {
		c.waiting++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.waiting--
			c.mu.Unlock()
		}()
		select {
		case <-sm.done:
			return sm.sz, sm.err
		case <-ctx.Done():
			return Collection{}, ctx.Err()
		}
	}
	sm := &sizeSample{done: make(chan struct{})}
	c.sampling[key] = sm
	c.mu.Unlock()
	sm.sz, sm.err = sample()
	if sm.err == nil {
		c.SetSize(key, sm.sz, now)
	}
	c.mu.Lock()
	delete(c.sampling, key)
	c.mu.Unlock()
	close(sm.done)
	return sm.sz, sm.err
}

// Hint returns the average stored size of the collection's values last
// seen by a LIST, 0 when none was.
func (c *Stats) Hint(key string) int {
	if h, ok := c.hints.Load(key); ok {
		return h.(int)
	}
	return 0
}

// SetHint records the average stored size of a LIST's first page.
func (c *Stats) SetHint(key string, avg int) {
	c.hints.Store(key, avg)
}

// Size returns the size remembered for the collection key (SetSize) if it
// was set less than sizeTTL before now. Admission uses it to classify LISTs
// as bulk without reading etcd for every request.
func (c *Stats) Size(key string, now time.Time) (Collection, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.sizes[key]
	if !ok || now.Sub(e.at) >= sizeTTL {
		return Collection{}, false
	}
	return e.Collection, true
}

// SetSize remembers the size of the collection key at now. At most max
// keys are kept; when full, all are forgotten.
func (c *Stats) SetSize(key string, sz Collection, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.sizes[key]; !ok && len(c.sizes) >= c.max {
		clear(c.sizes)
	}
	c.sizes[key] = sizeEntry{Collection: sz, at: now}
}

// ObserveResponse records that a LIST of the collection key wrote at least
// n response bytes at now. ObservedResponse returns the largest n recorded
// in the last observedTTL. A LIST whose estimate (items × a sampled or
// hinted average) was too low, e.g. because the first values of the range
// are small, thus makes the following LISTs of its collection bulk. At
// most max keys are kept; when full, all are forgotten.
func (c *Stats) ObserveResponse(key string, n int64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.observed[key]
	if !ok && len(c.observed) >= c.max {
		clear(c.observed)
	}
	if ok && now.Sub(e.at) < observedTTL && e.n > n {
		n = e.n
	}
	c.observed[key] = observedEntry{n: n, at: now}
}

// ObservedResponse returns the largest response size recorded for the
// collection key by ObserveResponse in the observedTTL before now, 0 if
// none.
func (c *Stats) ObservedResponse(key string, now time.Time) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.observed[key]
	if !ok || now.Sub(e.at) >= observedTTL {
		return 0
	}
	return e.n
}

// Estimate constants; see List.
const (
	// pageCopies is how many copies of a page's values are alive at once:
	// the gRPC response buffer and the decoded etcd KeyValues.
	pageCopies = 2
	// itemOverheadBytes covers an item's key, its mvccpb.KeyValue struct and
	// slice headers.
	itemOverheadBytes = 256
)

// List returns the working-set estimate of a LIST (or of a GET
// with pageItems = 1) that reads pages of pageItems values of
// avgValueBytes each from etcd and writes through write buffers totalling
// bufferBytes:
//
//	pageItems × (2 × avgValueBytes + 256) + bufferBytes
//
// Two copies of the page are alive at once (the gRPC message and the
// decoded values); 256 bytes per item cover key and struct overhead. The
// limiter corrects it per class from what requests report they really
// used. Negative inputs count as 0; the result saturates at MaxInt64.
func List(avgValueBytes int64, pageItems int, bufferBytes int64) int64 {
	avg := max(avgValueBytes, 0)
	n := int64(max(pageItems, 0))
	buf := max(bufferBytes, 0)
	per := satAdd(satMul(pageCopies, avg), itemOverheadBytes)
	return satAdd(satMul(n, per), buf)
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
