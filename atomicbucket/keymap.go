package atomicbucket

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"
)

// keyMap is a table's map from keys to buckets. A bucket and its key live in
// one allocation, a node: the slot first, then, for a rule whose interval grid
// is placed by the key, the grid's anchor, then the key (a string key's bytes,
// preceded by their length as a uvarint; any other key as a value of its
// type). The map itself is open addressing over groups of seven node pointers
// that share a 64-byte line with their control word, in shards that each grow
// on their own.
//
// Lookups take no lock and never allocate: they read a shard's group array, a
// group's control word and a node. Changes (a key made, replaced, removed) are
// made under the shard's lock, which only they take. A lookup racing a change
// may miss a key just made, or find a node just replaced or removed; the
// tables call compute under the lock when they miss, and every node is killed
// (its word set dead) before it is replaced or removed, so a check that finds
// it retries. That is why the map holds pointers to nodes and never moves one.
//
// Per key, in a map that has grown to hold it: the node (a 13-byte string key
// and a greedy rule: 16 + 1 + 13 bytes, a 32-byte allocation) and 64/7 bytes
// a pointer at a load between 7/16 and 7/8.
type keyMap[K comparable] struct {
	shards   [mapShards]mapShard
	seed     maphash.Seed
	str      bool    // K is string: nodes hold the key's bytes
	anchored bool    // nodes hold a grid anchor after the slot
	fixed    int64   // every node's anchor when they hold none
	keyOff   uintptr // the key's offset in a node
	typ      reflect.Type
}

const (
	mapShards  = 64 // a power of two
	shardShift = 64 - 6
	groupSlots = 7
	ctrlEmpty  = 0 // a control byte of a slot never used since the array was made
	ctrlGone   = 1 // one whose node was removed; byte 7 of every control word is this
	ctrlLow    = 0x0101010101010101
	ctrlHigh   = 0x0080808080808080 // high bits of bytes 0..6
)

// group is seven node pointers and their control bytes (byte i of ctrl is slot
// i's: empty, gone, or the tag of its key's hash), 64 bytes.
type group struct {
	ctrl atomic.Uint64
	p    [groupSlots]atomic.Pointer[slot]
}

type mapShard struct {
	mu   sync.Mutex
	tab  atomic.Pointer[[]group]
	live int // nodes held; under mu
	used int // slots not empty (held or gone); under mu
	_    [64 - 32]byte
}

// newKeyMap returns an empty map whose nodes carry their anchor when anchored
// is set, and otherwise all have the anchor fixed; presize is the number of
// keys to size it for.
func newKeyMap[K comparable](anchored bool, fixed int64, presize int) *keyMap[K] {
	m := &keyMap[K]{seed: maphash.MakeSeed(), anchored: anchored, fixed: fixed}
	var zero K
	_, m.str = any(zero).(string)
	m.keyOff = slotSize
	if anchored {
		m.keyOff += 8
	}
	if !m.str {
		fields := []reflect.StructField{{Name: "S", Type: reflect.TypeFor[slot]()}}
		if anchored {
			fields = append(fields, reflect.StructField{Name: "A", Type: reflect.TypeFor[int64]()})
		}
		fields = append(fields, reflect.StructField{Name: "K", Type: reflect.TypeFor[K]()})
		m.typ = reflect.StructOf(fields)
		m.keyOff = m.typ.Field(len(fields) - 1).Offset
	}
	if presize > 0 {
		for i := range m.shards {
			g := make([]group, groupsFor(presize/mapShards+1))
			initGroups(g)
			m.shards[i].tab.Store(&g)
		}
	}
	return m
}

// groupsFor is the number of groups a shard holding n nodes is given when it
// is made or rehashed: a load of 5/8, so that it grows again (at 7/8) only
// after n has grown by two fifths.
func groupsFor(n int) int { return max(1, (n*8/5+groupSlots-1)/groupSlots) }

func initGroups(g []group) {
	for i := range g {
		g[i].ctrl.Store(ctrlGone << 56)
	}
}

func (m *keyMap[K]) hash(key K) uint64 {
	if m.str {
		return maphash.String(m.seed, *(*string)(unsafe.Pointer(&key)))
	}
	return maphash.Comparable(m.seed, key)
}

// tagOf is the control byte of a key hashing to h: never empty or gone.
func tagOf(h uint64) uint64 {
	t := (h >> 48) & 0xff
	if t <= ctrlGone {
		t += 2
	}
	return t
}

// matches has the high bit of byte i (i < 7) set when byte i of c may be b
// (exact for the lowest such byte; a byte above one may be a false positive,
// which the caller checks).
func matches(c, b uint64) uint64 {
	x := c ^ (ctrlLow * b)
	return (x - ctrlLow) &^ x & ctrlHigh
}

