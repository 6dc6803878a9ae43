package cache

import "strings"

// Dispatch: which watchers a change wakes.
//
// A watcher without an index term and not limited to one namespace (no
// selector, or labels only, cluster-wide) reads the history through its
// cursor and is woken by every change (Resource.notify): the scan path.
//
// Any other watcher is indexed, as kube-apiserver's cacher indexes its
// watchers by namespace and name and by the resource's trigger
// (spec.nodeName for Pods): under (path, scope, value), where path is the
// field of the first term of WatchOptions.Index the cache can read from
// its derived attributes ("" for a watch of one namespace without one),
// scope the namespace's key prefix of a watch of one namespace ("" for a
// cluster-wide one) and value the term's value. A change is looked up for
// each indexed path, with the values of its new and previous state (a
// change that takes an object out of a selector reaches the watchers of
// its previous value, which send DELETED) in its namespace's scope and in
// "" (a change whose attributes the cache could not derive, a value it
// cannot peek, is queued for every watcher of a path not read from the
// key, since their filters read such a value themselves): the watchers
// found get the change's sequence number in their queue
// (Watcher.pending) and a wake-up. A change costs the lookups plus the
// watchers it can match, whatever the number of watchers that select
// other values (BenchmarkDispatch; bench/RESULTS.md ## fanout).
//
// An indexed watcher's position in the history is the first sequence of
// its queue (or its cursor while it replays the history it was started
// from, before Watcher.live): the lag rules (Config.WatcherLagBytes, the
// next event leaving the history) apply to it as to a cursor. Watchers
// with a non-empty queue are kept in Resource.busy so that the sweep after
// each change looks at them only.
//
// Bookmarks: an idle indexed watcher is not woken by the changes it does
// not match, so when its bookmark is due and there is no newer revision
// to send, it waits in Resource.bookmarkWaiters for the next change or
// progress notification, which wakes every waiter once (at most one wake
// per watcher and Config.BookmarkInterval).

// idxKey is an index bucket's key within one path.
type idxKey struct {
	scope string // the key prefix of the watch's namespace ("" cluster-wide)
	value string
}

// watchIndex is a resource's indexed watchers (guarded by Resource.mu).
type watchIndex map[string]map[idxKey][]*Watcher

// FieldTerm is an exact-match field selector term: Path = Value.
type FieldTerm struct {
	// Path is a field selector path: metadata.name, metadata.namespace,
	// or one of the resource's Spec.Fields.
	Path  string
	Value string
}

// indexTerm picks the watcher's index bucket from its options: the most
// selective term the cache can evaluate (metadata.name, then the
// resource's fields in Index order, then metadata.namespace), scoped to
// the watch's namespace; ok=false when the watcher takes the scan path.
func (r *Resource) indexTerm(o WatchOptions, from, to string) (path string, k idxKey, ok bool) {
	scope := r.namespaceScope(from, to)
	rank := func(p string) int {
		switch {
		case p == "metadata.name":
			return 0
		case p == "metadata.namespace":
			return 2
		}
		for _, f := range r.spec.Fields {
			if f == p {
				return 1
			}
		}
		return -1
	}
	best := -1
	for _, t := range o.Index {
		if n := rank(t.Path); n >= 0 && (best < 0 || n < best) {
			best, path, k = n, t.Path, idxKey{scope: scope, value: t.Value}
		}
	}
	if best >= 0 {
		return path, k, true
	}
	if scope != "" {
		return "", idxKey{scope: scope}, true
	}
	return "", idxKey{}, false
}

// namespaceScope returns from when [from, to) is the key range of one
// namespace of the resource (prefix+ns+"/"), else "".
func (r *Resource) namespaceScope(from, to string) string {
	if !r.spec.Namespaced || !strings.HasPrefix(from, r.spec.Prefix) || to != prefixEnd(from) {
		return ""
	}
	ns := from[len(r.spec.Prefix):]
	if len(ns) < 2 || strings.IndexByte(ns, '/') != len(ns)-1 {
		return ""
	}
	return from
}

// addLocked puts a new watcher on the scan path or in the index.
func (r *Resource) addLocked(w *Watcher) {
	r.watchers[w] = struct{}{}
	r.nwatch.Store(int64(len(r.watchers)))
	path, k, ok := r.indexTerm(w.o, w.from, w.to)
	if !ok {
		r.scan[w] = struct{}{}
		return
	}
	w.indexed, w.idxPath, w.idxKey = true, path, k
	w.wake = make(chan struct{}, 1)
	m := r.index[path]
	if m == nil {
		m = make(map[idxKey][]*Watcher)
		r.index[path] = m
	}
	w.slot = len(m[k])
	m[k] = append(m[k], w)
	r.nindex.Add(1)
	if w.cursor.Load() < w.live {
		r.busy[w] = struct{}{} // replays the history first
	}
}

// IndexedWatchers returns how many of the resource's watchers are
// indexed (the others read every change; metric
// lazyapi_cache_watchers_indexed).
func (r *Resource) IndexedWatchers() int { return int(r.nindex.Load()) }

