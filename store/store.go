// Package store reads Kubernetes objects from etcd: paged ranges at one
// pinned revision, single gets, the current revision, and an embedded etcd.
package store

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors; the store wraps them with %w, test them with errors.Is.
var (
	// ErrCompacted: the requested revision was compacted.
	ErrCompacted = errors.New("store: revision compacted")
	// ErrFutureRevision: the requested revision is newer than etcd's.
	ErrFutureRevision = errors.New("store: revision is in the future")
	// ErrUnavailable: etcd did not answer (unreachable, no leader, timeout).
	ErrUnavailable = errors.New("store: etcd unavailable")
)

// Defaults for Config fields left zero.
const (
	// DefaultPrefix is kube-apiserver's --etcd-prefix default.
	DefaultPrefix    = "/registry"
	DefaultPageSize  = 500
	DefaultPageBytes = 1 << 20
	// firstPageProbe bounds the first page of a range whose value sizes are
	// not known yet, so that a collection of large values never costs
	// PageSize of them.
	firstPageProbe = 16
	// DefaultCallTimeout is Config.CallTimeout's default.
	DefaultCallTimeout = 5 * time.Second
)

// Config configures a Store.
type Config struct {
	// Prefix is the etcd key prefix (kube-apiserver's --etcd-prefix),
	// normalized by NormalizePrefix; "" means DefaultPrefix. Informational
	// for reads: callers pass full keys.
	Prefix string
	// PageSize is the most items one etcd range returns. 0 means
	// DefaultPageSize.
	PageSize int
	// PageBytes bounds the values of one page: the next page's limit is
	// chosen from the sizes seen so far so that a page stays near this
	// many bytes. 0 means DefaultPageBytes.
	PageBytes int
	// CallTimeout bounds one etcd call. The etcd client retries an
	// unreachable endpoint until its context ends; this turns that into
	// ErrUnavailable (503 + Retry-After) instead of using up the whole
	// request timeout. 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// Metrics receives lazyapi_etcd_request_duration_seconds{op} and
	// lazyapi_etcd_request_errors_total{op}. Nil disables them.
	Metrics *metrics.Set
}

// Store reads from etcd. It is safe for concurrent use; it holds no data.
type Store struct {
	cli *clientv3.Client
	cfg Config
}

// New returns a Store reading through cli.
func New(cli *clientv3.Client, cfg Config) *Store {
	cfg.Prefix = NormalizePrefix(cfg.Prefix)
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.PageBytes <= 0 {
		cfg.PageBytes = DefaultPageBytes
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Metrics != nil {
		// Every op's series exist from the start, so that a rate of errors
		// is 0 rather than absent (alerts, deploy/alerts.yaml).
		for _, op := range []string{"revision", "get", "range"} {
			cfg.Metrics.GetOrCreatePrometheusHistogram(`lazyapi_etcd_request_duration_seconds{op="` + op + `"}`)
			cfg.Metrics.GetOrCreateCounter(`lazyapi_etcd_request_errors_total{op="` + op + `"}`)
		}
		cfg.Metrics.GetOrCreateCounter("lazyapi_etcd_page_retries_total")
	}
	return &Store{cli: cli, cfg: cfg}
}

// NormalizePrefix writes an etcd prefix as kube-apiserver's etcd3 store
// joins it (path.Join("/", prefix)): a leading "/", no trailing "/"; blank
// means DefaultPrefix.
func NormalizePrefix(prefix string) string {
	if strings.TrimSpace(prefix) == "" {
		return DefaultPrefix
	}
	return path.Join("/", prefix)
}

// Client returns the etcd client the store reads through.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Config returns the store's configuration with defaults applied.
func (s *Store) Config() Config { return s.cfg }

// KV is one key of etcd. Key and Value are borrowed from the page they were
// read in: do not hold them after the callback returns (or, for a Pager,
// after the next call to Next).
type KV struct {
	Key, Value  []byte
	ModRevision int64
}

func (s *Store) observe(op string, start time.Time, err error) {
	if s.cfg.Metrics == nil {
		return
	}
	s.cfg.Metrics.GetOrCreatePrometheusHistogram(`lazyapi_etcd_request_duration_seconds{op="` + op + `"}`).UpdateDuration(start)
	if err != nil {
		s.cfg.Metrics.GetOrCreateCounter(`lazyapi_etcd_request_errors_total{op="` + op + `"}`).Inc()
	}
}

// call is one etcd range bounded by CallTimeout. A call that runs out of
// its own time while ctx is still live reports ErrUnavailable.
func (s *Store) call(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	resp, err := s.cli.Get(cctx, key, opts...)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return nil, fmt.Errorf("%w: no answer within %s: %v", ErrUnavailable, s.cfg.CallTimeout, err)
	}
	return resp, err
}

