package ratelimit

import (
	"fmt"
	"runtime"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
)

// Config configures a Limiter. Build it with DefaultConfig, change fields,
// then pass it to New, which validates it. Errors name the fields;
// cmd/lazyapi checks its flags with these rules before (its options.go), and
// the flags in the field comments are its.
type Config struct {
	// MaxRequestsInflight (--max-requests-inflight, default 400, as
	// kube-apiserver) bounds the number of short requests (GET, LIST) being
	// served at once.
	MaxRequestsInflight int
	// MaxWatchesInflight (--max-watches-inflight, default 0 = no count
	// limit) bounds the number of open watches. kube-apiserver has no such
	// flag: it exempts watches, as long-running requests, from
	// --max-requests-inflight. By default watches are bounded by
	// MaxWatchBytes and by their clients' fair shares of it (see Watch).
	MaxWatchesInflight int
	// MaxInflightBytes (--max-inflight-bytes) is the byte budget for the
	// working sets of all admitted GETs and LISTs together. Required (> 0);
	// derive it from --memory-limit with DefaultInflightBytes.
	MaxInflightBytes int64
	// MaxWatchBytes (--max-watch-bytes) is the byte budget of open
	// watches (kind Watch): what each holds while idle, its initial
	// events while it sends them, and the frames queued for it. 0 means
	// MaxInflightBytes (with the defaults a quarter of --memory-limit,
	// taken from the half the other budgets leave as headroom).
	MaxWatchBytes int64
	// MaxSingleRequestBytes (--max-single-request-bytes) is the largest
	// estimate ever admitted. An estimate above MaxInflightBytes but not above
	// this is admitted alone: it reserves the whole budget, so it waits until
	// nothing else holds bytes. 0 means 2 × MaxInflightBytes; otherwise it must
	// be >= MaxInflightBytes.
	MaxSingleRequestBytes int64
	// MaxQueued (--max-queued-requests, default 1000) bounds the number of
	// requests waiting for admission, over all clients. 0 disables queuing:
	// a request that does not fit is rejected at once.
	MaxQueued int
	// MaxQueueWait (--max-queue-wait, default 15s) bounds how long a request
	// waits in the queue before it is rejected with ErrQueueTimeout.
	MaxQueueWait time.Duration
	// PerClientQPS (--per-client-qps, default 0 = off) is the sustained rate
	// of requests admitted per client key; above it Admit fails with
	// ErrRateLimited.
	PerClientQPS float64
	// PerClientBurst (--per-client-burst, default 100) is the token-bucket
	// burst of PerClientQPS; it must be >= 1 when PerClientQPS > 0.
	PerClientBurst int
	// MaxBulkInflight (--max-bulk-lists-inflight) bounds the number of bulk
	// LISTs (see IsBulk) served at once. 0 means DefaultMaxBulkInflight.
	MaxBulkInflight int
	// BulkListBytes (--bulk-list-threshold, default 16Mi) is the estimated
	// response size above which a LIST is Bulk.
	BulkListBytes int64
	// ShortReservedBytes (--short-reserved-inflight-bytes) is the part of
	// MaxInflightBytes that bulk requests cannot reserve. 0 means a quarter
	// of MaxInflightBytes; it must be below MaxInflightBytes.
	ShortReservedBytes int64
	// BulkYield (--bulk-list-yield, default 50ms) is the longest a bulk
	// stream pauses per flush while short requests are in flight (Yield);
	// 0 turns yielding off.
	BulkYield time.Duration
	// ClientShare (--per-client-share, default 0.5) is the fraction of the
	// short and bulk seats and bytes one client (Request.Client) may hold
	// at once: beyond it the client's requests queue behind its own, so
	// that one client opening hundreds of connections leaves seats and
	// bytes to everyone else (API Priority and Fairness bounds a flow the
	// same way). A client may always hold one request of each kind. 1
	// turns the share off. Watches are shared among the active clients
	// instead (see Watch).
	ClientShare float64
	// MaxClasses bounds the number of estimate classes whose correction ratio
	// is remembered (default 1024); classes beyond it are not corrected.
	MaxClasses int

	// Clock is the source of time; nil means the system clock.
	Clock Clock
	// Logger receives debug-level logs of admission decisions; nil means none.
	Logger *zap.Logger
	// Metrics is the set the limiter registers its metrics in (names start
	// with lazyapi_ratelimit_); nil means a private set. Pass a set without
	// another Limiter's metrics in it: registering twice panics.
	Metrics *metrics.Set
}

// DefaultConfig returns the defaults of every field. MaxInflightBytes is left
// 0: derive it with DefaultInflightBytes.
func DefaultConfig() Config { return defaultConfig() }

