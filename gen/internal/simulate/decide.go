package simulate

import (
	"container/heap"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/tier"
)

// summary writes, as # comment lines, the admissions and denials per rule and
// key; in a tier, the requests a rule passed but a later rule denied
// (refunded) are counted apart from the ones it admitted.
func (s *simulation) summary(w io.Writer) {
	if s.tier {
		fmt.Fprintln(w, "# summary: rule,key,allowed,denied,refunded")
	} else {
		fmt.Fprintln(w, "# summary: rule,key,allowed,denied")
	}
	for _, r := range s.rules {
		keys := map[string]bool{}
		for _, m := range []map[string]int{r.allowed, r.denied, r.refunded} {
			for k := range m {
				keys[k] = true
			}
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		line := func(k string, allowed, denied, refunded int) {
			if strings.ContainsAny(k, ",\"\r\n") { // a composite key's comma: quoted, as CSV quotes it
				k = `"` + strings.ReplaceAll(k, `"`, `""`) + `"`
			}
			if s.tier {
				fmt.Fprintf(w, "# %s,%s,%d,%d,%d\n", r.rule.Name, k, allowed, denied, refunded)
			} else {
				fmt.Fprintf(w, "# %s,%s,%d,%d\n", r.rule.Name, k, allowed, denied)
			}
		}
		ta, td, tr := 0, 0, 0
		for _, k := range sorted {
			line(k, r.allowed[k], r.denied[k], r.refunded[k])
			ta += r.allowed[k]
			td += r.denied[k]
			tr += r.refunded[k]
		}
		line("(all keys)", ta, td, tr)
		if r.limit.InFlight {
			st := atomicslot.Stats{}
			if r.gate != nil {
				st = r.gate.Stats()
			} else if r.slots != nil {
				st = r.slots.Stats()
			}
			fmt.Fprintf(w, "# %s: slots held past max_hold (%v), back by expiry: %d\n", r.rule.Name, time.Duration(r.limit.PeriodNs), st.Expired)
		}
		if (s.settles || r.settled > 0) && !r.limit.InFlight {
			fmt.Fprintf(w, "# %s: settled at their actual cost: %d, tokens forgiven beyond the debt bound: %d\n", r.rule.Name, r.settled, r.forgiven)
		}
	}
}

func (s *simulation) costOf(r *simRule, req request) int64 {
	if req.hasCost {
		return req.cost
	}
	return r.limit.Cost
}

// decide runs one request through the rule, or the tier's rules all or
// nothing, with tier.At: the tier logic generated code unrolls.
func (s *simulation) decide(req request, now atomicbucket.Time) (atomicbucket.Decision, string) {
	s.release(now)
	// The in-flight rules first (a tier's slots are taken before its rate
	// rules), each slot given back when a later rule denies.
	var taken []atomicslot.Slot
	var most atomicbucket.Decision // the slots' most constraining: the fewest free
	first := len(s.rules)
	for i, r := range s.rules {
		if !r.limit.InFlight {
			first = i
			break
		}
		var slot atomicslot.Slot
		var d atomicbucket.Decision
		if r.gate != nil {
			slot, d = r.gate.AcquireAt(now)
		} else {
			slot, d = r.slots.AcquireAt(req.keys[i], now)
		}
		if !d.Allowed {
			for j := range taken {
				taken[j].ReleaseAt(now)
				s.rules[j].refunded[req.keys[j]]++
			}
			r.denied[req.keys[i]]++
			return d, r.rule.Name
		}
		taken = append(taken, slot)
		if len(taken) == 1 || d.Remaining < most.Remaining {
			most = d
		}
	}
	held := func() {
		for j, slot := range taken {
			s.rules[j].allowed[req.keys[j]]++
			heap.Push(&s.held, heldSlot{end: now.Add(time.Duration(req.dur)), slot: slot})
		}
	}
	if first == len(s.rules) { // slots only
		held()
		return most, ""
	}
	d, deniedBy := s.decideRates(req, now, first)
	if !d.Allowed {
		for j := range taken {
			taken[j].ReleaseAt(now)
			s.rules[j].refunded[req.keys[j]]++
		}
		return d, deniedBy
	}
	held()
	if req.hasActual {
		// Settled when the request ends, against what each rate rule took.
		st := settlement{admitted: now, end: now.Add(time.Duration(req.dur)), keys: req.keys, actual: req.actual, estimates: make([]int64, len(s.rules))}
		for i, r := range s.rules[first:] {
			st.estimates[i+first] = s.costOf(r, req)
		}
		heap.Push(&s.pending, st)
		s.release(now) // one that ends now settles before the next request
	}
	return d, deniedBy
}

// settlement is an admitted request's settlement: when it was admitted and
// when it ends, its keys, each rate rule's estimate (0 for in-flight rules)
// and its actual cost.
type settlement struct {
	admitted  atomicbucket.Time
	end       atomicbucket.Time
	keys      []string
	estimates []int64
	actual    int64
}

// settle settles st with each of the simulation's rate rules, as a door
// settles a request whose handler returned: a bucket gives the difference
// back or owes it as debt; a window gives back from what it counted at the
// admission, or counts an excess.
func (s *simulation) settle(st settlement) {
	for i, r := range s.rules {
		var f int64
		switch {
		case r.table != nil:
			f = r.table.SettleAt(st.keys[i], st.end, st.estimates[i], st.actual)
		case r.bucket != nil:
			f = r.bucket.SettleAt(st.end, st.estimates[i], st.actual)
		case r.wtable != nil:
			f = r.wtable.SettleAt(st.keys[i], st.end, st.admitted, st.estimates[i], st.actual)
		case r.window != nil:
			f = r.window.SettleAt(st.end, st.admitted, st.estimates[i], st.actual)
		default:
			continue // an in-flight rule
		}
		r.settled++
		r.forgiven += f
	}
}

// release ends the slots of the requests that ended by now, in the order
// they ended (a slot held past its rule's max_hold came back by itself, and
// its release finds it so: counted in its rule's Stats as expired), and
// settles those with an actual cost.
func (s *simulation) release(now atomicbucket.Time) {
	for s.held.Len() > 0 && s.held[0].end <= now {
		h := heap.Pop(&s.held).(heldSlot)
		h.slot.ReleaseAt(h.end)
	}
	for s.pending.Len() > 0 && s.pending[0].end <= now {
		s.settle(heap.Pop(&s.pending).(settlement))
	}
}

// heldSlot is an admitted request's slot and when the request ends.
type heldSlot struct {
	end  atomicbucket.Time
	slot atomicslot.Slot
}

// byEnd orders what ends at a time (held slots, settlements) by it, for
// container/heap.
type byEnd[T interface{ ends() atomicbucket.Time }] []T

func (h byEnd[T]) Len() int           { return len(h) }
func (h byEnd[T]) Less(i, j int) bool { return h[i].ends() < h[j].ends() }
func (h byEnd[T]) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *byEnd[T]) Push(x any)        { *h = append(*h, x.(T)) }
func (h *byEnd[T]) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (h heldSlot) ends() atomicbucket.Time   { return h.end }
func (s settlement) ends() atomicbucket.Time { return s.end }

