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
// one allocation, a node: the slot (the bucket's word and its latest change's time) first, then, for a rule
// whose interval grid is placed by the key, the grid's anchor, then the key,
// then the numbers the word is written in, when they are not the table's own
// (slot.nums: numbers.go). A string key is stored as a uvarint of its length
// times two, plus one when the node holds numbers, and its bytes; the numbers'
// pointer follows, 8-byte aligned, only then: a key that never has numbers of
// its own pays nothing for them, and its node holds no pointer for the
// collector to scan. Any other key is stored as a value of its type, and its
// node always has the pointer. The map itself is open addressing over groups
// of seven node pointers that share a 64-byte line with their control word,
// in shards that each grow on their own. Keys are hashed under seeds drawn for
// each map (strings by the runtime's memhash, integers by a seeded mix), so
// keys chosen to collide in one process do not collide in another.
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
// under a rule without a keyed grid, in the table's own numbers: 8 + 1 + 13
// bytes, a 24-byte allocation) and 64/7 bytes a pointer at a load between 5/8
// and 7/8.
type keyMap[K comparable] struct {
	shards   [mapShards]mapShard
	seed     maphash.Seed
	str      bool    // K is a string type: nodes hold the key's bytes
	intSize  uint8   // K is an integer type of this many bytes (hashed by mixing, not by maphash); 0 otherwise
	mix      uint64  // intSize's seed
	strSeed  uint64  // str's seed
	anchored bool    // nodes hold a grid anchor after the slot
	fixed    int64   // every node's anchor when they hold none
	keyOff   uintptr // the key's offset in a node
	numsOff  uintptr // the offset of the numbers' pointer in a node of a key that is not a string
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
	m.str = reflect.TypeFor[K]().Kind() == reflect.String // a named string type too
	m.strSeed = maphash.Comparable(m.seed, uint64(0x6a09e667f3bcc909))
	switch reflect.TypeFor[K]().Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		m.intSize = uint8(unsafe.Sizeof(zero))
		m.mix = maphash.Comparable(m.seed, uint64(0x9e3779b97f4a7c15)) | 1
	}
	m.keyOff = slotSize
	if anchored {
		m.keyOff += 8
	}
	if !m.str {
		fields := []reflect.StructField{{Name: "S", Type: reflect.TypeFor[slot]()}}
		if anchored {
			fields = append(fields, reflect.StructField{Name: "A", Type: reflect.TypeFor[int64]()})
		}
		fields = append(fields, reflect.StructField{Name: "K", Type: reflect.TypeFor[K]()},
			reflect.StructField{Name: "N", Type: reflect.TypeFor[*numbers]()})
		m.typ = reflect.StructOf(fields)
		m.keyOff = m.typ.Field(len(fields) - 2).Offset
		m.numsOff = m.typ.Field(len(fields) - 1).Offset
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
		k := *(*string)(unsafe.Pointer(&key))
		return uint64(memhash(unsafe.Pointer(unsafe.StringData(k)), uintptr(m.strSeed), uintptr(len(k))))
	}
	switch m.intSize {
	case 8:
		return mixInt(*(*uint64)(unsafe.Pointer(&key)), m.mix)
	case 4:
		return mixInt(uint64(*(*uint32)(unsafe.Pointer(&key))), m.mix)
	case 2:
		return mixInt(uint64(*(*uint16)(unsafe.Pointer(&key))), m.mix)
	case 1:
		return mixInt(uint64(*(*uint8)(unsafe.Pointer(&key))), m.mix)
	}
	return maphash.Comparable(m.seed, key)
}

// memhash is the runtime's hash of memory (AES-based where the CPU has it),
// the one maps and hash/maphash use; called directly, a string key's hash
// skips maphash's wrappers (a third of its cost on short keys). The runtime
// keeps it linkable for the packages that have long done this.
//
//go:linkname memhash runtime.memhash
//go:noescape
func memhash(p unsafe.Pointer, seed, n uintptr) uintptr

// mixInt hashes an integer key under the map's random seed: the key, xored
// with the seed, through a bijective 64-bit finaliser (multiply, xor-shift),
// every output bit depending on every input bit. Keys an adversary picks to
// collide in one map do not in another (the seed is random per map), and the
// mix is a few cycles where maphash.Comparable's generic path costs tens.
func mixInt(k, seed uint64) uint64 {
	k ^= seed
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k * seed
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
	// find's loop, written out: the check's hot path, without the call.
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
	n, w := strHeader(p, off)
	return unsafe.String((*byte)(unsafe.Add(p, off+w)), int(n>>1))
}

// strHeader is the header of the string key stored at off in node p (its
// length times two, plus one when the node holds numbers) and its width.
func strHeader(p unsafe.Pointer, off uintptr) (uint64, uintptr) {
	b := unsafe.Add(p, off)
	if n := uint64(*(*byte)(b)); n < 0x80 {
		return n, 1
	}
	n, k := binary.Uvarint(unsafe.Slice((*byte)(b), binary.MaxVarintLen64))
	return n, uintptr(k)
}