// home is the group a hash's probe starts at, among n.
func home(h uint64, n int) int { return int((uint64(uint32(h)) * uint64(n)) >> 32) }

// load returns key's node, or nil. Nil may also mean a node made by a change
// that has not reached this lookup; callers that would make one look again
// under the lock (compute).
func (m *keyMap[K]) load(key K) *slot {
	h := m.hash(key)
	tp := m.shards[h>>shardShift].tab.Load()
	if tp == nil {
		return nil
	}
	gs := *tp
	tag := tagOf(h)
	for i := home(h, len(gs)); ; {
		g := &gs[i]
		c := g.ctrl.Load()
		for b := matches(c, tag); b != 0; b &= b - 1 {
			if s := g.p[bits.TrailingZeros64(b)>>3].Load(); s != nil && m.keyIs(s, key) {
				return s
			}
		}
		if matches(c, ctrlEmpty) != 0 {
			return nil
		}
		if i++; i == len(gs) {
			i = 0
		}
	}
}

// keyIs reports whether s is key's node.
func (m *keyMap[K]) keyIs(s *slot, key K) bool {
	if m.str {
		return nodeString(unsafe.Pointer(s), m.keyOff) == *(*string)(unsafe.Pointer(&key))
	}
	return *(*K)(unsafe.Add(unsafe.Pointer(s), m.keyOff)) == key
}

// nodeString is the string key stored at off in node p (pointing into the node).
func nodeString(p unsafe.Pointer, off uintptr) string {
	b := unsafe.Add(p, off)
	n := uint64(*(*byte)(b))
	w := uintptr(1)
	if n >= 0x80 {
		var k int
		n, k = binary.Uvarint(unsafe.Slice((*byte)(b), binary.MaxVarintLen64))
		w = uintptr(k)
	}
	return unsafe.String((*byte)(unsafe.Add(b, w)), int(n))
}

// keyOf is the key of node s. A string key points into the node.
func (m *keyMap[K]) keyOf(s *slot) K {
	p := unsafe.Pointer(s)
	if m.str {
		k := nodeString(p, m.keyOff)
		return *(*K)(unsafe.Pointer(&k))
	}
	return *(*K)(unsafe.Add(p, m.keyOff))
}

// anchorOf is the grid anchor of node s's bucket.
func (m *keyMap[K]) anchorOf(s *slot) int64 {
	if !m.anchored {
		return m.fixed
	}
	return *(*int64)(unsafe.Add(unsafe.Pointer(s), slotSize))
}

// newNode allocates a node for key with the given anchor (ignored when nodes
// hold none) and a zero word. A string key's bytes are copied into it, so the
// map never keeps a caller's buffer.
func (m *keyMap[K]) newNode(key K, anchor int64) *slot {
	var p unsafe.Pointer
	if m.str {
		k := *(*string)(unsafe.Pointer(&key))
		var lb [binary.MaxVarintLen64]byte
		w := binary.PutUvarint(lb[:], uint64(len(k)))
		p = reflect.New(nodeBlock(int(m.keyOff-slotSize) + w + len(k))).UnsafePointer()
		kp := unsafe.Add(p, m.keyOff)
		copy(unsafe.Slice((*byte)(kp), w+len(k)), lb[:w])
		copy(unsafe.Slice((*byte)(unsafe.Add(kp, w)), len(k)), k)
	} else {
		p = reflect.New(m.typ).UnsafePointer()
		*(*K)(unsafe.Add(p, m.keyOff)) = key
	}
	if m.anchored {
		*(*int64)(unsafe.Add(p, slotSize)) = anchor
	}
	return (*slot)(p)
}

// again is a node for s's key and anchor, for a bucket that replaces s.
func (m *keyMap[K]) again(s *slot) *slot { return m.newNode(m.keyOf(s), m.anchorOf(s)) }

// nodeBlocks are the node types of string keys, by the bytes after the slot
// in 8-byte steps: struct{ S slot; B [8·i]byte }. The collector sees the slot's
// pointer and skips the bytes.
var nodeBlocks [36]atomic.Pointer[reflect.Type]

// nodeBlock is the type of a node with n bytes after its slot: up to 280
// bytes the type of its 8-byte step (made once), beyond that its own.
func nodeBlock(n int) reflect.Type {
	i := (n + 7) / 8
	if i >= len(nodeBlocks) {
		return blockOf(n)
	}
	if t := nodeBlocks[i].Load(); t != nil {
		return *t
	}
	t := blockOf(8 * i)
	nodeBlocks[i].Store(&t)
	return t
}

func blockOf(n int) reflect.Type {
	return reflect.StructOf([]reflect.StructField{
		{Name: "S", Type: reflect.TypeFor[slot]()},
		{Name: "B", Type: reflect.ArrayOf(n, reflect.TypeFor[byte]())},
	})
}