// removeLocked forgets w (any number of times).
func (r *Resource) removeLocked(w *Watcher) {
	delete(r.watchers, w)
	delete(r.scan, w)
	delete(r.busy, w)
	r.nwatch.Store(int64(len(r.watchers)))
	if !w.indexed || w.slot < 0 {
		return
	}
	m := r.index[w.idxPath]
	b := m[w.idxKey]
	last := len(b) - 1
	b[w.slot] = b[last]
	b[w.slot].slot = w.slot
	b[last] = nil
	if last == 0 {
		delete(m, w.idxKey)
		if len(m) == 0 {
			delete(r.index, w.idxPath)
		}
	} else {
		m[w.idxKey] = b[:last]
	}
	w.slot = -1
	w.pending = nil
	r.nindex.Add(-1)
	r.bmu.Lock()
	delete(r.bookmarkWaiters, w)
	r.bmu.Unlock()
}

// dispatchLocked queues the change ev, with sequence seq, for the indexed
// watchers it can match.
func (r *Resource) dispatchLocked(ev *event, seq uint64) {
	if len(r.index) == 0 {
		return
	}
	e := ev.cur
	if e == nil {
		e = ev.prev
	}
	var scope string
	if r.spec.Namespaced && e.nameOff > e.nsOff {
		scope = e.key()[:e.nameOff]
	}
	fields := r.spec.Fields
	value := func(e *entry, path string) string {
		if e == nil || path == "" {
			return ""
		}
		v, _ := Attrs{e: e, fields: fields}.Field(path)
		return v
	}
	for path, m := range r.index {
		if !keyPath(path) && (ev.cur != nil && !ev.cur.valid || ev.prev != nil && !ev.prev.valid) {
			// Attributes not derived (a value the cache cannot peek): the
			// filter reads the value itself (the proxy peeks it), so every
			// watcher of the path in the change's scope may match.
			for k, ws := range m {
				if k.scope == "" || k.scope == scope {
					r.queueLocked(ws, seq)
				}
			}
			continue
		}
		var cur string
		if ev.cur != nil {
			cur = value(ev.cur, path)
			r.wakeBucketLocked(m, path, idxKey{scope, cur}, seq)
		}
		if ev.prev != nil {
			if prev := value(ev.prev, path); ev.cur == nil || prev != cur {
				r.wakeBucketLocked(m, path, idxKey{scope, prev}, seq)
			}
		}
	}
}

// keyPath reports whether path's value comes from the key (namespace,
// name; "" for watchers of a namespace), known for every entry.
func keyPath(path string) bool {
	return path == "" || path == "metadata.name" || path == "metadata.namespace"
}

// wakeBucketLocked queues seq for the watchers of k in m and, unless path
// is "" (watchers of a namespace: scoped), for those of k's value
// cluster-wide.
func (r *Resource) wakeBucketLocked(m map[idxKey][]*Watcher, path string, k idxKey, seq uint64) {
	r.queueLocked(m[k], seq)
	if path != "" && k.scope != "" {
		r.queueLocked(m[idxKey{value: k.value}], seq)
	}
}

func (r *Resource) queueLocked(ws []*Watcher, seq uint64) {
	for _, w := range ws {
		w.pending = append(w.pending, seq)
		r.busy[w] = struct{}{}
		w.signal()
	}
}

// wakeBookmarkWaitersLocked wakes the idle indexed watchers whose
// bookmark is due, after the revision advanced. r.mu must be held for
// writing.
func (r *Resource) wakeBookmarkWaitersLocked() {
	r.bmu.Lock()
	defer r.bmu.Unlock()
	for w := range r.bookmarkWaiters {
		w.signal()
	}
	clear(r.bookmarkWaiters)
}

// signal wakes an indexed watcher's Next.
func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// pendingLocked returns the sequence of the next event the watcher has to
// read (ok=false when it has taken every event of the history that can
// concern it). r.mu must be held.
func (w *Watcher) pendingLocked(head uint64) (seq uint64, ok bool) {
	c := w.cursor.Load()
	if !w.indexed {
		return c, c < head
	}
	if c < w.live {
		return c, true
	}
	if w.pi < len(w.pending) {
		return w.pending[w.pi], true
	}
	return 0, false
}

// popLocked takes the next sequence to read of an indexed watcher. Only
// the Next goroutine calls it, holding r.mu for reading: apply and the
// sweep, the other users of the queue, hold it for writing.
func (w *Watcher) popLocked() (seq uint64, ok bool) {
	if c := w.cursor.Load(); c < w.live {
		w.cursor.Store(c + 1)
		return c, true
	}
	if w.pi >= len(w.pending) {
		return 0, false
	}
	seq = w.pending[w.pi]
	w.pi++
	if w.pi == len(w.pending) {
		w.pi = 0
		if cap(w.pending) > 64 {
			w.pending = nil // a burst's queue is not kept by an idle watch
		} else {
			w.pending = w.pending[:0]
		}
	}
	return seq, true
}