// Revision returns etcd's current revision with a linearizable read.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	start := time.Now()
	// A range over a key nobody writes returns the header cheaply.
	resp, err := s.call(ctx, "\x00lazyapi-revision", clientv3.WithCountOnly())
	s.observe("revision", start, err)
	if err != nil {
		return 0, mapError(ctx, "cannot read etcd revision", err)
	}
	return resp.Header.Revision, nil
}

// Get reads one key at rev (0 = current, linearizable). It returns the read
// revision and ok=false when the key does not exist. The KV it returns is
// owned by the caller.
func (s *Store) Get(ctx context.Context, key string, rev int64) (KV, int64, bool, error) {
	return s.get(ctx, key, rev, false)
}

// GetSerializable is Get with a serializable read (served by the local
// member without a quorum round trip; may be slightly stale).
func (s *Store) GetSerializable(ctx context.Context, key string, rev int64) (KV, int64, bool, error) {
	return s.get(ctx, key, rev, true)
}

func (s *Store) get(ctx context.Context, key string, rev int64, serializable bool) (KV, int64, bool, error) {
	opts := make([]clientv3.OpOption, 0, 2)
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	start := time.Now()
	resp, err := s.call(ctx, key, opts...)
	s.observe("get", start, err)
	if err != nil {
		return KV{}, 0, false, mapError(ctx, fmt.Sprintf("cannot get %q", key), err)
	}
	if len(resp.Kvs) == 0 {
		return KV{}, resp.Header.Revision, false, nil
	}
	kv := resp.Kvs[0]
	return KV{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision}, resp.Header.Revision, true, nil
}

// ListOptions selects a range of keys.
type ListOptions struct {
	// Prefix is the range: every key starting with it. It should end in
	// "/" ("/registry/configmaps/ns/").
	Prefix string
	// Start is the first key to read (inclusive); "" means Prefix. It must
	// start with Prefix.
	Start string
	// End, when set, is the last key to read (inclusive).
	End string
	// Rev is the revision to read at; 0 means the current revision (the
	// first page's read revision pins the rest).
	Rev int64
	// Serializable reads from the local member without a quorum round trip
	// (resourceVersion=0 semantics). Otherwise reads are linearizable.
	Serializable bool
	// Want, when > 0, is how many keys the caller will consume at most;
	// pages are not made larger than what is still wanted.
	Want int
	// KeysOnly reads keys without values (Value is nil).
	KeysOnly bool
	// SizeHint is the expected average value size in bytes (e.g. from an
	// earlier list of the same resource, see Pager.AvgSize); it sizes the
	// first page. 0 means unknown: the first page is a small probe.
	SizeHint int
	// Continues says the caller already answers from earlier reads at
	// Rev (a shared scan reading a segment again): the first page is
	// read again on ErrUnavailable too (PageRetries), as later pages are.
	Continues bool
}

// ListResult describes a finished List.
type ListResult struct {
	// Rev is the revision every page was read at.
	Rev int64
	// LastKey is the last key passed to fn (owned by the caller); empty if
	// none was.
	LastKey []byte
	// More reports that keys remain in the range after LastKey.
	More bool
	// Remaining is the exact number of keys in the range after LastKey.
	Remaining int64
}

// List calls fn for each key of the range in key order, reading one page at
// a time at one revision. fn returning stop=true ends the range after that
// key; an error from fn ends it and is returned.
func (s *Store) List(ctx context.Context, opts ListOptions, fn func(KV) (stop bool, err error)) (ListResult, error) {
	p := s.NewPager(opts)
	var res ListResult
	for {
		page, err := p.Next(ctx)
		if err != nil {
			return res, err
		}
		res.Rev = p.Rev()
		for i := range page {
			kv := page[i]
			stop, err := fn(KV{Key: kv.Key, Value: kv.Value, ModRevision: kv.ModRevision})
			if err != nil {
				return res, err
			}
			if stop {
				res.LastKey = append(res.LastKey[:0], kv.Key...)
				res.Remaining = p.RemainingAfter(i)
				res.More = res.Remaining > 0
				return res, nil
			}
		}
		if len(page) > 0 {
			res.LastKey = append(res.LastKey[:0], page[len(page)-1].Key...)
		}
		if !p.More() {
			return res, nil
		}
	}
}

