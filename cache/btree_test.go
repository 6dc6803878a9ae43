package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

func testEntry(key string, rev int64) *entry {
	e, data := newEntryBlock(len(key), 0, 0)
	copy(data, key)
	e.rev = rev
	return e
}

func treeKeys(root *node, from, to string) []string {
	var out []string
	for e := range ascend(root, from, to) {
		out = append(out, e.key())
	}
	return out
}

// checkTree verifies the B+tree invariants of the subtree at n and returns
// its size.
func checkTree(t *testing.T, n *node, lo, hi string) int {
	t.Helper()
	if n.leaf() {
		for i, e := range n.items {
			if i > 0 && n.items[i-1].key() >= e.key() {
				t.Fatalf("leaf not sorted at %d: %q >= %q", i, n.items[i-1].key(), e.key())
			}
			if e.key() < lo || (hi != "" && e.key() >= hi) {
				t.Fatalf("key %q outside [%q, %q)", e.key(), lo, hi)
			}
		}
		if n.size != len(n.items) {
			t.Fatalf("leaf size %d, has %d items", n.size, len(n.items))
		}
		return n.size
	}
	if len(n.seps) != len(n.children)-1 {
		t.Fatalf("%d seps for %d children", len(n.seps), len(n.children))
	}
	sum := 0
	for i, c := range n.children {
		clo, chi := lo, hi
		if i > 0 {
			clo = n.seps[i-1]
		}
		if i < len(n.seps) {
			chi = n.seps[i]
		}
		sum += checkTree(t, c, clo, chi)
	}
	if sum != n.size {
		t.Fatalf("internal size %d, children hold %d", n.size, sum)
	}
	return sum
}

func TestTreeRandomOpsAndSnapshots(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tr := newTree()
	model := map[string]int64{}
	type snap struct {
		root *node
		keys []string
		revs map[string]int64
	}
	var snaps []snap
	for i := range 20000 {
		k := fmt.Sprintf("/registry/configmaps/ns%d/cm-%04d", rng.IntN(5), rng.IntN(2000))
		if rng.IntN(3) == 0 {
			old := tr.delete(k)
			_, had := model[k]
			if (old != nil) != had {
				t.Fatalf("delete(%q) = %v, model has it: %v", k, old, had)
			}
			delete(model, k)
		} else {
			old := tr.put(testEntry(k, int64(i)))
			if _, had := model[k]; (old != nil) != had {
				t.Fatalf("put(%q) replaced %v, model has it: %v", k, old, had)
			}
			model[k] = int64(i)
		}
		if i%997 == 0 {
			root := tr.snapshot()
			keys := make([]string, 0, len(model))
			revs := make(map[string]int64, len(model))
			for k, v := range model {
				keys = append(keys, k)
				revs[k] = v
			}
			slices.Sort(keys)
			snaps = append(snaps, snap{root, keys, revs})
		}
	}
	if tr.n != len(model) {
		t.Fatalf("tree holds %d, model %d", tr.n, len(model))
	}
	root := tr.snapshot()
	checkTree(t, root, "", "")
	keys := make([]string, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	snaps = append(snaps, snap{root, keys, model})
	for si, s := range snaps {
		got := treeKeys(s.root, "", "")
		if !slices.Equal(got, s.keys) {
			t.Fatalf("snapshot %d: %d keys, want %d", si, len(got), len(s.keys))
		}
		for _, k := range s.keys {
			if e := get(s.root, k); e == nil || e.rev != s.revs[k] {
				t.Fatalf("snapshot %d: get(%q) = %v, want rev %d", si, k, e, s.revs[k])
			}
		}
		// Ranges and counts against the sorted model.
		for range 50 {
			from := fmt.Sprintf("/registry/configmaps/ns%d/cm-%04d", rng.IntN(6), rng.IntN(2100))
			to := fmt.Sprintf("/registry/configmaps/ns%d/", rng.IntN(6))
			if rng.IntN(4) == 0 {
				to = ""
			}
			var want []string
			for _, k := range s.keys {
				if k >= from && (to == "" || k < to) {
					want = append(want, k)
				}
			}
			if got := treeKeys(s.root, from, to); !slices.Equal(got, want) {
				t.Fatalf("snapshot %d: ascend(%q, %q) = %d keys, want %d", si, from, to, len(got), len(want))
			}
			if got := count(s.root, from, to); got != len(want) {
				t.Fatalf("snapshot %d: count(%q, %q) = %d, want %d", si, from, to, got, len(want))
			}
		}
	}
	// Delete everything: the tree empties cleanly.
	for _, k := range keys {
		if tr.delete(k) == nil {
			t.Fatalf("delete(%q) found nothing", k)
		}
	}
	if tr.root != nil || tr.n != 0 {
		t.Fatalf("tree not empty after deleting all: n=%d", tr.n)
	}
}

func TestTreeSequentialFillIsDense(t *testing.T) {
	tr := newTree()
	const n = 100000
	for i := range n {
		tr.put(testEntry(fmt.Sprintf("k%07d", i), int64(i)))
	}
	root := tr.snapshot()
	if got := checkTree(t, root, "", ""); got != n {
		t.Fatalf("tree holds %d, want %d", got, n)
	}
	leaves := 0
	var walk func(*node)
	walk = func(x *node) {
		if x.leaf() {
			leaves++
			return
		}
		for _, c := range x.children {
			walk(c)
		}
	}
	walk(root)
	if min := (n + maxLeaf - 1) / maxLeaf; leaves > min+1 {
		t.Fatalf("%d leaves for %d sequential keys, want about %d", leaves, n, min)
	}
	if got := count(root, "k0050000", ""); got != n/2 {
		t.Fatalf("count from the middle = %d, want %d", got, n/2)
	}
}

func TestMallocSize(t *testing.T) {
	for _, tt := range []struct{ n, want int }{{0, 0}, {1, 8}, {8, 8}, {9, 16}, {10280, 10880}, {32768, 32768}, {32769, 40960}} {
		if got := mallocSize(tt.n); got != tt.want {
			t.Errorf("mallocSize(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// The adapters satisfy apimachinery's interfaces, so the proxy's parsed
// selectors match cache items directly.
var (
	_ labels.Labels = LabelSet{}
	_ fields.Fields = FieldSet{}
)