// hasNums reports whether node s holds numbers (is written in numbers other
// than the table's own): one load from the node, for the checks' fast path.
func (m *keyMap[K]) hasNums(s *slot) bool {
	p := unsafe.Pointer(s)
	if m.str {
		return *(*byte)(unsafe.Add(p, m.keyOff))&1 != 0
	}
	return *(**numbers)(unsafe.Add(p, m.numsOff)) != nil
}

// numsOf is the numbers node s holds; nil for the table's own.
func (m *keyMap[K]) numsOf(s *slot) *numbers {
	p := unsafe.Pointer(s)
	if !m.str {
		return *(**numbers)(unsafe.Add(p, m.numsOff))
	}
	n, w := strHeader(p, m.keyOff)
	if n&1 == 0 {
		return nil
	}
	return *(**numbers)(unsafe.Add(p, align8(m.keyOff+w+uintptr(n>>1))))
}

func align8(n uintptr) uintptr { return (n + 7) &^ 7 }

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
// hold none), the numbers its word is written in (nil: the table's own) and a
// zero word. A string key's bytes are copied into it, so the map never keeps a
// caller's buffer.
func (m *keyMap[K]) newNode(key K, anchor int64, nums *numbers) *slot {
	var p unsafe.Pointer
	if m.str {
		k := *(*string)(unsafe.Pointer(&key))
		h := uint64(len(k)) << 1
		if nums != nil {
			h |= 1
		}
		var lb [binary.MaxVarintLen64]byte
		w := binary.PutUvarint(lb[:], h)
		after := int(m.keyOff-slotSize) + w + len(k) // the bytes after the slot
		if nums == nil {
			p = reflect.New(nodeBlock(after)).UnsafePointer()
		} else {
			p = reflect.New(nodeBlockNums(after)).UnsafePointer()
			*(**numbers)(unsafe.Add(p, align8(slotSize+uintptr(after)))) = nums
		}
		kp := unsafe.Add(p, m.keyOff)
		copy(unsafe.Slice((*byte)(kp), w), lb[:w])
		copy(unsafe.Slice((*byte)(unsafe.Add(kp, w)), len(k)), k)
	} else {
		p = reflect.New(m.typ).UnsafePointer()
		*(*K)(unsafe.Add(p, m.keyOff)) = key
		*(**numbers)(unsafe.Add(p, m.numsOff)) = nums
	}
	if m.anchored {
		*(*int64)(unsafe.Add(p, slotSize)) = anchor
	}
	return (*slot)(p)
}

// again is a node for s's key and anchor, written in nums, for a bucket that
// replaces s.
func (m *keyMap[K]) again(s *slot, nums *numbers) *slot {
	return m.newNode(m.keyOf(s), m.anchorOf(s), nums)
}

// nodeBlocks are the node types of string keys without numbers, by the bytes
// after the slot in 8-byte steps: struct{ S slot; B [8·i]byte }, which the
// collector need not scan. nodeBlocksNums are those with numbers:
// struct{ S slot; B [8·i]byte; N *numbers }.
var nodeBlocks, nodeBlocksNums [36]atomic.Pointer[reflect.Type]

// nodeBlock is the type of a node with n bytes after its slot and no numbers:
// up to 280 bytes the type of its 8-byte step (made once), beyond that its own.
func nodeBlock(n int) reflect.Type { return cachedBlock(&nodeBlocks, n, false) }

// nodeBlockNums is nodeBlock for a node with numbers after its n bytes.
func nodeBlockNums(n int) reflect.Type { return cachedBlock(&nodeBlocksNums, n, true) }

func cachedBlock(c *[36]atomic.Pointer[reflect.Type], n int, nums bool) reflect.Type {
	i := (n + 7) / 8
	if i >= len(c) {
		return blockOf(8*i, nums)
	}
	if t := c[i].Load(); t != nil {
		return *t
	}
	t := blockOf(8*i, nums)
	c[i].Store(&t)
	return t
}

func blockOf(n int, nums bool) reflect.Type {
	fields := []reflect.StructField{
		{Name: "S", Type: reflect.TypeFor[slot]()},
		{Name: "B", Type: reflect.ArrayOf(n, reflect.TypeFor[byte]())},
	}
	if nums {
		fields = append(fields, reflect.StructField{Name: "N", Type: reflect.TypeFor[*numbers]()})
	}
	return reflect.StructOf(fields)
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
	g, j, cur := m.find(sh, h, key)
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
// Under the shard's lock, it is exact; without it (load), a lookup racing a
// change may miss a node just made or find one just replaced (see keyMap).
func (m *keyMap[K]) find(sh *mapShard, h uint64, key K) (*group, int, *slot) {
	tp := sh.tab.Load()
	if tp == nil {
		return nil, 0, nil
	}
	gs := *tp
	tag := tagOf(h)
	for i := home(h, len(gs)); ; {
		g := &gs[i]
		c := g.ctrl.Load()
		for b := matches(c, tag); b != 0; b &= b - 1 {
			j := bits.TrailingZeros64(b) >> 3
			if s := g.p[j].Load(); s != nil && m.keyIs(s, key) {
				return g, j, s // the node found: a second load of the slot could find another key's
			}
		}
		if matches(c, ctrlEmpty) != 0 {
			return nil, 0, nil
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
