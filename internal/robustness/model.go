package robustness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// version is one state of a key in etcd's history: what a put wrote at
// Rev, or its deletion.
type version struct {
	Rev     int64             `json:"rev"`
	Deleted bool              `json:"deleted,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Write   string            `json:"write,omitempty"` // the writer's annotation: which write this is
	Size    int               `json:"size,omitempty"`
}

// change is one revision of etcd's history under the prefix: the key it
// touched and the version before it (nil: the key did not exist).
type change struct {
	Rev  int64
	Key  string
	Prev *version
	Cur  *version
}

// model is etcd's history under the prefix as the recorder saw it: every
// version of every key, in revision order. It answers "what was the state
// at revision N". It is safe for concurrent use.
type model struct {
	mu       sync.Mutex
	cond     *sync.Cond
	rev      int64                 // the recorder has seen every change up to rev
	versions map[string][]*version // key -> versions in revision order
	changes  []change              // in revision order
	bad      error                 // the recorder failed: the history is incomplete
}

func newModel() *model {
	m := &model{versions: map[string][]*version{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

// apply records a put (val != nil) or a delete of key at rev.
func (m *model) apply(key string, rev int64, val []byte, deleted bool) {
	v := &version{Rev: rev, Deleted: deleted}
	if !deleted {
		v.Size = len(val)
		v.Labels, v.Write = storedMeta(val)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.versions[key]
	var prev *version
	if n := len(vs); n > 0 && !vs[n-1].Deleted {
		prev = vs[n-1]
	}
	m.versions[key] = append(vs, v)
	m.changes = append(m.changes, change{Rev: rev, Key: key, Prev: prev, Cur: v})
}

// progress marks every change up to rev seen.
func (m *model) progress(rev int64) {
	m.mu.Lock()
	if rev > m.rev {
		m.rev = rev
	}
	m.mu.Unlock()
	m.cond.Broadcast()
}

func (m *model) fail(err error) {
	m.mu.Lock()
	if m.bad == nil {
		m.bad = err
	}
	m.mu.Unlock()
	m.cond.Broadcast()
}

// seen returns the revision the model is complete up to.
func (m *model) seen() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// waitFor waits until the model is complete up to rev or stop is closed;
// false when it is not.
func (m *model) waitFor(rev int64, stop <-chan struct{}) bool {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-stop:
			m.cond.Broadcast()
		case <-done:
		}
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.rev < rev && m.bad == nil {
		select {
		case <-stop:
			return false
		default:
		}
		m.cond.Wait()
	}
	return m.rev >= rev
}

// at returns the version of key live at rev (nil: absent).
func (m *model) at(key string, rev int64) *version {
	m.mu.Lock()
	defer m.mu.Unlock()
	return atLocked(m.versions[key], rev)
}

func atLocked(vs []*version, rev int64) *version {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].Rev > rev })
	if i == 0 || vs[i-1].Deleted {
		return nil
	}
	return vs[i-1]
}

// versionOf returns key's version written at rev, and the revision at
// which the next version replaced it (0: none yet).
func (m *model) versionOf(key string, rev int64) (v *version, until int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.versions[key]
	i := sort.Search(len(vs), func(i int) bool { return vs[i].Rev >= rev })
	if i == len(vs) || vs[i].Rev != rev || vs[i].Deleted {
		return nil, 0
	}
	if i+1 < len(vs) {
		until = vs[i+1].Rev
	}
	return vs[i], until
}

// scope is what a read covers: the keys under prefix (a resource, or one
// namespace of it) whose labels match sel.
type scope struct {
	prefix string // ".../configmaps/" or ".../configmaps/ns/"
	sel    labels.Selector
	name   string // a single object's key (GET); empty for collections
}

func (s scope) covers(key string) bool {
	if s.name != "" {
		return key == s.name
	}
	return strings.HasPrefix(key, s.prefix)
}

func (s scope) matches(v *version) bool {
	return v != nil && !v.Deleted && (s.sel == nil || s.sel.Matches(labels.Set(v.Labels)))
}

// state returns the keys in scope live at rev, in key order.
func (m *model) state(s scope, rev int64) []item {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []item
	for key, vs := range m.versions {
		if !s.covers(key) {
			continue
		}
		if v := atLocked(vs, rev); s.matches(v) {
			out = append(out, item{Key: key, RV: v.Rev, Write: v.Write})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// events returns the watch events a watcher of s must see for the changes
// in (from, to], as kube-apiserver's cacher reports them: ADDED when an
// object enters the selection, MODIFIED while it stays, DELETED (with its
// previous labels) when it leaves it or is deleted.
func (m *model) events(s scope, from, to int64) []event {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := sort.Search(len(m.changes), func(i int) bool { return m.changes[i].Rev > from })
	var out []event
	for ; i < len(m.changes) && m.changes[i].Rev <= to; i++ {
		c := m.changes[i]
		if !s.covers(c.Key) {
			continue
		}
		was, is := s.matches(c.Prev), s.matches(c.Cur)
		switch {
		case !was && is:
			out = append(out, event{Type: "ADDED", Key: c.Key, RV: c.Rev, Write: c.Cur.Write})
		case was && is:
			out = append(out, event{Type: "MODIFIED", Key: c.Key, RV: c.Rev, Write: c.Cur.Write})
		case was && !is:
			out = append(out, event{Type: "DELETED", Key: c.Key, RV: c.Rev, Write: c.Prev.Write})
		}
	}
	return out
}

// slice returns the history of the keys in keys around rev (at most n
// changes each side), for a report.
func (m *model) slice(keys map[string]bool, from, to int64) []change {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []change
	for _, c := range m.changes {
		if c.Rev >= from && c.Rev <= to && (len(keys) == 0 || keys[c.Key]) {
			out = append(out, c)
		}
	}
	return out
}

// storedMeta returns the labels and the write annotation of a value as
// kube-apiserver stored it: "k8s\x00" + runtime.Unknown around the
// object's protobuf (metadata is field 1 of every built-in type, read as
// a PartialObjectMetadata), or JSON. The oracle side: apimachinery's
// generated code, not lazyapi's codec.
func storedMeta(val []byte) (map[string]string, string) {
	var om metav1.ObjectMeta
	if raw, ok := bytes.CutPrefix(val, []byte("k8s\x00")); ok {
		var u runtime.Unknown
		var p metav1.PartialObjectMetadata
		if u.Unmarshal(raw) != nil || p.Unmarshal(u.Raw) != nil {
			return nil, "undecodable"
		}
		om = p.ObjectMeta
	} else {
		var o struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if json.Unmarshal(val, &o) != nil {
			return nil, "undecodable"
		}
		om = o.Metadata
	}
	return om.Labels, om.Annotations[writeAnnotation]
}

// writeAnnotation names the write that produced an object: "w<writer>.<n>".
const writeAnnotation = "robustness.lazyapi.io/write"

func (c change) String() string {
	f := func(v *version) string {
		if v == nil || v.Deleted {
			return "absent"
		}
		return fmt.Sprintf("rv %d %s labels %v", v.Rev, v.Write, v.Labels)
	}
	return fmt.Sprintf("rev %d %s: %s -> %s", c.Rev, c.Key, f(c.Prev), f(c.Cur))
}

// absentSince reports whether key was absent at some revision from rev
// on, up to until (0: any).
func (m *model) absentSince(key string, rev, until int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.versions[key]
	if atLocked(vs, rev) == nil {
		return true
	}
	for _, v := range vs {
		if v.Rev > rev && v.Deleted && (until == 0 || v.Rev <= until) {
			return true
		}
	}
	return false
}
