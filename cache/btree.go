package cache

import (
	"iter"
	"sort"
	"sync/atomic"
)

// tree is a persistent (copy-on-write) B+tree of *entry ordered by key.
//
// Every node carries the generation that created it. A tree mutates in place
// only the nodes of its own generation and copies the others (path copying).
// snapshot() hands out the current root and moves the tree to a fresh
// generation, so the handed-out nodes are never written again: readers
// iterate a snapshot without a lock while the writer goes on.
//
// Internal nodes keep a copy of the first key of every child but the first
// (separators need not be present keys) and the size of each subtree, so
// that rank queries (remaining item counts) cost O(depth).
//
// A tree is not safe for concurrent use; a snapshot (a *node) is immutable.
type tree struct {
	root *node
	gen  uint64
	n    int
}

const (
	maxLeaf  = 64 // entries per leaf
	maxInner = 64 // children per internal node
	minLeaf  = maxLeaf / 4
	minInner = maxInner / 4
)

// node is a leaf (children == nil) or an internal node.
type node struct {
	gen      uint64
	size     int      // entries in this subtree
	items    []*entry // leaf only, sorted by key
	children []*node  // internal only
	seps     []string // internal only: seps[i] <= every key of children[i+1]; len(seps) == len(children)-1
}

var genCounter atomic.Uint64

func nextGen() uint64 { return genCounter.Add(1) }

func newTree() *tree { return &tree{gen: nextGen()} }

// treeFrom returns a tree that starts from the immutable snapshot root and
// copies every node it writes.
func treeFrom(root *node) *tree {
	t := &tree{root: root, gen: nextGen()}
	if root != nil {
		t.n = root.size
	}
	return t
}

func (n *node) leaf() bool { return n.children == nil }

// snapshot returns the current root; the tree never writes its nodes again.
func (t *tree) snapshot() *node {
	t.gen = nextGen()
	return t.root
}

func (t *tree) own(n *node) *node {
	if n.gen == t.gen {
		return n
	}
	c := &node{gen: t.gen, size: n.size}
	if n.leaf() {
		c.items = make([]*entry, len(n.items), cap(n.items))
		copy(c.items, n.items)
	} else {
		c.children = make([]*node, len(n.children), cap(n.children))
		copy(c.children, n.children)
		c.seps = make([]string, len(n.seps), cap(n.seps))
		copy(c.seps, n.seps)
	}
	return c
}

// childIndex returns the child of internal node n whose range holds key.
func (n *node) childIndex(key string) int {
	return sort.Search(len(n.seps), func(i int) bool { return n.seps[i] > key })
}

// leafIndex returns the first index of leaf n whose key is >= key.
func (n *node) leafIndex(key string) (int, bool) {
	i := sort.Search(len(n.items), func(i int) bool { return n.items[i].key() >= key })
	return i, i < len(n.items) && n.items[i].key() == key
}

func firstKey(n *node) string {
	for !n.leaf() {
		n = n.children[0]
	}
	return n.items[0].key()
}

// get returns the entry stored under key in the tree rooted at n.
func get(n *node, key string) *entry {
	if n == nil {
		return nil
	}
	for !n.leaf() {
		n = n.children[n.childIndex(key)]
	}
	if i, ok := n.leafIndex(key); ok {
		return n.items[i]
	}
	return nil
}

// put stores e under its key and returns the entry it replaced, if any.
func (t *tree) put(e *entry) *entry {
	if t.root == nil {
		t.root = &node{gen: t.gen, items: make([]*entry, 0, 4)}
	}
	root := t.own(t.root)
	t.root = root
	old, right, sep := t.insert(root, e)
	if right != nil {
		t.root = &node{
			gen:      t.gen,
			size:     root.size + right.size,
			children: []*node{root, right},
			seps:     []string{sep},
		}
	}
	if old == nil {
		t.n++
	}
	return old
}

// insert puts e into the owned node n. When n overflows it splits: right is
// the new right sibling and sep its first key.
func (t *tree) insert(n *node, e *entry) (old *entry, right *node, sep string) {
	key := e.key()
	if n.leaf() {
		i, found := n.leafIndex(key)
		if found {
			old = n.items[i]
			n.items[i] = e
			return old, nil, ""
		}
		n.items = append(n.items, nil)
		copy(n.items[i+1:], n.items[i:])
		n.items[i] = e
		n.size++
		if len(n.items) <= maxLeaf {
			return nil, nil, ""
		}
		mid := len(n.items) / 2
		if i == len(n.items)-1 {
			// Appending in key order (a fill): keep the left leaf full.
			mid = len(n.items) - 1
		}
		r := &node{gen: t.gen, items: make([]*entry, len(n.items)-mid, maxLeaf+1)}
		copy(r.items, n.items[mid:])
		clear(n.items[mid:])
		n.items = n.items[:mid]
		r.size, n.size = len(r.items), mid
		return nil, r, r.items[0].key()
	}
	i := n.childIndex(key)
	c := t.own(n.children[i])
	n.children[i] = c
	old, cr, csep := t.insert(c, e)
	if old == nil {
		n.size++
	}
	if cr == nil {
		return old, nil, ""
	}
	n.children = append(n.children, nil)
	copy(n.children[i+2:], n.children[i+1:])
	n.children[i+1] = cr
	n.seps = append(n.seps, "")
	copy(n.seps[i+1:], n.seps[i:])
	n.seps[i] = csep
	if len(n.children) <= maxInner {
		return old, nil, ""
	}
	mid := len(n.children) / 2
	if i+1 == len(n.children)-1 {
		mid = len(n.children) - 1 // appending in key order
	}
	r := &node{gen: t.gen,
		children: make([]*node, len(n.children)-mid, maxInner+1),
		seps:     make([]string, len(n.seps)-mid, maxInner),
	}
	copy(r.children, n.children[mid:])
	copy(r.seps, n.seps[mid:])
	sep = n.seps[mid-1]
	clear(n.children[mid:])
	n.children = n.children[:mid]
	n.seps = n.seps[:mid-1]
	n.size = 0
	for _, c := range n.children {
		n.size += c.size
	}
	for _, c := range r.children {
		r.size += c.size
	}
	return old, r, sep
}

