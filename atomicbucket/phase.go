package atomicbucket

import (
	"hash/maphash"
	"strconv"

	"github.com/limitgen/limitgen/internal/keyhash"
)

// The grid of an interval rule's keyed bucket is not anchored at the key's first
// use: it is placed by the key itself, at a phase fixed by a hash of the key:
// its boundaries are the wall-clock instants whose Unix time in ns is ≡ hash
// (mod Period). A
// full bucket then holds nothing a fresh one would not (the word is the same and
// the grid is the same), so a table can remove it and make it again with no
// change to any later decision; a grid anchored at first use would move each
// time the key came back, and the key could then take a period's tokens early.
// Keys get different phases, so a table's keys do not all refill at the same
// instant (as they do under Aligned).
//
// The phase is stable across processes for string and integer keys (FNV-1a of
// the string, or of the integer's decimal form), and for keys whose table was
// given TableOptions.KeyHash (a generated composite key's: genimpl.TextHash of its
// text form), so every instance of a service places a key's grid alike. Other
// key types use the table's own hash seed.

// gridHash is the hash that places key's grid: the table's KeyHash, or keyHash.
func (t *Table[K]) gridHash(key K) uint64 {
	if t.hashFn != nil {
		return t.hashFn(key)
	}
	return keyHash(key, t.seed)
}

// keyHash is the hash that places key's grid: FNV-1a of a string key, or of an
// integer key's decimal form; for other types, maphash with seed.
func keyHash[K comparable](key K, seed maphash.Seed) uint64 {
	var buf [24]byte
	switch k := any(key).(type) {
	case string:
		return keyhash.Of(k)
	case int:
		return keyhash.Of(strconv.AppendInt(buf[:0], int64(k), 10))
	case int8:
		return keyhash.Of(strconv.AppendInt(buf[:0], int64(k), 10))
	case int16:
		return keyhash.Of(strconv.AppendInt(buf[:0], int64(k), 10))
	case int32:
		return keyhash.Of(strconv.AppendInt(buf[:0], int64(k), 10))
	case int64:
		return keyhash.Of(strconv.AppendInt(buf[:0], k, 10))
	case uint:
		return keyhash.Of(strconv.AppendUint(buf[:0], uint64(k), 10))
	case uint8:
		return keyhash.Of(strconv.AppendUint(buf[:0], uint64(k), 10))
	case uint16:
		return keyhash.Of(strconv.AppendUint(buf[:0], uint64(k), 10))
	case uint32:
		return keyhash.Of(strconv.AppendUint(buf[:0], uint64(k), 10))
	case uint64:
		return keyhash.Of(strconv.AppendUint(buf[:0], k, 10))
	}
	return maphash.Comparable(seed, key)
}

// anchorFor is the grid anchor (ns since the epoch, in (−period, 0]) of a keyed
// bucket whose key hashes to h: the rule's aligned anchor for aligned rules, a
// phase of the period given by h for anchored ones, 0 for greedy rules.
func (r *Rule) anchorFor(h uint64) int64 {
	switch r.mode {
	case modeAligned:
		return r.anchor
	case modeAnchored:
		// r.anchor is the wall-clock grid's boundary at or before the epoch;
		// the key's grid is that one moved by the hash, brought into (−period, 0].
		a := (r.anchor + int64(h%uint64(r.period))) % r.period
		if a > 0 {
			a -= r.period
		}
		return a
	}
	return 0
}

// KeyAnchor is where the grid of key's bucket is anchored in a Table of this
// rule with string keys (or integer keys, by their decimal form): a time in
// (−Period, 0] ns since the epoch, with boundaries every Period after it, at the
// same wall-clock instants in every process (its hash is FNV-1a). It is 0 for greedy rules. Tests and other stores use it to place a key's grid as a
// table does.
func (r *Rule) KeyAnchor(key string) int64 { return r.anchorFor(keyhash.Of(key)) }
