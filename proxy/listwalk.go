package proxy

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/lazyapi/lazyapi/cache"
	"github.com/lazyapi/lazyapi/codec"
	"github.com/lazyapi/lazyapi/encryption"
	"github.com/lazyapi/lazyapi/proxy/encoding"
)

// A LIST's walks over its range (list.go): the size passes of firstPage
// and plan and the write pass of write visit the matching items, page by
// page, each item decided (decrypted, unwrapped, matched, sized) by item.

// walkPass is what a walk over the range is for.
type walkPass uint8

const (
	// passFirstPage: the size pass over the first page only (firstPage);
	// it stops at the page's end (walkState.partial).
	passFirstPage walkPass = iota
	// passSize: the size pass over the rest of the range (plan).
	passSize
	// passWrite: the write pass, whose items are encoded (write).
	passWrite
)

// walkState accumulates a walk over the range.
type walkState struct {
	n         int64  // matches so far
	size      int    // protobuf items size so far
	lastKey   []byte // key of the limit-th match
	hasMore   bool   // keys remain after lastKey
	remaining int64  // keys after lastKey
	partial   bool   // onePage walk stopped at the page's end with more pages
}

// walkItem is one matching item of a walk: its object (decoded) or its
// kept JSON rendering, and, in a size pass of a sized encoder, its item
// size.
type walkItem struct {
	obj     codec.Object
	decoded bool // obj is set (in the write pass unless json is)
	// json, when set, is the item's kept rendering (renderCache.kept,
	// never modified): the value was not unwrapped, obj has only its
	// Format.
	json []byte
	size int
}

