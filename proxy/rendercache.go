package proxy

import (
	"bytes"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/internal/bytesutil"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// Rendered JSON of hot objects.
//
// Transcoding a stored protobuf object to JSON is most of the CPU of a
// cached JSON LIST (40% of lazyapi's CPU for LISTs of 4 KiB ConfigMaps of
// config text over TLS, perf, 2026-12-03; the rest is TLS and the socket).
// The JSON of one object version is fixed: it depends only on the etcd key,
// its mod revision (the object's resourceVersion) and whether the type meta
// is written (a GET writes kind and apiVersion, a list item does not). So
// renderCache keeps renderings of objects that are read again and again (a
// LIST repeated by many clients, informers re-listing) and a hit copies
// bytes instead of transcoding (kube-apiserver keeps serialized forms of
// watch events for the same reason; its LISTs encode every object each
// time).
//
// Memory: the bytes are charged to the watch cache's budget
// (--watch-cache-memory, cache.ReserveBelow) and only while the budget in
// use stays under renderBudgetShare of it, so rendered JSON never takes the
// room the cached resources need: when the budget is tight nothing is
// added, and what is held is evicted as new renderings arrive. The cache
// holds at most renderMaxBytes and at most an eighth of the budget. Without
// a watch cache (Config.Cache nil or disabled) there is no rendering cache.
//
// Admission: a rendering is kept the second time its object version is
// rendered within a short while (a table of recent hashes, renderSeenSlots,
// two slots a hash: seenBefore), so a single pass over a large collection (a LIST of
// 1 GiB read once) does not copy every object into the cache and evict the
// hot ones. Eviction: CLOCK (second chance) per shard.
//
// Only protobuf-stored objects are cached: a JSON-stored object is served
// by a passthrough copy already. Table rows (their age column reads the
// clock), YAML and PartialObjectMetadata are not cached.

const (
	// renderMaxBytes bounds the rendering cache (bytes of renderings, keys
	// and entries).
	renderMaxBytes = 64 << 20
	// renderBudgetShare: renderings are added only while the watch cache
	// budget in use stays at most 3/4 of it.
	renderBudgetNum, renderBudgetDen = 3, 4
	// renderShards spreads the lock.
	renderShards = 32
	// renderSeenSlots is the size of the admission table (8 bytes a slot).
	renderSeenSlots = 1 << 16
	// renderEntryOverhead approximates an entry's cost besides its key and
	// bytes: the entry struct, its map slot and clock slot.
	renderEntryOverhead = 96
	// renderMinBytes: renderings shorter than this are not kept (a small
	// object transcodes in about the time a lookup takes).
	renderMinBytes = 512
)

// renderEntry is one rendering; b is never modified once stored.
type renderEntry struct {
	hash uint64
	key  string
	rev  int64
	full bool
	b    []byte
	ref  atomic.Bool // CLOCK reference bit
	slot int         // index in its shard's clock (guarded by the shard's mu)
}

func (e *renderEntry) cost() int64 { return renderCost(len(e.b), len(e.key)) }

// renderCost is the cost of an entry of n bytes of rendering and a key of
// k bytes.
func renderCost(n, k int) int64 { return int64(n+k) + renderEntryOverhead }

type renderShard struct {
	mu    sync.RWMutex
	m     map[uint64]*renderEntry // guarded by mu
	clock []*renderEntry          // guarded by mu: entries in insertion order (nil: free slot)
	hand  int                     // guarded by mu
	bytes int64                   // guarded by mu
}

// renderCache holds JSON renderings of hot object versions. It is safe for
// concurrent use; a nil *renderCache caches nothing.
type renderCache struct {
	budget   *cache.Cache
	maxBytes int64 // min(renderMaxBytes, budget/8)
	limit    int64 // budget in use above which nothing is added
	seed     maphash.Seed
	seen     []atomic.Uint64
	shards   [renderShards]renderShard
	bytes    atomic.Int64

	hits, misses, kept *metrics.Counter
}

// newRenderCache returns a rendering cache charged to c's budget, or nil
// when there is no usable budget.
func newRenderCache(ms *metrics.Set, c *cache.Cache) *renderCache {
	if c == nil || c.MemoryBytes() <= 0 {
		return nil
	}
	budget := c.MemoryBytes()
	rc := &renderCache{
		budget:   c,
		maxBytes: min(renderMaxBytes, budget/8),
		limit:    budget / renderBudgetDen * renderBudgetNum,
		seed:     maphash.MakeSeed(),
		seen:     make([]atomic.Uint64, renderSeenSlots),
	}
	for i := range rc.shards {
		rc.shards[i].m = make(map[uint64]*renderEntry)
	}
	ms.GetOrCreateGauge("lazyapi_render_cache_bytes", func() float64 { return float64(rc.bytes.Load()) })
	rc.hits = ms.GetOrCreateCounter(`lazyapi_render_cache_total{result="hit"}`)
	rc.misses = ms.GetOrCreateCounter(`lazyapi_render_cache_total{result="miss"}`)
	rc.kept = ms.GetOrCreateCounter(`lazyapi_render_cache_total{result="kept"}`)
	return rc
}

func (rc *renderCache) hash(key []byte, rev int64, full bool) uint64 {
	var h maphash.Hash
	h.SetSeed(rc.seed)
	_, _ = h.Write(key)
	x := h.Sum64() ^ uint64(rev)*0x9E3779B97F4A7C15
	if full {
		x ^= 0xA5A5A5A5A5A5A5A5
	}
	return x
}

// renderOf returns the rendering cache for an object stored as stored:
// nil when its rendering must not outlive the request (it is encrypted at
// rest and the watch cache holds values encrypted: decrypt.go).
func (s *Server) renderOf(stored []byte) *renderCache {
	if s.render == nil || s.keepsNoPlaintext(stored) {
		return nil
	}
	return s.render
}

// listItem is enc.listItem, with a JSON item's bytes (or the JSON a
// Table row is printed from) from the rendering cache when they are kept
// there. key is the item's etcd key, stored its value as stored.
func (s *Server) listItem(enc encoding.Encoder, dst, key, stored []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	c, rc := enc.Cached(), s.renderOf(stored)
	if c == nil || rc == nil || obj.Format != codec.FormatProtobuf {
		return enc.ListItem(dst, obj, rv, first)
	}
	if c.Row != nil {
		return tableRow(rc, c, dst, key, obj, rv, first)
	}
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	// Items of a built-in list carry no apiVersion and kind.
	return rc.appendJSON(c.Schema, dst, key, obj, rv, codec.JSONOptions{OmitTypeMeta: true})
}

// tableRow is a Table encoder's listItem whose printer reads the object's
// JSON from the rendering cache (the row's cells read the clock: rows are
// not cached, the object's JSON is).
func tableRow(rc *renderCache, c *encoding.CachedJSON, dst, key []byte, obj codec.Object, rv int64, first bool) ([]byte, error) {
	bp := getBuf()
	defer putBuf(bp)
	js, err := rc.appendJSON(c.Schema, (*bp)[:0], key, obj, rv, codec.JSONOptions{})
	*bp = js
	if err != nil {
		return dst, err
	}
	return c.Row(dst, js, obj, rv, first)
}

// jsonCache returns the rendering cache and the schema when enc's objects
// are their JSON (a Table's are not) and obj, stored as stored, may be
// served from the cache; else nil.
func (s *Server) jsonCache(enc encoding.Encoder, stored []byte, obj codec.Object) (*renderCache, *codec.Schema) {
	c := enc.Cached()
	if c == nil || c.Row != nil || obj.Format != codec.FormatProtobuf {
		return nil, nil
	}
	return s.renderOf(stored), c.Schema
}

// object is enc.object, with a JSON object's bytes from the rendering
// cache when they are kept there. key is the object's etcd key, stored its
// value as stored.
func (s *Server) object(enc encoding.Encoder, dst, key, stored []byte, obj codec.Object, rv int64) ([]byte, error) {
	rc, sc := s.jsonCache(enc, stored, obj)
	if rc == nil {
		return enc.Object(dst, obj, rv)
	}
	dst, err := rc.appendJSON(sc, dst, key, obj, rv, codec.JSONOptions{})
	if err != nil {
		return dst, err
	}
	return append(dst, '\n'), nil // as jsonEncoder.object
}

// keptObject returns the kept rendering of a JSON GET's object, or nil:
// the object Server.object would copy from the rendering cache, looked up
// before value (stored, or its plaintext) is unwrapped. key is the
// object's etcd key, stored its value as stored, rev its mod revision.
func (s *Server) keptObject(enc encoding.Encoder, key, stored, value []byte, rev int64) []byte {
	if c := enc.Cached(); c == nil || c.Row != nil || !codec.IsProtobuf(value) {
		return nil
	}
	rc := s.renderOf(stored)
	if rc == nil {
		return nil
	}
	return rc.rendering(key, rev, true)
}

// watchEvent is enc.watchEvent, with a JSON event's object from the
// rendering cache when it is kept there: the initial events of many
// WatchList watchers (an informer storm) then copy one rendering instead of
// each transcoding every object. key is the object's etcd key, stored its
// value as stored.
//
// A DELETED event's object is the object's previous state sent at the
// change's revision (a deletion, or a change that takes it out of the
// watch's selector): not the object version (key, rv), so it is neither
// taken from nor kept in the rendering cache. Kept, a GET or LIST of the
// object at rv was served its previous state (found by the robustness
// suite; TestRenderCacheNotPoisonedByDeleted).
func (s *Server) watchEvent(enc encoding.Encoder, dst, key, stored []byte, t codec.EventType, obj codec.Object, rv int64) ([]byte, error) {
	if t == codec.EventDeleted {
		return enc.WatchEvent(dst, t, obj, rv)
	}
	rc, sc := s.jsonCache(enc, stored, obj)
	if rc == nil {
		return enc.WatchEvent(dst, t, obj, rv)
	}
	start := len(dst)
	// codec.AppendJSONWatchEvent's frame; event types need no escaping.
	dst = append(dst, `{"type":"`...)
	dst = append(dst, t...)
	dst = append(dst, `","object":`...)
	dst, err := rc.appendJSON(sc, dst, key, obj, rv, codec.JSONOptions{})
	if err != nil {
		return dst[:start], err
	}
	return append(dst, "}\n"...), nil
}

// appendJSON appends obj's JSON (resourceVersion rv, type meta written
// unless opts.OmitTypeMeta) to dst: from a kept rendering when there is
// one, else transcoded by sc (and kept if the object version is hot). key
// is the object's etcd key.
func (rc *renderCache) appendJSON(sc *codec.Schema, dst []byte, key []byte, obj codec.Object, rv int64, opts codec.JSONOptions) ([]byte, error) {
	full := !opts.OmitTypeMeta
	h := rc.hash(key, rv, full)
	sh := &rc.shards[h%renderShards]
	if b := rc.lookup(sh, h, key, rv, full); b != nil {
		rc.hits.Inc()
		return append(dst, b...), nil
	}
	rc.misses.Inc()
	start := len(dst)
	dst, err := sc.AppendJSON(dst, obj, rv, opts)
	if err != nil || len(dst)-start < renderMinBytes {
		return dst, err
	}
	if !rc.seenBefore(h) {
		return dst, nil // first sight: remembered, kept on the second
	}
	rc.keep(sh, h, key, rv, full, dst[start:])
	return dst, nil
}

// seenBefore reports whether the object version with hash h was rendered
// recently, and remembers it. Each hash has two slots in the admission
// table, from independent bits of h, and is written to both: two hot
// object versions that share one slot, read in turn (a LIST's items and a
// Table's rows of another item), would otherwise overwrite each other
// forever and neither be kept; with two slots both stay unless both slots
// collide (about 1 in 2^32 for a pair, against 1 in 2^16).
func (rc *renderCache) seenBefore(h uint64) bool {
	a := &rc.seen[h%renderSeenSlots]
	b := &rc.seen[(h>>32)%renderSeenSlots]
	if a.Load() == h || b.Load() == h {
		return true
	}
	a.Store(h)
	b.Store(h)
	return false
}

// rendering returns the kept rendering of the object version (key, rev; type
// meta written when full), or nil. It counts no hit: the caller counts
// rc.hits when it serves the bytes. The bytes are never modified; they
// stay readable after the entry is evicted.
//
// A kept rendering is what appendJSON would transcode from the value
// stored at key with mod revision rev, so a caller holding such a value
// may serve it without unwrapping the value at all (lister.item,
// Server.keptObject): the value of a key at a revision never changes.
func (rc *renderCache) rendering(key []byte, rev int64, full bool) []byte {
	h := rc.hash(key, rev, full)
	return rc.lookup(&rc.shards[h%renderShards], h, key, rev, full)
}

// lookup returns the rendering with hash h in sh, or nil.
func (rc *renderCache) lookup(sh *renderShard, h uint64, key []byte, rev int64, full bool) []byte {
	sh.mu.RLock()
	e := sh.m[h]
	sh.mu.RUnlock()
	if e == nil || e.rev != rev || e.full != full || e.key != bytesutil.ToUnsafeString(key) {
		return nil
	}
	if !e.ref.Load() {
		e.ref.Store(true) // no store (a shared cache line) when already set
	}
	return e.b
}

// keep adds a copy of rendering b (of key at rv, full or not) to sh,
// evicting (CLOCK) to stay within maxBytes and the watch cache budget; when
// the budget is tight nothing is kept. b is copied only once its room is
// reserved: while the budget stays tight (a watch cache over
// renderBudgetNum/Den full, the 400-Secret storm at --memory-limit=2Gi)
// every second sight of an object version would otherwise copy its
// rendering and drop it, ~1 byte of garbage per byte served by the
// storm's transcodes (bench/RESULTS.md ## mem: the storm's garbage).
func (rc *renderCache) keep(sh *renderShard, h uint64, key []byte, rv int64, full bool, b []byte) {
	cost := renderCost(len(b), len(key))
	shardMax := rc.maxBytes / renderShards
	if cost > shardMax {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[h]; old != nil {
		rc.removeLocked(sh, old)
	}
	for sh.bytes+cost > shardMax && rc.evictOneLocked(sh) {
	}
	for !rc.budget.ReserveBelow(cost, rc.limit) {
		// The watch cache needs its budget: give back what this shard
		// holds, oldest first, and keep b only if that makes room.
		if !rc.evictOneLocked(sh) {
			return
		}
	}
	e := &renderEntry{hash: h, key: string(key), rev: rv, full: full, b: bytes.Clone(b)}
	sh.m[h] = e
	e.slot = len(sh.clock)
	sh.clock = append(sh.clock, e)
	sh.bytes += cost
	rc.bytes.Add(cost)
	rc.kept.Inc()
	if len(sh.clock) > 2*len(sh.m)+64 {
		compactClock(sh)
	}
}

// evictOneLocked evicts the next entry without its reference bit (CLOCK)
// and reports whether it evicted one.
func (rc *renderCache) evictOneLocked(sh *renderShard) bool {
	if len(sh.m) == 0 {
		return false
	}
	for range 2*len(sh.clock) + 1 {
		if sh.hand >= len(sh.clock) {
			sh.hand = 0
		}
		e := sh.clock[sh.hand]
		if e == nil {
			sh.hand++
			continue
		}
		if e.ref.Swap(false) {
			sh.hand++
			continue
		}
		rc.removeLocked(sh, e)
		return true
	}
	return false
}

// removeLocked drops e from sh and returns its bytes.
func (rc *renderCache) removeLocked(sh *renderShard, e *renderEntry) {
	delete(sh.m, e.hash)
	sh.clock[e.slot] = nil
	cost := e.cost()
	sh.bytes -= cost
	rc.bytes.Add(-cost)
	rc.budget.Release(cost)
}

// compactClock removes the free slots of sh's clock.
func compactClock(sh *renderShard) {
	j := 0
	for i, e := range sh.clock {
		if e == nil {
			if i < sh.hand {
				sh.hand--
			}
			continue
		}
		e.slot = j
		sh.clock[j] = e
		j++
	}
	clear(sh.clock[j:])
	sh.clock = sh.clock[:j]
	if sh.hand < 0 {
		sh.hand = 0
	}
}

// close returns every kept byte to the budget.
func (rc *renderCache) close() {
	if rc == nil {
		return
	}
	for i := range rc.shards {
		sh := &rc.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			rc.removeLocked(sh, e)
		}
		sh.clock = nil
		sh.mu.Unlock()
	}
}
