package verdict

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
)

// What a door sends for a decision (its header values, metadata, a status
// error) depends only on the rule's Policy and a few numbers (r, t, the
// retry), which take few values: r is at most the burst, and for a given r, t
// is a second or two. So a door keeps what it made in a Memo and gives a
// response whose numbers it has seen the same values again: a response
// allocates only when its values are new to the Memo (then one entry, which
// replaces the slot's last). An entry is never written after it is
// published: a door may hand its values to a response that keeps them.

// MemoBits sets a Memo's size: 512 slots, 4 KiB of pointers, made on first
// use, enough for the fields of a rule with a burst of a few hundred, or of
// many rules whose keys are mostly full.
const (
	MemoBits  = 9
	memoSlots = 1 << MemoBits
)

// Memo is a table of a door's entries of type E by hash (MemoHash): Slot
// gives the slot a hash falls in, which holds the last entry stored there.
// The caller checks that the entry it loads is the one it wants (its policy
// and numbers), and stores a new one when not. The zero Memo is empty;
// safe for concurrent use.
type Memo[E any] struct {
	t atomic.Pointer[[memoSlots]atomic.Pointer[E]]
}

// Slot returns the slot of hash h.
func (m *Memo[E]) Slot(h uint64) *atomic.Pointer[E] {
	t := m.t.Load()
	if t == nil {
		m.t.CompareAndSwap(nil, new([memoSlots]atomic.Pointer[E]))
		t = m.t.Load()
	}
	return &t[h>>(64-MemoBits)]
}

// MemoHash is the hash of a response's values: by its policy's address, two
// numbers (r and t) and extra (what else the values depend on).
func MemoHash(p *Policy, a, b int64, extra uint64) uint64 {
	return (uint64(uintptr(unsafe.Pointer(p))) ^ uint64(a)*0x9e3779b97f4a7c15 ^ uint64(b)<<32 ^ extra) * 0xff51afd7ed558ccd
}

// Describe is a limit's numbers as a policy writes them: "30/min, burst 10",
// "5 per 10s, burst 5".
func Describe(l atomicbucket.Limit) string {
	rate := strconv.FormatInt(l.Tokens, 10) + " per " + l.Period.String()
	switch l.Period {
	case time.Second:
		rate = strconv.FormatInt(l.Tokens, 10) + "/s"
	case time.Minute:
		rate = strconv.FormatInt(l.Tokens, 10) + "/min"
	case time.Hour:
		rate = strconv.FormatInt(l.Tokens, 10) + "/h"
	case 24 * time.Hour:
		rate = strconv.FormatInt(l.Tokens, 10) + "/d"
	}
	return rate + ", burst " + strconv.FormatInt(l.Burst, 10)
}