// item evaluates the filter on kv, the i-th item of pg's last page, and
// returns it when it matches. In the write pass the item is decrypted and
// unwrapped. In a size pass it is decrypted only when it
// must be: a value the write pass will decrypt again is decided from the
// watch cache's attributes and the plaintext sizes it recorded
// (cache.Attrs.PlainSizes) when they tell, so that each value is decrypted
// once per read (a cached protobuf LIST of 10,000 Secrets decrypted each
// twice: 11-30x the unencrypted LIST's time).
func (l *lister) item(pg pager, i int, kv *mvccpb.KeyValue, pass walkPass) (walkItem, bool, error) {
	sizing := pass != passWrite
	cp, cached := pg.(*cachePager)
	var attrs cache.Attrs
	if cached && i < len(cp.attrs) {
		attrs = cp.attrs[i]
	}
	byAttrs := !l.f.Empty() && cached && l.attrs && attrs.Valid()
	if byAttrs && !l.f.MatchesAttrs(attrs) {
		return walkItem{}, false, nil // not decrypted, not unwrapped
	}
	if l.render != nil && (l.f.Empty() || byAttrs) {
		// A JSON item whose rendering is kept is copied from it: its
		// value is not unwrapped, in the size pass nor in the write
		// pass (8.5% of a cached JSON LIST's CPU, perf, 2026-12-03).
		if b := l.keptJSON(kv, cached); b != nil {
			return walkItem{obj: codec.Object{Format: codec.FormatProtobuf}, json: b}, true, nil
		}
	}
	if sizing && l.pre == nil && l.s.decrypts(l.gr, kv.Value, cached) {
		// Whether it matches is known without the plaintext, or not
		// needed: a list without limit and without sizes streams the
		// items the write pass matches (the size pass then counts a
		// few more value bytes towards the inline bound). From the cache,
		// only values it could decrypt (Valid): one that failed fails
		// here, before the first byte.
		known := (cached && attrs.Valid() && (l.f.Empty() || byAttrs)) || (!cached && l.f.Empty())
		if l.layout != encoding.LayoutSized && (known || l.limit == 0) {
			return walkItem{}, true, nil
		}
		z, ok := attrs.PlainSizes()
		if !cached && l.s.sizes != nil {
			// From etcd: the sizes a previous LIST's write pass
			// recorded (estimate.SizeMemo).
			z, ok = l.s.sizes.Get(kv.Key, kv.ModRevision)
		}
		if known && ok {
			if n, ok := l.enc.ItemSizeOf(z, kv.ModRevision); ok {
				return walkItem{size: n}, true, nil
			}
		}
	}
	var (
		obj codec.Object
		err error
	)
	if sizing && cached && attrs.Valid() && !encryption.Encrypted(kv.Value) {
		// Stored in plaintext, and the cache read it through the
		// resource's transformer (identity): the write pass runs it.
		obj, err = l.s.unwrap(l.st.r, kv)
	} else {
		obj, err = l.unwrap(kv, cached)
	}
	if err != nil {
		return walkItem{}, false, err
	}
	it := walkItem{obj: obj, decoded: true}
	if !l.f.Empty() && !byAttrs {
		l.meta.Reset()
		if err := l.s.schema.PeekMeta(obj, &l.meta); err != nil {
			l.s.decodeErrs.Inc()
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
		ok, err := l.f.Matches(l.s.schema, obj, &l.meta)
		if err != nil {
			l.s.decodeErrs.Inc()
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
		if !ok {
			return it, false, nil
		}
	}
	if sizing && l.layout == encoding.LayoutSized {
		if it.size, err = l.enc.ItemSize(obj, kv.ModRevision); err != nil {
			return it, false, &decodeError{key: string(kv.Key), err: err}
		}
	}
	return it, true, nil
}

// keptJSON returns the kept JSON rendering of kv's item, or nil: only for
// a value in the protobuf envelope that is served without a transformer
// (a value that is decrypted must be, to fail as it would otherwise).
func (l *lister) keptJSON(kv *mvccpb.KeyValue, cached bool) []byte {
	if !codec.IsProtobuf(kv.Value) || l.s.decrypts(l.gr, kv.Value, cached) {
		return nil
	}
	// Items of a built-in list carry no apiVersion and kind.
	return l.render.rendering(kv.Key, kv.ModRevision, false)
}

// appendItem appends it, the item of kv, to dst: its kept rendering, or
// encoded by Server.listItem.
func (l *lister) appendItem(dst []byte, it *walkItem, kv *mvccpb.KeyValue, first bool) ([]byte, error) {
	if it.json == nil {
		return l.s.listItem(l.enc, dst, kv.Key, kv.Value, it.obj, kv.ModRevision, first)
	}
	l.render.hits.Inc()
	if !first {
		dst = codec.AppendJSONListSep(dst)
	}
	return append(dst, it.json...), nil
}

// unwrap decrypts and unwraps kv's value (kv itself is not changed).
func (l *lister) unwrap(kv *mvccpb.KeyValue, cached bool) (codec.Object, error) {
	if l.s.cfg.Encryption == nil {
		return l.s.unwrap(l.st.r, kv)
	}
	v, err := l.s.plaintext(l.ctx, l.gr, kv.Key, kv.Value, cached)
	if err != nil {
		return codec.Object{}, err
	}
	pkv := mvccpb.KeyValue{Key: kv.Key, Value: v, ModRevision: kv.ModRevision}
	return l.s.unwrap(l.st.r, &pkv)
}

// walk visits the matching items of page and, unless pass is
// passFirstPage, of the following pages of pg, until limit matches or the
// end of the range.
func (l *lister) walk(ctx context.Context, pg pager, page []*mvccpb.KeyValue, ws *walkState, pass walkPass,
	emit func(it *walkItem, kv *mvccpb.KeyValue) error) error {
	for {
		for i, kv := range page {
			it, ok, err := l.item(pg, i, kv, pass)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if err := emit(&it, kv); err != nil {
				return err
			}
			ws.n++
			if l.limit > 0 && ws.n == l.limit {
				ws.lastKey = append(ws.lastKey[:0], kv.Key...)
				ws.hasMore = i+1 < len(page) || pg.More()
				ws.remaining = pg.RemainingAfter(i)
				return nil
			}
		}
		if !pg.More() {
			return nil
		}
		if pass == passFirstPage {
			ws.partial = true
			return nil
		}
		var err error
		page, err = pg.Next(ctx)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
	}
}

// sizeEmit is the walk of the size pass: it counts the values' bytes, for
// a sized encoder the items' sizes, and the items' encoding into pre while
// it fits.
func (l *lister) sizeEmit(it *walkItem, kv *mvccpb.KeyValue) error {
	l.pageBytes += len(kv.Value)
	if l.layout == encoding.LayoutSized {
		l.ws.size += it.size
		if l.pre != nil && l.ws.size > protoBufferBytes {
			l.dropPre() // too large: stream in a second pass
		}
	}
	if l.pre != nil {
		if !it.decoded && it.json == nil {
			panic("BUG: a size pass that encodes skipped the decoding")
		}
		var err error
		if *l.pre, err = l.appendItem(*l.pre, it, kv, l.ws.n == 0); err != nil {
			l.s.decodeErrs.Inc()
			return &decodeError{key: string(kv.Key), err: err}
		}
		l.preFormat = it.obj.Format
		if len(*l.pre) > protoBufferBytes {
			l.dropPre() // too large: stream in a second pass
		}
	}
	return nil
}

// dropPre gives up the size pass's encoding (the list streams instead).
func (l *lister) dropPre() {
	*l.pre = nil
	l.pre = nil
}

// releasePre returns the size pass's buffer to the pool.
func (l *lister) releasePre() {
	if l.pre != nil {
		putBuf(l.pre)
		l.pre = nil
	}
}
