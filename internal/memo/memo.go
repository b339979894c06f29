// Package memo keeps what the doors made for a decision (header values,
// metadata, status errors), so that a response whose numbers were seen
// before reuses them: limithttp's and limitgrpc's, and nobody else's.
package memo

import (
	"sync/atomic"
	"unsafe"
)

// What a door sends for a decision (its header values, metadata, a status
// error) depends only on the rule's Policy and a few numbers (r, t, the
// retry), which take few values: r is at most the burst, and for a given r, t
// is a second or two. So a door keeps what it made in a Table and gives a
// response whose numbers it has seen the same values again: a response
// allocates only when its values are new to the Table (then one entry, which
// replaces the slot's last). An entry is never written after it is
// published: a door may hand its values to a response that keeps them.

// Bits sets a Table's size: 512 slots, 4 KiB of pointers, made on first
// use, enough for the fields of a rule with a burst of a few hundred, or of
// many rules whose keys are mostly full.
const (
	Bits  = 9
	slots = 1 << Bits
)

// Table is a door's entries of type E by hash (Hash): Slot
// gives the slot a hash falls in, which holds the last entry stored there.
// The caller checks that the entry it loads is the one it wants (its policy
// and numbers), and stores a new one when not. The zero Table is empty;
// safe for concurrent use.
type Table[E any] struct {
	t atomic.Pointer[[slots]atomic.Pointer[E]]
}

// Slot returns the slot of hash h.
func (m *Table[E]) Slot(h uint64) *atomic.Pointer[E] {
	t := m.t.Load()
	if t == nil {
		m.t.CompareAndSwap(nil, new([slots]atomic.Pointer[E]))
		t = m.t.Load()
	}
	return &t[h>>(64-Bits)]
}

// Hash is the hash of a response's values: by its policy's address, two
// numbers (r and t) and extra (what else the values depend on).
func Hash[P any](p *P, a, b int64, extra uint64) uint64 {
	return (uint64(uintptr(unsafe.Pointer(p))) ^ uint64(a)*0x9e3779b97f4a7c15 ^ uint64(b)<<32 ^ extra) * 0xff51afd7ed558ccd
}