// Pager reads a range page by page at one revision. It holds only the
// current page. Not safe for concurrent use.
type Pager struct {
	s       *Store
	opts    ListOptions
	end     string // exclusive range end
	next    string // first key of the next page
	rev     int64
	limit   int64
	started bool
	done    bool
	more    bool
	count   int64 // keys in [page start, end) at rev, from etcd
	avg     int   // average key+value size of the last page
	got     int   // keys consumed so far (for Want)
	page    []*mvccpb.KeyValue

	prefetch bool
	pending  chan fetched       // the background read of the next page
	cancel   context.CancelFunc // cancels the background read
}

// NewPager returns a Pager over opts's range. No etcd call happens before
// the first Next.
func (s *Store) NewPager(opts ListOptions) *Pager {
	start := opts.Start
	if start == "" {
		start = opts.Prefix
	}
	end := clientv3.GetPrefixRangeEnd(opts.Prefix)
	if opts.End != "" {
		end = opts.End + "\x00"
	}
	limit := int64(min(firstPageProbe, s.cfg.PageSize))
	if opts.SizeHint > 0 {
		limit = int64(max(min(s.cfg.PageBytes/opts.SizeHint, s.cfg.PageSize), 1))
	}
	if opts.KeysOnly {
		limit = int64(s.cfg.PageSize)
	}
	return &Pager{s: s, opts: opts, end: end, next: start, rev: opts.Rev, limit: limit}
}

// Rev returns the revision the pages are read at (valid after the first
// Next).
func (p *Pager) Rev() int64 { return p.rev }

// More reports whether keys remain after the last page returned.
func (p *Pager) More() bool { return p.more }

// AvgSize returns the average key+value size of the last page read, 0 before
// the first page; pass it as SizeHint to later lists of the same range.
func (p *Pager) AvgSize() int { return p.avg }

// RemainingAfter returns the exact number of keys in the range after the
// i-th key of the last page.
func (p *Pager) RemainingAfter(i int) int64 { return p.count - int64(i) - 1 }

// Next reads the next page. It returns an empty page and no error at the end
// of the range. The page's bytes are valid until the following Next.
func (p *Pager) Next(ctx context.Context) ([]*mvccpb.KeyValue, error) {
	p.page = nil // let the previous page go before reading the next
	var r fetched
	if p.pending != nil {
		r = <-p.pending
		p.pending = nil
	} else {
		if p.done || (p.started && !p.more) || p.next >= p.end {
			p.more = false
			return nil, nil
		}
		r = p.fetch(ctx, p.next, p.nextRangeLimit())
	}
	if r.err != nil && (p.started || p.opts.Continues && p.rev > 0) {
		r = p.retry(ctx, r)
	}
	if r.err != nil {
		p.done = true
		return nil, r.err
	}
	resp := r.resp
	p.started = true
	if p.rev == 0 {
		p.rev = resp.Header.Revision
	}
	p.page = resp.Kvs
	p.more = resp.More
	p.count = resp.Count
	p.got += len(resp.Kvs)
	if len(resp.Kvs) == 0 {
		p.more = false
		return nil, nil
	}
	p.next = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	if !p.opts.KeysOnly {
		p.limit = p.nextLimit(resp.Kvs)
	}
	if p.prefetch {
		p.startPrefetch(ctx)
	}
	return resp.Kvs, nil
}

// PageRetries bounds how often Next reads a page again after its read
// found etcd unavailable (ErrUnavailable: no answer within CallTimeout, no
// leader, the connection lost), for every page after the first. Those
// pages are read at the revision the first one pinned, so a read again
// answers the same bytes. By then the caller is answering from the pages
// before (a streamed LIST, a shared scan's members): giving up on one slow
// range ends every response built on it (the 1,024-stream storm on 400
// uncached Secrets lost 500 WatchList streams of one shared scan to a
// single range that took over 5 s with the 2 cores saturated), where
// kube-apiserver's etcd client retries reads too (clientv3's retry
// interceptor). The first page is not retried (unless
// ListOptions.Continues): nothing is answered yet, and a request against
// an etcd that is down gets its 503 at once.
const PageRetries = 3