// decideRates runs the request through the rate rules from first on, all or
// nothing, with tier.At: the tier logic generated code unrolls.
func (s *simulation) decideRates(req request, now atomicbucket.Time, first int) (atomicbucket.Decision, string) {
	steps := make([]tier.Step, len(s.rules)-first)
	for i, r := range s.rules[first:] {
		i += first
		switch {
		case r.table != nil:
			steps[i-first] = tier.Table(r.table, req.keys[i], s.costOf(r, req))
		case r.bucket != nil:
			steps[i-first] = tier.Bucket(r.bucket, s.costOf(r, req))
		case r.wtable != nil:
			steps[i-first] = tier.WindowTable(r.wtable, req.keys[i], s.costOf(r, req))
		default:
			steps[i-first] = tier.Window(r.window, s.costOf(r, req))
		}
	}
	d, at, denied := tier.At(now, steps...)
	at += first
	checked := len(s.rules)
	if denied {
		checked = at + 1
	}
	for i, r := range s.rules[first:checked] {
		i += first
		switch {
		case !denied:
			r.allowed[req.keys[i]]++
		case i == at:
			r.denied[req.keys[i]]++
		default:
			r.refunded[req.keys[i]]++
		}
	}
	if denied {
		return d, s.rules[at].rule.Name
	}
	return d, ""
}
