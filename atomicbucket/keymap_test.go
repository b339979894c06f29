package atomicbucket

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"
)

// keyOps drives a keyMap and a plain map side by side with random makes,
// replacements, removals and lookups, and checks that they agree after every
// step and that every node keeps its key and anchor.
func keyOps[K comparable](t *testing.T, m *keyMap[K], keys []K, steps int, rng *rand.Rand) {
	t.Helper()
	model := map[K]*slot{}
	for i := range steps {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(4); op {
		case 0, 1: // make (or find), or replace, with numbers or without
			a := rng.Int64()
			var nums *numbers
			if rng.IntN(2) == 0 {
				nums = &numbers{since: a}
			}
			m.compute(k, func(cur *slot, found bool) (*slot, bool) {
				if found != (model[k] != nil) || cur != model[k] {
					t.Fatalf("step %d: compute(%v) found %p, want %p", i, k, cur, model[k])
				}
				if found && op == 0 {
					return cur, false
				}
				n := m.newNode(k, a, nums)
				n.tat.Store(int64(i))
				if m.numsOf(n) != nums || m.hasNums(n) != (nums != nil) || m.keyOf(n) != k {
					t.Fatalf("step %d: node of %v holds numbers %p (has: %v) and key %v, want %p", i, k, m.numsOf(n), m.hasNums(n), m.keyOf(n), nums)
				}
				if m.anchored && m.anchorOf(n) != a || !m.anchored && m.anchorOf(n) != m.fixed {
					t.Fatalf("step %d: node of %v has anchor %d", i, k, m.anchorOf(n))
				}
				model[k] = n
				return n, false
			})
		case 2:
			m.compute(k, func(cur *slot, found bool) (*slot, bool) {
				delete(model, k)
				return nil, true
			})
		case 3:
			if got := m.load(k); got != model[k] {
				t.Fatalf("step %d: load(%v) = %p, want %p", i, k, got, model[k])
			}
		}
	}
	for _, k := range keys {
		s := m.load(k)
		if s != model[k] {
			t.Fatalf("load(%v) = %p, want %p", k, s, model[k])
		}
		if s != nil && m.keyOf(s) != k {
			t.Fatalf("node of %v holds key %v", k, m.keyOf(s))
		}
	}
	seen := 0
	m.rangeNodes(func(k K, s *slot) bool {
		if model[k] != s {
			t.Fatalf("range gave %v → %p, want %p", k, s, model[k])
		}
		seen++
		return true
	})
	live := 0
	for i := range m.shards {
		live += m.shards[i].live
	}
	if seen != len(model) || live != len(model) {
		t.Fatalf("range saw %d nodes, shards count %d, model holds %d", seen, live, len(model))
	}
}

func TestKeyMapMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// String keys of every length class: empty, short, a one-byte length's
	// last (127) and a two-byte length's first (128), past the cached node
	// types (300).
	var strs []string
	for _, n := range []int{0, 1, 7, 8, 13, 127, 128, 300} {
		for i := range 40 {
			strs = append(strs, fmt.Sprintf("%0*d", n, i)[:n])
		}
	}
	strs = dedupe(strs)
	for _, anchored := range []bool{false, true} {
		t.Run(fmt.Sprintf("string/anchored=%v", anchored), func(t *testing.T) {
			keyOps(t, newKeyMap[string](anchored, -5, 0), strs, 30000, rng)
		})
	}
	ints := make([]int64, 2000)
	for i := range ints {
		ints[i] = rng.Int64()
	}
	t.Run("int64", func(t *testing.T) { keyOps(t, newKeyMap[int64](true, 0, 0), ints, 60000, rng) })
	small := make([]uint16, 3000) // every value of a small integer type, by its own hash width
	for i := range small {
		small[i] = uint16(i * 21)
	}
	t.Run("uint16", func(t *testing.T) { keyOps(t, newKeyMap[uint16](false, 0, 0), small, 30000, rng) })
	type userID string // a named string type is stored as a string
	named := make([]userID, len(strs))
	for i, k := range strs {
		named[i] = userID(k)
	}
	t.Run("named string", func(t *testing.T) {
		m := newKeyMap[userID](false, 0, 0)
		if !m.str {
			t.Fatal("a named string type is not stored as a string")
		}
		keyOps(t, m, named, 20000, rng)
	})
	type pair struct {
		a string
		b uint32
	}
	pairs := make([]pair, 500)
	for i := range pairs {
		pairs[i] = pair{fmt.Sprint(i % 50), uint32(i / 50)}
	}
	t.Run("struct", func(t *testing.T) { keyOps(t, newKeyMap[pair](false, 7, 100), pairs, 30000, rng) })
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range s {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// Nodes hold their key and anchor, and a string key's node has the key's bytes
// inside it (the map keeps no caller's buffer).
func TestKeyMapNodes(t *testing.T) {
	m := newKeyMap[string](true, 0, 0)
	buf := []byte("user-00000042")
	key := unsafe.String(&buf[0], len(buf))
	s := m.newNode(key, -123, nil)
	buf[5] = 'X' // the caller reuses its buffer
	if got := m.keyOf(s); got != "user-00000042" || m.anchorOf(s) != -123 {
		t.Fatalf("node holds %q, anchor %d", got, m.anchorOf(s))
	}
	if m2 := newKeyMap[string](false, 99, 0); m2.anchorOf(m2.newNode("a", -1, nil)) != 99 {
		t.Fatal("an unanchored node's anchor is not the map's fixed one")
	}
}

// A shard rehashes at 7/8 and drops removed nodes' slots when it does: a map
// whose keys come and go does not grow without end.
func TestKeyMapChurnStaysSmall(t *testing.T) {
	m := newKeyMap[int64](false, 0, 0)
	for i := range int64(200_000) {
		m.compute(i, func(*slot, bool) (*slot, bool) { return m.newNode(i, 0, nil), false })
		if i >= 100 {
			m.compute(i-100, func(*slot, bool) (*slot, bool) { return nil, true })
		}
	}
	groups, live := 0, 0
	for i := range m.shards {
		if tp := m.shards[i].tab.Load(); tp != nil {
			groups += len(*tp)
		}
		live += m.shards[i].live
	}
	if live != 100 || groups > 3*mapShards { // 100 keys: a shard holding k has groupsFor(k+1), at most 3 for the k a seed can give it
		t.Fatalf("after churn through 200000 keys holding 100: %d live, %d groups", live, groups)
	}
}

// Lookups race makes, replacements and removals on other goroutines: a key
// that is held throughout is always found, and what a lookup finds is a node
// of its key.
func TestKeyMapConcurrent(t *testing.T) {
	m := newKeyMap[string](false, 0, 0)
	const stable = 500
	for i := range stable {
		k := fmt.Sprint("s", i)
		m.compute(k, func(*slot, bool) (*slot, bool) { return m.newNode(k, 0, nil), false })
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Add(1)
		go func() { // churn: makes, replaces and removes other keys, growing the shards
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprint("c", rng.IntN(20000))
				remove := rng.IntN(3) == 0
				m.compute(k, func(cur *slot, found bool) (*slot, bool) {
					if remove {
						return nil, true
					}
					return m.newNode(k, 0, nil), false
				})
				if i%64 == 0 { // replace a stable key's node: lookups may see either
					s := fmt.Sprint("s", rng.IntN(stable))
					m.compute(s, func(*slot, bool) (*slot, bool) { return m.newNode(s, 0, nil), false })
				}
			}
		}()
	}
	for i := range 100_000 {
		k := fmt.Sprint("s", i%stable)
		s := m.load(k)
		if s == nil || m.keyOf(s) != k {
			close(stop)
			wg.Wait()
			t.Fatalf("lookup %d of held key %s found %p", i, k, s)
		}
		if c := fmt.Sprint("c", i%20000); true {
			if s := m.load(c); s != nil && m.keyOf(s) != c {
				close(stop)
				wg.Wait()
				t.Fatalf("lookup of %s found the node of %s", c, m.keyOf(s))
			}
		}
	}
	close(stop)
	wg.Wait()
}

// Keys that differ only where a weak hash would ignore them (integers in
// their high bits, strings in their last byte) spread over the shards as
// random keys do: no shard holds more than twice its share.
func TestKeyMapSpreadsPatternedKeys(t *testing.T) {
	const n = 1 << 14
	check := func(name string, live func(i int) int) {
		t.Helper()
		most := 0
		for i := range mapShards {
			most = max(most, live(i))
		}
		if most > 2*n/mapShards {
			t.Errorf("%s: a shard holds %d of %d keys (share %d)", name, most, n, n/mapShards)
		}
	}
	ints := newKeyMap[uint64](false, 0, 0)
	for i := range uint64(n) {
		k := i << 40
		ints.compute(k, func(*slot, bool) (*slot, bool) { return ints.newNode(k, 0, nil), false })
	}
	check("uint64 keys i<<40", func(i int) int { return ints.shards[i].live })
	strs := newKeyMap[string](false, 0, 0)
	for i := range n {
		k := fmt.Sprintf("tenant-0000000000-user-%c%c", 'a'+i%26, 'a'+i/26%26) + fmt.Sprint(i/676)
		strs.compute(k, func(*slot, bool) (*slot, bool) { return strs.newNode(k, 0, nil), false })
	}
	check("string keys sharing a long prefix", func(i int) int { return strs.shards[i].live })
}