// compute calls f with key's node (nil, false when it has none) under the lock
// of key's shard, and then stores what f returns: remove (the key is removed,
// if it had a node), or the node to hold, which must be key's (nil: nothing
// stored). It returns the node held after the call, or nil. f must not call the
// map. Every node f replaces or removes must be dead first (see keyMap).
func (m *keyMap[K]) compute(key K, f func(cur *slot, found bool) (next *slot, remove bool)) *slot {
	h := m.hash(key)
	sh := &m.shards[h>>shardShift]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	g, j := m.find(sh, h, key)
	var cur *slot
	if g != nil {
		cur = g.p[j].Load()
	}
	next, remove := f(cur, cur != nil)
	switch {
	case cur != nil && remove:
		g.ctrl.Store(setByte(g.ctrl.Load(), j, ctrlGone))
		g.p[j].Store(nil)
		sh.live--
		return nil
	case cur != nil:
		if next != cur {
			g.p[j].Store(next) // after the control word: it already holds the tag
		}
		return next
	case remove || next == nil:
		return nil
	}
	m.insert(sh, h, next)
	return next
}

func setByte(c uint64, i int, b uint64) uint64 {
	return c&^(0xff<<(8*i)) | b<<(8*i)
}

// find is the group and slot of key's node in shard sh; nil when it has none.
// Under the shard's lock.
func (m *keyMap[K]) find(sh *mapShard, h uint64, key K) (*group, int) {
	tp := sh.tab.Load()
	if tp == nil {
		return nil, 0
	}
	gs := *tp
	tag := tagOf(h)
	for i := home(h, len(gs)); ; {
		g := &gs[i]
		c := g.ctrl.Load()
		for b := matches(c, tag); b != 0; b &= b - 1 {
			j := bits.TrailingZeros64(b) >> 3
			if s := g.p[j].Load(); s != nil && m.keyIs(s, key) {
				return g, j
			}
		}
		if matches(c, ctrlEmpty) != 0 {
			return nil, 0
		}
		if i++; i == len(gs) {
			i = 0
		}
	}
}

// insert adds node s, whose key hashes to h and is not in shard sh, rehashing
// the shard first when its load would pass 7/8 of its slots (then into
// groupsFor of what it holds, which also drops the slots of removed nodes).
// Under the shard's lock.
func (m *keyMap[K]) insert(sh *mapShard, h uint64, s *slot) {
	tp := sh.tab.Load()
	if tp == nil || (sh.used+1)*8 > len(*tp)*groupSlots*7 {
		tp = m.rehash(sh, sh.live+1)
	}
	if !place(*tp, h, s) {
		sh.used++
	}
	sh.live++
}

// place puts s into the first empty or gone slot of its probe in gs, and
// reports whether that slot was gone (reused). The pointer is stored before
// the control byte, so a lookup that sees the tag finds the node.
func place(gs []group, h uint64, s *slot) (reused bool) {
	for i := home(h, len(gs)); ; {
		g := &gs[i]
		c := g.ctrl.Load()
		free := matches(c, ctrlEmpty) | matches(c, ctrlGone)
		if free != 0 {
			j := bits.TrailingZeros64(free) >> 3
			reused = (c>>(8*j))&0xff == ctrlGone
			g.p[j].Store(s)
			g.ctrl.Store(setByte(c, j, tagOf(h)))
			return reused
		}
		if i++; i == len(gs) {
			i = 0
		}
	}
}

// rehash replaces shard sh's groups with new ones sized for n nodes, holding
// its nodes, and returns them. Lookups still reading the old groups find
// what they held (see keyMap). Under the shard's lock.
func (m *keyMap[K]) rehash(sh *mapShard, n int) *[]group {
	gs := make([]group, groupsFor(n))
	initGroups(gs)
	if tp := sh.tab.Load(); tp != nil {
		for i := range *tp {
			g := &(*tp)[i]
			for j := range g.p {
				if s := g.p[j].Load(); s != nil {
					place(gs, m.hash(m.keyOf(s)), s)
				}
			}
		}
	}
	sh.used = sh.live
	sh.tab.Store(&gs)
	return &gs
}

// rangeNodes calls f with each key and node until f returns false. It takes no
// lock: a node made or removed meanwhile may be seen or not.
func (m *keyMap[K]) rangeNodes(f func(key K, s *slot) bool) {
	for i := range m.shards {
		tp := m.shards[i].tab.Load()
		if tp == nil {
			continue
		}
		for gi := range *tp {
			g := &(*tp)[gi]
			for j := range g.p {
				if s := g.p[j].Load(); s != nil && !f(m.keyOf(s), s) {
					return
				}
			}
		}
	}
}
