package fuzz

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

// program is a decoded fuzz input: a rule, table options and operations.
type program struct {
	cfg    config
	single bool // one key, no cap, no sweeps: a single Bucket runs it too
	ops    []fuzzOp
}

type fuzzOp struct {
	kind   opKind
	key    string
	cost   int64
	dt     int64         // ns to advance before the operation; negative: out of order
	wait   time.Duration // opReserve
	pick   byte          // opCancel: which reservation
	actual int64         // opSettle: the actual cost (cost is the estimate)
}

// reader hands out the fuzz input a byte at a time, zeros once it is used up.
type reader struct{ b []byte }

func (r *reader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 { return binary.LittleEndian.Uint16([]byte{r.byte(), r.byte()}) }

var (
	fuzzPeriods = []time.Duration{1, time.Microsecond, time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond,
		time.Second, 13 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	// fuzzTokens mixes counts that divide the periods (exact units) with primes
	// that do not (scale = the prime, beyond the budget for the larger ones).
	fuzzTokens = []int64{1, 2, 3, 7, 10, 13, 31, 97, 1000, 997, 65537, 1000003}
	fuzzKeys   = []string{"a", "b", "c", "d"}
)

// decode turns fuzz bytes into a program; false when the rule is invalid (which
// NewRule must say with an error, not a panic).
func decode(data []byte) (program, bool) {
	r := &reader{b: data}
	flags := r.byte()
	var p program
	l := &p.cfg.limit
	switch flags % 3 {
	case 1:
		l.Refill = atomicbucket.Interval
	case 2:
		l.Refill, l.Aligned = atomicbucket.Interval, true
	}
	p.single = flags&8 != 0
	l.Period = fuzzPeriods[int(r.byte())%len(fuzzPeriods)]
	switch t := r.byte(); t % 4 {
	case 0:
		l.Tokens = 1 + int64(r.byte()%10)
	case 1:
		l.Tokens = 1 + int64(r.u16()%1000)
	case 2:
		l.Tokens = fuzzTokens[int(r.byte())%len(fuzzTokens)]
	default:
		l.Tokens = 1 + int64(r.byte())
	}
	if b := r.byte(); b&0x80 != 0 {
		l.Burst = 1 + int64(r.u16())
	} else {
		l.Burst = 1 + int64(b%32)
	}
	if flags&4 != 0 {
		l.Initial, l.InitialSet = int64(r.byte())%(l.Burst+1), true
	}
	if !p.single {
		switch (flags >> 4) % 4 {
		case 1:
			p.cfg.opts.MaxKeys = 1
		case 2:
			p.cfg.opts.MaxKeys = 2
		case 3:
			p.cfg.opts.MaxKeys, p.cfg.opts.AllowAtCap = 1, true
		}
	}
	if _, err := atomicbucket.NewRule(*l); err != nil {
		return p, false
	}
	// Time steps are drawn relative to one token's worth of time.
	emitNs := max(int64(l.Period)/l.Tokens, 1)
	for len(r.b) > 0 && len(p.ops) < 400 {
		op := fuzzOp{kind: opKind(r.byte() % 8), key: fuzzKeys[r.byte()%4]}
		if p.single {
			op.key = ""
		}
		switch v := r.byte(); {
		case v == 255:
			op.dt = int64(365 * 24 * time.Hour) // a long idle gap
		case v >= 240:
			op.dt = int64(v - 240) // a few ns
		case v >= 224:
			op.dt = -int64(v-223) * emitNs / 4 // back in time: stamps out of order
		default:
			op.dt = int64(v) * emitNs / 16
		}
		switch c := r.byte(); {
		case c%16 == 15:
			op.cost = -1
		case c%16 == 14:
			op.cost = l.Burst + 1 + int64(c>>4)
		default:
			op.cost = int64(c) % (min(l.Burst, 8) + 1)
		}
		switch op.kind {
		case opAllow:
			op.cost = 1
		case opReserve:
			op.wait = time.Duration(int64(r.byte()) * emitNs / 4)
		case opCancel:
			op.pick = r.byte()
		case opSweep:
			if p.single {
				op.kind = opLen
			}
		case opLen:
			// Len is compared after every operation anyway: settle instead.
			op.kind = opSettle
			switch a := r.byte(); {
			case a == 255:
				op.actual = -1
			case a >= 240:
				op.actual = 3*l.Burst + int64(a) // beyond any debt bound
			default:
				op.actual = int64(a) % (2*min(l.Burst, 8) + 1)
			}
		}
		p.ops = append(p.ops, op)
	}
	return p, true
}

func (p program) String() string {
	return fmt.Sprintf("limit=%+v opts=%+v single=%v ops=%d", p.cfg.limit, p.cfg.opts, p.single, len(p.ops))
}

// maxFuzzTime keeps fuzz times well inside MaxUptime, where buckets stop refilling.
const maxFuzzTime = int64(atomicbucket.MaxUptime / 2)

// admission is a cost admitted at a time (a reservation counts at its time to act
// unless it is cancelled before then).
type admission struct {
	at, cost  int64
	res       int // reservation id, or -1
	cancelled bool
}

// runGroups runs p through each group of implementations (impls) against the
// group's reference.
func runGroups(p program, groups []map[string]impl, exact bool) error {
	for _, g := range groups {
		if err := runDifferential(p, g, exact); err != nil {
			return err
		}
	}
	return nil
}

// runDifferential applies p to the reference and every implementation and
// returns the first difference; for rules whose numbers are not exactly
// representable it checks the admission envelope instead.
//
// Where the contract says reclaiming a bucket loses nothing (no key cap, new
// buckets full), the reference's decisions are also held to those of a
// reference that never reclaims: with the implementations equal to the
// reference, a reclaim that changed a later decision (a grid that moved, a
// consumption forgotten) fails here.
func runDifferential(p program, ims map[string]impl, exact bool) error {
	ref := ims["reference"]
	var unswept *reference.Reference
	if rp := ref.(*refImpl).Params(); exact && rp.MaxKeys == 0 && rp.Initial == rp.Burst {
		unswept = reference.NewReference(rp)
		unswept.NeverSweep()
	}
	var unsweptRes []reference.Reservation
	belowHorizon := false
	t := int64(time.Hour)
	nres := 0
	refunded := false                               // a refund says a request's tokens were not used: no envelope then
	admitted := map[string]map[string][]admission{} // impl → key → admissions
	for name := range ims {
		admitted[name] = map[string][]admission{}
	}
	for i, op := range p.ops {
		t = min(max(t+op.dt, 0), maxFuzzTime)
		where := func(name string) string {
			return fmt.Sprintf("op %d (%v key=%q cost=%d wait=%v) at %d, impl %s", i, op.kind, op.key, op.cost, op.wait, t, name)
		}
		for _, name := range implNames {
			im := ims[name]
			if im == nil {
				continue
			}
			switch op.kind {
			case opAllow:
				got := im.Allow(op.key, t)
				if got {
					admitted[name][op.key] = append(admitted[name][op.key], admission{at: t, cost: 1, res: -1})
				}
				if exact && name != "reference" && got != ims["reference"].(*refImpl).lastAllow {
					return fmt.Errorf("%s: Allow = %v, reference %v", where(name), got, !got)
				}
				if name == "reference" {
					ref.(*refImpl).lastAllow = got
				}
			case opAllowN, opPeek:
				var got reference.Decision
				if op.kind == opAllowN {
					got = im.AllowN(op.key, t, op.cost)
					if got.Allowed && op.cost > 0 {
						admitted[name][op.key] = append(admitted[name][op.key], admission{at: t, cost: op.cost, res: -1})
					}
				} else {
					got = im.Peek(op.key, t, op.cost)
				}
				if name == "reference" {
					ref.(*refImpl).lastDecision = got
				} else if exact && got != ref.(*refImpl).lastDecision {
					return fmt.Errorf("%s: %s, reference %s", where(name), describe(got), describe(ref.(*refImpl).lastDecision))
				}
			case opRefund:
				if !exact {
					continue // the envelope counts admissions only
				}
				refunded = true
				im.Refund(op.key, t, op.cost)
			case opSettle:
				if !exact {
					continue // as a refund
				}
				refunded = true
				got := int(im.Settle(op.key, t, op.cost, op.actual))
				if name == "reference" {
					ref.(*refImpl).lastN = got
				} else if got != ref.(*refImpl).lastN {
					return fmt.Errorf("%s: Settle(actual %d) forgave %d, reference %d", where(name), op.actual, got, ref.(*refImpl).lastN)
				}
			case opReserve:
				got := im.Reserve(op.key, t, op.cost, op.wait)
				if got.OK && op.cost > 0 {
					admitted[name][op.key] = append(admitted[name][op.key], admission{at: got.At, cost: op.cost, res: nres})
				}
				if name == "reference" {
					ref.(*refImpl).lastRes = got
				} else if w := ref.(*refImpl).lastRes; exact && (got.OK != w.OK || got.Delay != w.Delay || got.RetryAfter != w.RetryAfter || got.At != w.At) {
					return fmt.Errorf("%s: reservation {ok=%v delay=%v retry=%v at=%d}, reference {ok=%v delay=%v retry=%v at=%d}",
						where(name), got.OK, got.Delay, got.RetryAfter, got.At, w.OK, w.Delay, w.RetryAfter, w.At)
				}
			case opCancel:
				if !exact || nres == 0 {
					continue
				}
				id := int(op.pick) % nres
				got := im.Cancel(id, t)
				if got {
					for _, adm := range admitted[name] {
						for k := range adm {
							if adm[k].res == id {
								adm[k].cancelled = true
							}
						}
					}
				}
				if name == "reference" {
					ref.(*refImpl).lastAllow = got
				} else if got != ref.(*refImpl).lastAllow {
					return fmt.Errorf("%s: Cancel(#%d) = %v, reference %v", where(name), int(op.pick)%nres, got, !got)
				}
			case opSweep:
				got := im.Sweep(t)
				if name == "reference" {
					ref.(*refImpl).lastN = got
				} else if exact && got != ref.(*refImpl).lastN {
					return fmt.Errorf("%s: Sweep removed %d, reference %d", where(name), got, ref.(*refImpl).lastN)
				}
			}
			if exact && name != "reference" && !p.single && im.Len() != ref.Len() {
				return fmt.Errorf("%s: Len %d, reference %d", where(name), im.Len(), ref.Len())
			}
		}
		if t < ref.(*refImpl).Horizon() {
			// Stamped before a reclaim's horizon: the contract does not promise
			// this check what it would have got without the reclaim, nor the
			// envelope (see Reference.horizon). Compare from here on as from a
			// fresh start.
			belowHorizon = true
			if unswept != nil {
				unswept = ref.(*refImpl).Clone()
				unswept.NeverSweep()
				// The reservations so far, as they stand: a later Cancel names
				// one by its place among all of them.
				unsweptRes = slices.Clone(ref.(*refImpl).res)
			}
		} else if unswept != nil {
			if err := sameAsUnswept(unswept, &unsweptRes, ref.(*refImpl), op, t); err != nil {
				return fmt.Errorf("%s: %w", where("reference"), err)
			}
		}
		if op.kind == opReserve {
			nres++
		}
	}
	if refunded || belowHorizon || p.cfg.opts.MaxKeys > 0 && p.cfg.opts.AllowAtCap {
		return nil // keys beyond the cap are admitted untracked, by the caller's choice: no envelope
	}
	for name, keys := range admitted {
		for key, adm := range keys {
			if err := checkEnvelope(p.cfg.limit, adm); err != nil {
				return fmt.Errorf("impl %s key %q: %w", name, key, err)
			}
		}
	}
	return nil
}

// sameAsUnswept applies op at t to a reference that never reclaims and compares
// its answer with the one the reclaiming reference just gave.
func sameAsUnswept(u *reference.Reference, res *[]reference.Reservation, ref *refImpl, op fuzzOp, t int64) error {
	switch op.kind {
	case opAllow:
		if got := u.AllowN(op.key, t, 1).Allowed; got != ref.lastAllow {
			return fmt.Errorf("after reclaiming, Allow = %v; never reclaimed, %v", ref.lastAllow, got)
		}
	case opAllowN, opPeek:
		got := u.Peek(op.key, t, op.cost)
		if op.kind == opAllowN {
			got = u.AllowN(op.key, t, op.cost)
		}
		if got != ref.lastDecision {
			return fmt.Errorf("after reclaiming, %s; never reclaimed, %s", describe(ref.lastDecision), describe(got))
		}
	case opRefund:
		u.Refund(op.key, t, op.cost)
	case opSettle:
		if got := int(u.Settle(op.key, t, op.cost, op.actual)); got != ref.lastN {
			return fmt.Errorf("after reclaiming, Settle forgave %d; never reclaimed, %d", ref.lastN, got)
		}
	case opReserve:
		got := u.Reserve(op.key, t, op.cost, op.wait)
		*res = append(*res, got)
		if w := ref.lastRes; got.OK != w.OK || got.Delay != w.Delay || got.RetryAfter != w.RetryAfter {
			return fmt.Errorf("after reclaiming, reservation %+v; never reclaimed, %+v", w, got)
		}
	case opCancel:
		if len(*res) > 0 { // as many as the reclaiming reference's: the same pick
			u.Cancel(&(*res)[int(op.pick)%len(*res)], t)
		}
	}
	return nil
}

// checkEnvelope checks one key's admissions, less the cancelled reservations,
// against the envelope (fuzz.CheckEnvelope).
func checkEnvelope(l atomicbucket.Limit, adm []admission) error {
	var list []reference.Admission
	for _, a := range adm {
		if !a.cancelled {
			list = append(list, reference.Admission{At: a.at, Cost: a.cost, Rounded: a.res >= 0})
		}
	}
	return reference.CheckEnvelope(l, list)
}
