package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/VictoriaMetrics/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lazyapi/lazyapi/codec"
)

// Config configures a Cache. Zero fields take the defaults of defaultConfig.
type Config struct {
	// Client reads and watches etcd. Required.
	Client *clientv3.Client
	// Logger receives state changes (filled, refused, evicted, relisting).
	// Nil means zap.NewNop().
	Logger *zap.Logger
	// Metrics receives lazyapi_cache_* metrics. Nil means a private set.
	Metrics *metrics.Set
	// Schema peeks labels and fields. Nil means codec.DefaultSchema().
	Schema *codec.Schema

	// Decrypt, when set, returns the plaintext of a value stored in etcd
	// under key for resource (Spec.Name): values encrypted at rest
	// (encryption.Transformers.Decrypt). Labels and fields are derived
	// from the plaintext. The cache holds the value as stored (encrypted)
	// unless HoldDecrypted; a value that fails to decrypt is held as
	// stored, without attributes.
	Decrypt func(ctx context.Context, resource string, key, value []byte) ([]byte, error)
	// EtcdMoved, when set, reports switches of the etcd client's endpoints
	// (store.Failover.Moved: how many so far, and a channel closed at the
	// next). gRPC drains the connection to an endpoint it leaves without
	// ending its streams, so a watch would stay on a member that may be
	// cut off from the quorum; at each switch the cache re-opens its etcd
	// watches on a new gRPC stream (on the new endpoints), from the
	// revision it holds.
	EtcdMoved func() (uint64, <-chan struct{})
	// HoldDecrypted holds decrypted values (--watch-cache-decrypted):
	// reads skip the decryption, and plaintext Secrets stay in memory.
	// The budget counts the bytes held.
	HoldDecrypted bool

	// Disabled turns the whole cache off (--watch-cache=false): every
	// resource reports ErrNotCached.
	Disabled bool
	// MemoryBytes is the one byte budget for values, index and history of
	// all cached resources (--watch-cache-memory). Required when enabled.
	MemoryBytes int64
	// Sizes is the per-resource history size in events by "resource[.group]"
	// (--watch-cache-sizes, see ParseWatchCacheSizes); 0 disables caching
	// of that resource.
	Sizes map[string]int
	// DefaultHistory is the history size of resources not in Sizes.
	DefaultHistory int

	// PageSize is the most keys per etcd range while filling.
	PageSize int
	// PageBytes is the target size of the values of one etcd range while
	// filling: after the first (small) page, the number of keys per range
	// is PageBytes divided by the mean value size seen so far (at most
	// PageSize), so a resource of large objects is never read in ranges of
	// hundreds of MB.
	PageBytes int
	// WaitTimeout bounds a NotOlderThan read waiting for the cache to reach
	// its revision (kube-apiserver: 3 s, then 504 ResourceVersionTooLarge).
	WaitTimeout time.Duration
	// ConsistentTimeout bounds a consistent read waiting for the cache to
	// catch up with etcd's current revision before ErrNotCaughtUp.
	ConsistentTimeout time.Duration
	// WatcherLagBytes bounds how far (in value bytes of pending events) a
	// watcher may fall behind before it is closed with ErrLagging.
	WatcherLagBytes int64
	// BookmarkInterval is the least time between two progress bookmarks of
	// one watcher that asked for them.
	BookmarkInterval time.Duration
	// ProgressInterval is how often the cache asks etcd for a progress
	// notification (advancing the revision of idle resources).
	ProgressInterval time.Duration
	// RetryInterval is how long a resource that was refused, evicted or
	// failed waits before it tries to fill again.
	RetryInterval time.Duration
	// BackfillRevisions is how many revisions before etcd's current
	// revision a fill's resource's history starts (at most back to
	// etcd's compaction, and at most the history's size in events), so
	// that a watch from a resourceVersion seen before a restart resumes
	// instead of getting 410: the fill reads the state there and replays
	// the changes since (Resource.fillForHistory). Negative: the history
	// starts at the fill, at etcd's current revision.
	BackfillRevisions int64
	// ReplayBytes bounds the bytes (keys and values) of the history a
	// fill replays from etcd's watch (Resource.fillForHistory). etcd
	// sends a replay of up to 1,000 revisions in one watch response with
	// no byte bound, and the etcd client holds it twice (gRPC receive
	// buffers and decoded values) outside the budget and admission: 400
	// Secrets of 1 MiB written within BackfillRevisions came as one
	// response of 400 MiB, held as 0.8 GB (bench/RESULTS.md, ## storm:
	// why the 400-Secret storm went over --memory-limit). The fill
	// estimates the bytes of the newest changes from a sample of their
	// values and starts the history late enough that the replay carries
	// about ReplayBytes; what it leaves out is read by the fill's ranges,
	// PageBytes at a time, charged to the budget as they arrive. 0 means
	// the default: MemoryBytes/16, at most 16 MiB (a replay of the
	// history's 1,000 events of up to 16 KiB each is not cut: typical
	// objects keep their whole history; a value-heavy collection keeps
	// its last 16 MiB of changes, at most ~32 MiB held transiently).
	ReplayBytes int64
	// Filled, when set, is called on the resource's goroutine (no lock
	// held) once a fill of resource (Spec.Name) holding bytes of values
	// is complete, with the history before it replayed, just before the
	// resource becomes ready: the moment the fill's transient memory (etcd
	// ranges, the replayed watch responses) has become garbage.
	Filled func(resource string, bytes int64)
	// FillWait bounds how long WaitReady waits for a filling or re-listing
	// resource before ErrFilling.
	FillWait time.Duration
}

