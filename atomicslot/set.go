package atomicslot

import "github.com/limitgen/limitgen/atomicbucket"

// MaxSet is the most slots a Set holds: a tier's in-flight rules.
const MaxSet = 4

// Set is the slots one request holds of several in-flight rules (a tier's,
// or the routes a door matched), released together; the zero Set holds
// none. Pass it by value, as a Slot: every copy releases the same slots,
// each once in effect.
type Set struct {
	s [MaxSet]Slot
	n int
}

// Add adds s to the set when it holds a slot, and reports whether it fit
// (a full set refuses it: the caller gives it back).
func (h *Set) Add(s Slot) bool {
	if !s.Held() {
		return true
	}
	if h.n == MaxSet {
		return false
	}
	h.s[h.n] = s
	h.n++
	return true
}

// Len is how many slots the set holds.
func (h *Set) Len() int { return h.n }

// Release gives every slot of the set back now (ReleaseAt).
func (h *Set) Release() { h.ReleaseAt(atomicbucket.Now()) }

// ReleaseAt gives every slot of the set back at now, the last taken first.
func (h *Set) ReleaseAt(now atomicbucket.Time) {
	for i := h.n - 1; i >= 0; i-- {
		h.s[i].ReleaseAt(now)
	}
}
