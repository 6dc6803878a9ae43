package estimate

import (
	"hash/maphash"
	"sync"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/codec"
)

// SizeMemo remembers the codec.ItemSizes of the plaintext of values
// encrypted at rest that a protobuf LIST from etcd decrypted, by etcd key
// and mod revision (which name one value), so that the size pass of the
// next such LIST takes the sizes from here instead of decrypting the value
// a second time (proxy's lister.item): without a watch cache for the
// resource (--watch-cache-sizes=secrets#0, a resource over the cache's
// budget, an exact revision older than its history) a protobuf LIST over 2
// MiB, whose head carries the size of all its items, decrypts each value
// once per read from the second LIST on. What the watch cache records per
// value (cache.Attrs.PlainSizes), for values it does not hold.
//
// It holds no plaintext: a plaintext's sizes, which the ciphertext's length
// tells within a block anyway. It is bounded (sizeMemoEntries; keys are
// hashed) and emptied when full. A wrong entry (a hash collision of two
// keys at one revision, an etcd restored to an older revision and written
// again) can only make a LIST's items differ from its announced size,
// which the write pass detects and aborts (never a corrupt list); that
// pass records the true sizes, so the retry succeeds.
type SizeMemo struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]memoEntry
}

// sizeMemoEntries bounds a SizeMemo: 2^18 values (~40-50 bytes each in
// the map: ~13 MiB).
const sizeMemoEntries = 1 << 18

type memoEntry struct {
	rev    int64
	raw    uint32
	meta   int32
	format codec.Format
}

func NewSizeMemo(ms *metrics.Set) *SizeMemo {
	m := &SizeMemo{seed: maphash.MakeSeed(), m: map[uint64]memoEntry{}}
	ms.GetOrCreateGauge("lazyapi_decrypt_size_memo_entries", func() float64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return float64(len(m.m))
	})
	return m
}

// Get returns the sizes recorded for the value of key at rev.
func (m *SizeMemo) Get(key []byte, rev int64) (codec.ItemSizes, bool) {
	h := maphash.Bytes(m.seed, key)
	m.mu.Lock()
	e, ok := m.m[h]
	m.mu.Unlock()
	if !ok || e.rev != rev {
		return codec.ItemSizes{}, false
	}

	return codec.ItemSizes{Format: e.format, Raw: int(e.raw), Meta: int(e.meta)}, true
}

// Put records z for the value of key at rev.
func (m *SizeMemo) Put(key []byte, rev int64, z codec.ItemSizes) {
	if z.Raw < 0 || z.Raw > 1<<31 || z.Meta > 1<<30 {
		return
	}
	h := maphash.Bytes(m.seed, key)
	e := memoEntry{rev: rev, raw: uint32(z.Raw), meta: int32(z.Meta), format: z.Format}
	m.mu.Lock()
	if old, ok := m.m[h]; !ok || old != e {
		if !ok && len(m.m) >= sizeMemoEntries {
			clear(m.m)
		}
		m.m[h] = e
	}
	m.mu.Unlock()
}