func defaultConfig() Config {
	return Config{
		MaxRequestsInflight: 400,
		MaxQueued:           1000,
		MaxQueueWait:        15 * time.Second,
		PerClientBurst:      100,
		BulkListBytes:       16 << 20,
		BulkYield:           50 * time.Millisecond,
		ClientShare:         defaultClientShare,
		MaxClasses:          1024,
	}
}

// defaultClientShare is the default of Config.ClientShare.
const defaultClientShare = 0.5

// DefaultMaxBulkInflight is the default of --max-bulk-lists-inflight: half
// of GOMAXPROCS, at least 1. A bulk LIST read from etcd keeps about two cores
// busy, one in lazyapi (transcoding or copying items) and about one in etcd
// (serving the ranges); more concurrent bulk streams add latency for
// everyone, no throughput, and no list finishes sooner. On 2 cores, 1 bulk
// seat instead of 2 halved the GET probe's p50 beside a 64-client flood of
// 1 GiB LISTs (bench/RESULTS.md, ## listflood).
func DefaultMaxBulkInflight() int { return max(runtime.GOMAXPROCS(0)/2, 1) }

// validate checks c and fills derived zero values; errors name the field.
func (c *Config) validate() error {
	if c.MaxRequestsInflight <= 0 {
		return fmt.Errorf("ratelimit: MaxRequestsInflight must be > 0, got %d", c.MaxRequestsInflight)
	}
	if c.MaxWatchesInflight < 0 {
		return fmt.Errorf("ratelimit: MaxWatchesInflight must be >= 0, got %d", c.MaxWatchesInflight)
	}
	if c.MaxInflightBytes <= 0 {
		return fmt.Errorf("ratelimit: MaxInflightBytes must be > 0, got %d", c.MaxInflightBytes)
	}
	if c.MaxWatchBytes < 0 {
		return fmt.Errorf("ratelimit: MaxWatchBytes must be >= 0, got %d", c.MaxWatchBytes)
	}
	if c.MaxWatchBytes == 0 {
		c.MaxWatchBytes = c.MaxInflightBytes
	}
	if c.MaxSingleRequestBytes == 0 {
		c.MaxSingleRequestBytes = satMul(2, c.MaxInflightBytes)
	}
	if c.MaxSingleRequestBytes < c.MaxInflightBytes {
		return fmt.Errorf("ratelimit: MaxSingleRequestBytes (%d) must be 0 or >= MaxInflightBytes (%d)", c.MaxSingleRequestBytes, c.MaxInflightBytes)
	}
	if c.MaxBulkInflight < 0 {
		return fmt.Errorf("ratelimit: MaxBulkInflight must be >= 0, got %d", c.MaxBulkInflight)
	}
	if c.MaxBulkInflight == 0 {
		c.MaxBulkInflight = DefaultMaxBulkInflight()
	}
	if c.BulkListBytes <= 0 {
		return fmt.Errorf("ratelimit: BulkListBytes must be > 0, got %d", c.BulkListBytes)
	}
	if c.ShortReservedBytes < 0 {
		return fmt.Errorf("ratelimit: ShortReservedBytes must be >= 0, got %d", c.ShortReservedBytes)
	}
	if c.ShortReservedBytes == 0 {
		c.ShortReservedBytes = c.MaxInflightBytes / 4
	}
	if c.ShortReservedBytes >= c.MaxInflightBytes {
		return fmt.Errorf("ratelimit: ShortReservedBytes (%d) must be below MaxInflightBytes (%d)", c.ShortReservedBytes, c.MaxInflightBytes)
	}
	if c.BulkYield < 0 {
		return fmt.Errorf("ratelimit: BulkYield must be >= 0, got %s", c.BulkYield)
	}
	if c.MaxQueued < 0 {
		return fmt.Errorf("ratelimit: MaxQueued must be >= 0, got %d", c.MaxQueued)
	}
	if c.MaxQueueWait <= 0 {
		return fmt.Errorf("ratelimit: MaxQueueWait must be > 0, got %s", c.MaxQueueWait)
	}
	if c.PerClientQPS < 0 {
		return fmt.Errorf("ratelimit: PerClientQPS must be >= 0, got %g", c.PerClientQPS)
	}
	if c.PerClientQPS > 0 && c.PerClientBurst < 1 {
		return fmt.Errorf("ratelimit: PerClientBurst must be >= 1 when PerClientQPS is set, got %d", c.PerClientBurst)
	}
	if c.ClientShare == 0 {
		c.ClientShare = defaultClientShare
	}
	if c.ClientShare < 0 || c.ClientShare > 1 {
		return fmt.Errorf("ratelimit: ClientShare must be in (0, 1], got %g", c.ClientShare)
	}
	if c.MaxClasses < 0 {
		return fmt.Errorf("ratelimit: MaxClasses must be >= 0, got %d", c.MaxClasses)
	}
	return nil
}