// defaultReplayBytes is the most Config.ReplayBytes defaults to.
const defaultReplayBytes = 16 << 20

func defaultConfig() Config {
	return Config{
		DefaultHistory:    1000,
		PageSize:          1000,
		PageBytes:         1 << 20,
		WaitTimeout:       3 * time.Second,
		ConsistentTimeout: 3 * time.Second,
		WatcherLagBytes:   16 << 20,
		BookmarkInterval:  time.Minute,
		ProgressInterval:  5 * time.Second,
		RetryInterval:     time.Minute,
		FillWait:          10 * time.Second,
		BackfillRevisions: 10000,
	}
}

func (c *Config) applyDefaults() {
	d := defaultConfig()
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	if c.Schema == nil {
		c.Schema = codec.DefaultSchema()
	}
	if c.DefaultHistory <= 0 {
		c.DefaultHistory = d.DefaultHistory
	}
	if c.PageBytes <= 0 {
		c.PageBytes = d.PageBytes
	}
	if c.PageSize <= 0 {
		c.PageSize = d.PageSize
	}
	if c.WaitTimeout <= 0 {
		c.WaitTimeout = d.WaitTimeout
	}
	if c.ConsistentTimeout <= 0 {
		c.ConsistentTimeout = d.ConsistentTimeout
	}
	if c.WatcherLagBytes <= 0 {
		c.WatcherLagBytes = d.WatcherLagBytes
	}
	if c.BookmarkInterval <= 0 {
		c.BookmarkInterval = d.BookmarkInterval
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.BackfillRevisions == 0 {
		c.BackfillRevisions = d.BackfillRevisions
	}
	if c.FillWait <= 0 {
		c.FillWait = d.FillWait
	}
	if c.ReplayBytes <= 0 {
		c.ReplayBytes = max(1, min(c.MemoryBytes/16, defaultReplayBytes))
	}
}

func (c *Config) validate() error {
	if c.Client == nil {
		return errors.New("cache: Config.Client is required")
	}
	if !c.Disabled && c.MemoryBytes <= 0 {
		return fmt.Errorf("cache: MemoryBytes must be > 0 when the watch cache is enabled, got %d", c.MemoryBytes)
	}
	for k, v := range c.Sizes {
		if v < 0 {
			return fmt.Errorf("cache: Sizes: size of %q must be >= 0, got %d", k, v)
		}
	}
	return nil
}