// pageRetryBackoff is the pause before the first read again; it doubles.
const pageRetryBackoff = 250 * time.Millisecond

// retry reads the page that failed with r again, up to PageRetries times
// while the error is ErrUnavailable and ctx is live.
func (p *Pager) retry(ctx context.Context, r fetched) fetched {
	pause := pageRetryBackoff
	for range PageRetries {
		if !errors.Is(r.err, ErrUnavailable) || ctx.Err() != nil {
			return r
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return r
		case <-t.C:
		}
		pause *= 2
		if p.s.cfg.Metrics != nil {
			p.s.cfg.Metrics.GetOrCreateCounter("lazyapi_etcd_page_retries_total").Inc()
		}
		r = p.fetch(ctx, p.next, p.nextRangeLimit())
	}
	return r
}

// fetched is the result of one range.
type fetched struct {
	resp *clientv3.GetResponse
	err  error
}

// nextRangeLimit is the limit of the next range.
func (p *Pager) nextRangeLimit() int64 {
	limit := p.limit
	if p.opts.Want > 0 {
		limit = min(limit, int64(max(p.opts.Want-p.got, 1)))
	}
	return limit
}

// fetch reads one page starting at from. It uses only immutable pager
// fields (and rev, fixed after the first page), so a prefetch may run it.
func (p *Pager) fetch(ctx context.Context, from string, limit int64) fetched {
	opts := make([]clientv3.OpOption, 0, 5)
	opts = append(opts, clientv3.WithRange(p.end), clientv3.WithLimit(limit))
	if p.rev > 0 {
		opts = append(opts, clientv3.WithRev(p.rev))
	}
	if p.opts.Serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	if p.opts.KeysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	start := time.Now()
	resp, err := p.s.call(ctx, from, opts...)
	p.s.observe("range", start, err)
	if err != nil {
		return fetched{err: mapError(ctx, fmt.Sprintf("cannot list %q at revision %d", from, p.rev), err)}
	}
	return fetched{resp: resp}
}

// SetPrefetch turns read-ahead on or off. With it on, once a page is
// returned the next one is read in the background while the caller
// consumes this one: the pager then holds up to two pages. Turning it on
// after a page was returned starts reading the next page at once. ctx
// bounds the background read. Call Close when done early.
func (p *Pager) SetPrefetch(ctx context.Context, on bool) {
	p.prefetch = on
	if on && p.started {
		p.startPrefetch(ctx)
	}
}

func (p *Pager) startPrefetch(ctx context.Context) {
	if p.pending != nil || p.done || !p.more || p.next >= p.end {
		return
	}
	if p.opts.Want > 0 && p.got >= p.opts.Want {
		return // the caller consumes no more (a LIST's limit was reached)
	}
	ch := make(chan fetched, 1)
	p.pending = ch
	from, limit := p.next, p.nextRangeLimit()
	pctx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	go func() {
		defer cancel()
		ch <- p.fetch(pctx, from, limit)
	}()
}

// Close cancels a background read. The Pager must not be used after.
func (p *Pager) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	p.pending = nil
	p.page = nil
	p.done = true
}

// nextLimit sizes the next page so that its values stay near PageBytes,
// judging by the average value of this page, growing at most 4x per page.
func (p *Pager) nextLimit(kvs []*mvccpb.KeyValue) int64 {
	var total int
	for _, kv := range kvs {
		total += len(kv.Value) + len(kv.Key)
	}
	avg := max(total/len(kvs), 1)
	p.avg = avg
	n := int64(max(p.s.cfg.PageBytes/avg, 1))
	return min(n, int64(p.s.cfg.PageSize), max(p.limit*4, 1))
}

// mapError maps etcd and gRPC errors to the store's sentinels. A done ctx
// keeps its own error (context.Canceled, context.DeadlineExceeded).
func mapError(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, ErrUnavailable):
		return fmt.Errorf("%s: %w", what, err)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", what, ctx.Err())
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("%s: %w", what, ErrCompacted)
	case errors.Is(err, rpctypes.ErrFutureRev):
		return fmt.Errorf("%s: %w", what, ErrFutureRevision)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, rpctypes.ErrTimeout),
		errors.Is(err, rpctypes.ErrNoLeader), errors.Is(err, rpctypes.ErrLeaderChanged),
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail), errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost):
		return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, err)
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return fmt.Errorf("%s: %w: %v", what, ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}
