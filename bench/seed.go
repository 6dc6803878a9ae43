package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lazyapi/lazyapi/internal/storagefmt"
)

// Limits of one etcd transaction with etcd's default flags
// (--max-request-bytes 1.5 MiB, --max-txn-ops 128).
const (
	maxTxnBytes = 1400 << 10
	maxTxnOps   = 128
)

// DefaultNamespacePrefix names seeded namespaces: lazybench-0000, ...
const DefaultNamespacePrefix = "lazybench-"

// SeedConfig says what Seed writes. Zero fields take the defaults noted.
type SeedConfig struct {
	// Prefix is the etcd key prefix (--etcd-prefix); "" means /registry.
	Prefix string
	// Kind is the kind to seed.
	Kind Kind
	// Count is the number of objects.
	Count int
	// Namespaces spreads the objects over this many namespaces; 0 means 1.
	Namespaces int
	// NamespacePrefix names the namespaces; "" means DefaultNamespacePrefix.
	// Clean deletes by it.
	NamespacePrefix string
	// Size is the distribution of stored object sizes.
	Size SizeDist
	// JSON stores built-in kinds as JSON (kube-apiserver's
	// --storage-media-type=application/json); custom resources are always JSON.
	JSON bool
	// Seed seeds the random generator; the same seed writes the same objects.
	Seed uint64
	// InFlight is the number of concurrent transactions; 0 means 8.
	InFlight int
	// Progress receives a progress bar; nil shows none.
	Progress io.Writer
}

func (c *SeedConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = "/registry"
	}
	c.Prefix = strings.TrimSuffix(c.Prefix, "/")
	if c.Namespaces <= 0 {
		c.Namespaces = 1
	}
	if c.NamespacePrefix == "" {
		c.NamespacePrefix = DefaultNamespacePrefix
	}
	if c.InFlight <= 0 {
		c.InFlight = 8
	}
	if c.Size.Kind == "" {
		c.Size = SizeDist{Kind: "fixed", Size: 4 << 10}
	}
}

// SeedResult tells what Seed wrote.
type SeedResult struct {
	Objects    int           `json:"objects"`
	Bytes      int64         `json:"bytes"` // stored bytes of the objects (values only)
	Namespaces int           `json:"namespaces"`
	Txns       int           `json:"txns"`
	Duration   time.Duration `json:"duration_ns"`
	Revision   int64         `json:"revision"` // etcd revision after the last write
}

type kv struct {
	key string
	val []byte
}

// Seed writes cfg.Count objects of cfg.Kind into etcd in kube-apiserver's
// storage format, plus their Namespace objects (and the CRD for a custom
// resource), in batched transactions with several in flight.
func Seed(ctx context.Context, cli *clientv3.Client, cfg SeedConfig) (SeedResult, error) {
	cfg.setDefaults()
	if err := cfg.Size.Validate(); err != nil {
		return SeedResult{}, fmt.Errorf("cannot seed: %w", err)
	}
	if cfg.Count < 0 {
		return SeedResult{}, fmt.Errorf("cannot seed: negative count %d", cfg.Count)
	}
	start := time.Now()
	now := start
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))

	// Payload overhead per kind and format: the stored size of an object
	// with an empty payload, and how many stored bytes one payload byte
	// costs (4/3 for a base64 secret in JSON).
	base, ratio, err := calibrate(cfg)
	if err != nil {
		return SeedResult{}, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []kv, cfg.InFlight)
	var (
		res      SeedResult
		bytes    atomic.Int64
		written  atomic.Int64
		txns     atomic.Int64
		lastRev  atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	var bar *progressbar.ProgressBar
	if cfg.Progress != nil {
		bar = progressbar.NewOptions64(int64(cfg.Count),
			progressbar.OptionSetWriter(cfg.Progress),
			progressbar.OptionSetDescription("seeding "+cfg.Kind.Resource),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("obj"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		defer bar.Exit()
	}
	for range cfg.InFlight {
		wg.Go(func() {
			for b := range batches {
				ops := make([]clientv3.Op, len(b))
				var n int64
				for i, e := range b {
					ops[i] = clientv3.OpPut(e.key, string(e.val))
					n += int64(len(e.val))
				}
				tctx, tcancel := context.WithTimeout(ctx, 30*time.Second)
				resp, err := cli.Txn(tctx).Then(ops...).Commit()
				tcancel()
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("cannot write %d objects to etcd: %w", len(b), err); cancel() })
					continue
				}
				for {
					old := lastRev.Load()
					if resp.Header.Revision <= old || lastRev.CompareAndSwap(old, resp.Header.Revision) {
						break
					}
				}
				txns.Add(1)
				bytes.Add(n)
				written.Add(int64(len(b)))
				if bar != nil {
					_ = bar.Add(len(b))
				}
			}
		})
	}

	var batch []kv
	var batchBytes int
	send := func() bool {
		if len(batch) == 0 {
			return true
		}
		select {
		case batches <- batch:
		case <-ctx.Done():
			return false
		}
		batch, batchBytes = nil, 0
		return true
	}
	add := func(key string, val []byte) bool {
		if len(batch) >= maxTxnOps || (len(batch) > 0 && batchBytes+len(key)+len(val)+64 > maxTxnBytes) {
			if !send() {
				return false
			}
		}
		batch = append(batch, kv{key, val})
		batchBytes += len(key) + len(val) + 64
		return true
	}

	func() {
		// Namespaces and the CRD first, so a server that watches them sees
		// them before the objects.
		for i := range cfg.Namespaces {
			name := NamespaceName(cfg.NamespacePrefix, i)
			val, err := encode(Kind{Name: "namespace"}, namespaceObject(name, r, now), cfg.JSON)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			if !add(storagefmt.Key(cfg.Prefix, "namespaces", "", name), val) {
				return
			}
		}
		if cfg.Kind.Custom {
			val, err := storagefmt.JSON(crdObject(r, now))
			if err != nil {
				errOnce.Do(func() { firstErr = err })
				return
			}
			if !add(crdKey(cfg.Prefix), val) {
				return
			}
		}
		for i := range cfg.Count {
			s := newSpec(cfg.Kind, i, &cfg, r, now)
			n := int(float64(s.size-base) / ratio)
			val, err := encode(cfg.Kind, build(cfg.Kind, s, r, max(n, 0)), cfg.JSON)
			if err != nil {
				errOnce.Do(func() { firstErr = fmt.Errorf("cannot encode %s %s/%s: %w", cfg.Kind.Name, s.namespace, s.name, err) })
				return
			}
			if !add(storagefmt.Key(cfg.Prefix, cfg.Kind.KeyPrefix, s.namespace, s.name), val) {
				return
			}
		}
		send()
	}()
	close(batches)
	wg.Wait()
	res.Objects = int(written.Load()) - cfg.Namespaces
	if cfg.Kind.Custom {
		res.Objects--
	}
	res.Objects = max(res.Objects, 0)
	res.Bytes = bytes.Load()
	res.Namespaces = cfg.Namespaces
	res.Txns = int(txns.Load())
	res.Duration = time.Since(start)
	res.Revision = lastRev.Load()
	if firstErr != nil {
		return res, firstErr
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("cannot seed: %w", err)
	}
	return res, nil
}