// delete removes key and returns the removed entry, or nil.
func (t *tree) delete(key string) *entry {
	if t.root == nil || get(t.root, key) == nil {
		return nil
	}
	root := t.own(t.root)
	old := t.remove(root, key)
	t.n--
	switch {
	case root.size == 0:
		t.root = nil
	case !root.leaf() && len(root.children) == 1:
		t.root = root.children[0]
	default:
		t.root = root
	}
	return old
}

// remove deletes key (known to be present) from the owned node n and
// rebalances an underfull child by merging it with a sibling.
func (t *tree) remove(n *node, key string) *entry {
	n.size--
	if n.leaf() {
		i, _ := n.leafIndex(key)
		old := n.items[i]
		copy(n.items[i:], n.items[i+1:])
		n.items[len(n.items)-1] = nil
		n.items = n.items[:len(n.items)-1]
		return old
	}
	i := n.childIndex(key)
	c := t.own(n.children[i])
	n.children[i] = c
	old := t.remove(c, key)
	switch {
	case c.size == 0:
		t.dropChild(n, i)
	case c.leaf() && len(c.items) < minLeaf, !c.leaf() && len(c.children) < minInner:
		t.mergeChild(n, i)
	}
	return old
}

func (t *tree) dropChild(n *node, i int) {
	copy(n.children[i:], n.children[i+1:])
	n.children[len(n.children)-1] = nil
	n.children = n.children[:len(n.children)-1]
	if len(n.seps) == 0 {
		return
	}
	j := i - 1 // the separator in front of child i goes; the first child has none
	if j < 0 {
		j = 0
	}
	copy(n.seps[j:], n.seps[j+1:])
	n.seps = n.seps[:len(n.seps)-1]
}

// mergeChild merges child i with a neighbour when both fit in one node.
func (t *tree) mergeChild(n *node, i int) {
	if len(n.children) < 2 {
		return
	}
	l := i
	if l == len(n.children)-1 {
		l--
	}
	a, b := n.children[l], n.children[l+1]
	if a.leaf() {
		if len(a.items)+len(b.items) > maxLeaf {
			return
		}
		a = t.own(a)
		a.items = append(a.items, b.items...)
	} else {
		if len(a.children)+len(b.children) > maxInner {
			return
		}
		a = t.own(a)
		a.seps = append(a.seps, n.seps[l])
		a.seps = append(a.seps, b.seps...)
		a.children = append(a.children, b.children...)
	}
	a.size += b.size
	n.children[l] = a
	t.dropChild(n, l+1)
}

// ascend yields the entries of the tree rooted at n with from <= key < to
// (to == "" means no upper bound), in key order.
func ascend(n *node, from, to string) iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		if n != nil {
			ascendNode(n, from, to, yield)
		}
	}
}

func ascendNode(n *node, from, to string, yield func(*entry) bool) bool {
	if n.leaf() {
		i, _ := n.leafIndex(from)
		for _, e := range n.items[i:] {
			if to != "" && e.key() >= to {
				return false
			}
			if !yield(e) {
				return false
			}
		}
		return true
	}
	for i := n.childIndex(from); i < len(n.children); i++ {
		if i > 0 && to != "" && n.seps[i-1] >= to {
			return false
		}
		if !ascendNode(n.children[i], from, to, yield) {
			return false
		}
	}
	return true
}

// rank returns the number of keys < key in the tree rooted at n.
func rank(n *node, key string) int {
	r := 0
	for n != nil && !n.leaf() {
		i := n.childIndex(key)
		for _, c := range n.children[:i] {
			r += c.size
		}
		n = n.children[i]
	}
	if n != nil {
		i, _ := n.leafIndex(key)
		r += i
	}
	return r
}

// count returns the number of keys in [from, to) (to == "": no bound).
func count(n *node, from, to string) int {
	if n == nil {
		return 0
	}
	hi := n.size
	if to != "" {
		hi = rank(n, to)
	}
	if c := hi - rank(n, from); c > 0 {
		return c
	}
	return 0
}