// CRD returns the key and stored value of the seeded custom resource's
// definition (kube-apiserver's storage format), for harnesses that write
// Widgets themselves (internal/robustness).
func CRD(prefix string, r *rand.Rand, now time.Time) (key string, val []byte, err error) {
	val, err = storagefmt.JSON(crdObject(r, now))
	return crdKey(prefix), val, err
}

func crdKey(prefix string) string {
	return storagefmt.Key(prefix, "apiextensions.k8s.io/customresourcedefinitions", "", CRDName)
}

// calibrate measures the stored size of an object with an empty payload and
// the stored bytes per payload byte for cfg's kind and format.
func calibrate(cfg SeedConfig) (base int, ratio float64, err error) {
	r := rand.New(rand.NewPCG(1, 2))
	s := newSpec(cfg.Kind, 0, &cfg, r, time.Now())
	const probe = 8192
	v0, err := encode(cfg.Kind, build(cfg.Kind, s, r, 0), cfg.JSON)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot encode a %s: %w", cfg.Kind.Name, err)
	}
	v1, err := encode(cfg.Kind, build(cfg.Kind, s, r, probe), cfg.JSON)
	if err != nil {
		return 0, 0, fmt.Errorf("cannot encode a %s: %w", cfg.Kind.Name, err)
	}
	return len(v0), float64(len(v1)-len(v0)) / probe, nil
}

// CleanConfig says what Clean removes.
type CleanConfig struct {
	// Prefix is the etcd key prefix; "" means /registry.
	Prefix string
	// NamespacePrefix is the seeded namespaces' prefix; "" means
	// DefaultNamespacePrefix. It must not be empty after defaulting.
	NamespacePrefix string
}

// Clean removes what Seed wrote: every object of a seedable kind in a
// namespace whose name starts with the namespace prefix, those namespaces,
// and the seeded CRD. It returns the number of keys deleted.
func Clean(ctx context.Context, cli *clientv3.Client, cfg CleanConfig) (int64, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "/registry"
	}
	cfg.Prefix = strings.TrimSuffix(cfg.Prefix, "/")
	if cfg.NamespacePrefix == "" {
		cfg.NamespacePrefix = DefaultNamespacePrefix
	}
	if strings.ContainsAny(cfg.NamespacePrefix, "/") {
		return 0, errors.New("cannot clean: namespace prefix contains '/'")
	}
	var prefixes []string
	for _, k := range Kinds {
		prefixes = append(prefixes, cfg.Prefix+"/"+k.KeyPrefix+"/"+cfg.NamespacePrefix)
	}
	prefixes = append(prefixes, cfg.Prefix+"/namespaces/"+cfg.NamespacePrefix)
	var deleted int64
	for _, p := range prefixes {
		resp, err := cli.Delete(ctx, p, clientv3.WithPrefix())
		if err != nil {
			return deleted, fmt.Errorf("cannot delete %q: %w", p, err)
		}
		deleted += resp.Deleted
	}
	// The CRD only when no widget is left anywhere (another seed may use a
	// different namespace prefix).
	w, err := cli.Get(ctx, cfg.Prefix+"/"+CRGroup+"/"+CRPlural+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return deleted, fmt.Errorf("cannot count widgets: %w", err)
	}
	if w.Count == 0 {
		resp, err := cli.Delete(ctx, crdKey(cfg.Prefix))
		if err != nil {
			return deleted, fmt.Errorf("cannot delete the CRD: %w", err)
		}
		deleted += resp.Deleted
	}
	return deleted, nil
}

// CountObjects returns how many objects of kind etcd holds in namespace ns
// ("" for all namespaces) and the revision it read at.
func CountObjects(ctx context.Context, cli *clientv3.Client, prefix string, k Kind, ns string) (int64, int64, error) {
	if prefix == "" {
		prefix = "/registry"
	}
	p := strings.TrimSuffix(prefix, "/") + "/" + k.KeyPrefix + "/"
	if ns != "" {
		p += ns + "/"
	}
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, 0, fmt.Errorf("cannot count %q: %w", p, err)
	}
	return resp.Count, resp.Header.Revision, nil
}
