package fuzz

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

type opKind uint8

const (
	opAllow   opKind = iota // Allow (cost 1): compares want.Allowed
	opAllowN                // AllowN(cost)
	opPeek                  // Peek(cost)
	opRefund                // Refund(cost)
	opReserve               // Reserve(cost, wait): compares wantRes
	opCancel                // Cancel(reservation id): compares wantN (1 = cancelled)
	opSweep                 // Sweep: compares wantN (buckets removed)
	opLen                   // Len: compares wantN
	opSettle                // Settle(cost as the estimate, actual): compares wantN (tokens forgiven)
)

// step is one operation at a time (relative to the case's base) and what every
// implementation must answer.
type step struct {
	at      time.Duration
	op      opKind
	key     string
	cost    int64
	wait    time.Duration // opReserve: the maximum wait
	id      int           // opCancel: the reservation, by the order reservations were made
	want    reference.Decision
	wantRes reference.Reservation // OK, Delay, RetryAfter
	wantN   int
}

func ok(remaining int64, reset time.Duration) reference.Decision {
	return reference.Decision{Allowed: true, Remaining: remaining, Reset: reset}
}

func no(remaining int64, retry, reset time.Duration) reference.Decision {
	return reference.Decision{Remaining: remaining, RetryAfter: retry, Reset: reset}
}

const (
	ms    = time.Millisecond
	sec   = time.Second
	never = atomicbucket.Never
)

// stepCase is a rule and a sequence of steps.
type stepCase struct {
	name   string
	cfg    config
	keyed  bool // uses several keys, a cap or sweeps: not for a single Bucket
	aligns bool // times are relative to a boundary of the rule's aligned grid
	steps  []step
}

func perSecond(tokens, burst int64) atomicbucket.Limit {
	return atomicbucket.Limit{Tokens: tokens, Period: sec, Burst: burst}
}

var stepCases = []stepCase{
	{name: "greedy 10/s burst 5", cfg: config{limit: perSecond(10, 5)}, steps: []step{
		{at: 0, op: opAllowN, cost: 1, want: ok(4, 100*ms)},
		{at: 0, op: opAllowN, cost: 1, want: ok(3, 200*ms)},
		{at: 0, op: opAllowN, cost: 1, want: ok(2, 300*ms)},
		{at: 0, op: opAllowN, cost: 1, want: ok(1, 400*ms)},
		{at: 0, op: opAllowN, cost: 1, want: ok(0, 500*ms)},
		{at: 0, op: opAllowN, cost: 1, want: no(0, 100*ms, 500*ms)},
		{at: 250 * ms, op: opAllowN, cost: 1, want: ok(1, 350*ms)},
		{at: 250 * ms, op: opAllowN, cost: 2, want: no(1, 50*ms, 350*ms)},
		{at: 250 * ms, op: opPeek, cost: 5, want: no(1, 350*ms, 350*ms)},
		{at: 250 * ms, op: opPeek, cost: 1, want: ok(0, 450*ms)},
		{at: 250 * ms, op: opAllowN, cost: 6, want: no(1, never, 350*ms)},
		{at: 250 * ms, op: opAllowN, cost: -1, want: no(1, never, 350*ms)},
		{at: 250 * ms, op: opAllowN, cost: 0, want: ok(1, 350*ms)},
		{at: 1 * sec, op: opAllow, want: ok(0, 0)},
		{at: 1 * sec, op: opAllowN, cost: 1, want: ok(3, 200*ms)},
	}},
	{name: "interval 5 per 10s burst 20", cfg: config{limit: atomicbucket.Limit{Tokens: 5, Period: 10 * sec, Burst: 20, Refill: atomicbucket.Interval}}, steps: []step{
		{at: 0, op: opAllowN, cost: 5, want: ok(15, 10*sec)},
		{at: 10 * sec, op: opPeek, cost: 0, want: ok(20, 0)},
		{at: 15 * sec, op: opAllowN, cost: 18, want: ok(2, 35*sec)},
		{at: 20 * sec, op: opAllowN, cost: 8, want: no(7, 10*sec, 30*sec)},
		{at: 30*sec - 1, op: opAllowN, cost: 7, want: ok(0, 30*sec+1)},
		{at: 30 * sec, op: opPeek, cost: 5, want: ok(0, 40*sec)},
		{at: 35 * sec, op: opAllowN, cost: 6, want: no(5, 5*sec, 25*sec)},
	}},
	{name: "initial 1 of burst 2 at 1/s", cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: sec, Burst: 2, Initial: 1, InitialSet: true}}, steps: []step{
		{at: 0, op: opAllowN, cost: 1, want: ok(0, 2*sec)},
		{at: 500 * ms, op: opAllowN, cost: 1, want: no(0, 500*ms, 1500*ms)},
		{at: 2 * sec, op: opAllowN, cost: 1, want: ok(1, 1*sec)},
		{at: 2 * sec, op: opAllowN, cost: 1, want: ok(0, 2*sec)},
		{at: 2 * sec, op: opAllowN, cost: 1, want: no(0, 1*sec, 2*sec)},
	}},
	{name: "reservations at 1/s burst 1", cfg: config{limit: perSecond(1, 1)}, steps: []step{
		{at: 0, op: opAllowN, cost: 1, want: ok(0, 1*sec)},
		{at: 0, op: opReserve, cost: 1, wait: 2 * sec, wantRes: reference.Reservation{OK: true, Delay: 1 * sec}},
		{at: 0, op: opReserve, cost: 1, wait: 1500 * ms, wantRes: reference.Reservation{RetryAfter: 2 * sec}},
		{at: 0, op: opReserve, cost: 2, wait: time.Hour, wantRes: reference.Reservation{RetryAfter: never}},
		{at: 0, op: opAllowN, cost: 0, want: no(0, 1*sec, 2*sec)},
		{at: 500 * ms, op: opCancel, id: 0, wantN: 1},
		{at: 500 * ms, op: opCancel, id: 0, wantN: 0},
		{at: 500 * ms, op: opAllowN, cost: 1, want: no(0, 500*ms, 500*ms)},
		{at: 1 * sec, op: opReserve, cost: 1, wait: 0, wantRes: reference.Reservation{OK: true}},
		{at: 1 * sec, op: opCancel, id: 3, wantN: 0},
		{at: 1 * sec, op: opReserve, cost: 1, wait: 48 * time.Hour, wantRes: reference.Reservation{OK: true, Delay: 1 * sec}},
	}},
	{name: "refunds at 10/s burst 5", cfg: config{limit: perSecond(10, 5)}, steps: []step{
		{at: 0, op: opAllowN, cost: 5, want: ok(0, 500*ms)},
		{at: 0, op: opRefund, cost: 3},
		{at: 0, op: opAllowN, cost: 3, want: ok(0, 500*ms)},
		{at: 0, op: opRefund, cost: 10},
		{at: 0, op: opRefund, cost: -2},
		{at: 0, op: opPeek, cost: 1, want: no(0, 100*ms, 500*ms)},
		{at: 0, op: opRefund, cost: 5},
		{at: 0, op: opAllowN, cost: 5, want: ok(0, 500*ms)},
		{at: 10 * ms, op: opRefund, cost: 1},
		{at: 10 * ms, op: opAllowN, cost: 1, want: ok(0, 490*ms)},
	}},
	{name: "10 per 13s (golang/go#34861)", cfg: config{limit: atomicbucket.Limit{Tokens: 10, Period: 13 * sec, Burst: 1}}, steps: []step{
		{at: 0, op: opAllowN, cost: 1, want: ok(0, 1300*ms)},
		{at: 1300*ms - 1, op: opAllowN, cost: 1, want: no(0, 1, 1)},
		{at: 1300 * ms, op: opAllowN, cost: 1, want: ok(0, 1300*ms)},
		{at: 2600 * ms, op: opAllowN, cost: 1, want: ok(0, 1300*ms)},
		{at: 13 * sec, op: opAllowN, cost: 1, want: ok(0, 1300*ms)},
	}},
	{name: "aligned 1 per minute", aligns: true, cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1, Refill: atomicbucket.Interval, Aligned: true}}, steps: []step{
		{at: 59 * sec, op: opAllowN, cost: 1, want: ok(0, 1*sec)},
		{at: 59*sec + 500*ms, op: opAllowN, cost: 1, want: no(0, 500*ms, 500*ms)},
		{at: 60 * sec, op: opAllowN, cost: 1, want: ok(0, 60*sec)},
	}},
	// A Bucket anchors this grid at its creation (the first step); a table places
	// a key's grid by the key, and base moves the case onto it.
	{name: "anchored 1 per minute", cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 1, Refill: atomicbucket.Interval}}, steps: []step{
		{at: 59 * sec, op: opAllowN, cost: 1, want: ok(0, 60*sec)},
		{at: 119 * sec, op: opAllowN, cost: 1, want: ok(0, 60*sec)},
		{at: 178 * sec, op: opAllowN, cost: 1, want: no(0, 1*sec, 1*sec)},
	}},
	{name: "sweep removes buckets full for the grace", keyed: true, cfg: config{limit: perSecond(1, 2)}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: ok(1, 1*sec)},
		{at: 0, op: opAllowN, key: "b", cost: 2, want: ok(0, 2*sec)},
		{at: 0, op: opLen, wantN: 2},
		{at: 2 * sec, op: opSweep, wantN: 1},
		{at: 2 * sec, op: opLen, wantN: 1},
		{at: 3 * sec, op: opSweep, wantN: 1},
		{at: 3 * sec, op: opLen, wantN: 0},
		{at: 3 * sec, op: opAllowN, key: "a", cost: 1, want: ok(1, 1*sec)},
		{at: 3 * sec, op: opAllowN, key: "c", cost: 0, want: ok(2, 0)}, // takes nothing: no bucket
		{at: 3 * sec, op: opLen, wantN: 1},
		{at: 4500 * ms, op: opSweep, wantN: 0},
		{at: 5 * sec, op: opSweep, wantN: 1},
		{at: 4500 * ms, op: opPeek, key: "a", cost: 2, want: ok(0, 2*sec)},
	}},
	{name: "a swept key with initial tokens is a new key", keyed: true, cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: sec, Burst: 2, InitialSet: true}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: no(0, 1*sec, 2*sec)}, // denied, but its first use: the bucket starts refilling
		{at: 3 * sec, op: opSweep, wantN: 1},
		{at: 3 * sec, op: opAllowN, key: "a", cost: 1, want: no(0, 1*sec, 2*sec)},
	}},
	{name: "checks that take nothing create nothing", keyed: true, cfg: config{limit: perSecond(1, 2), opts: atomicbucket.TableOptions{MaxKeys: 1}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 0, want: ok(2, 0)},
		{at: 0, op: opAllowN, key: "a", cost: -1, want: no(2, never, 0)},
		{at: 0, op: opAllowN, key: "a", cost: 3, want: no(2, never, 0)},
		{at: 0, op: opReserve, key: "a", cost: 3, wait: sec, wantRes: reference.Reservation{RetryAfter: never}},
		{at: 0, op: opLen, wantN: 0},
		{at: 0, op: opAllowN, key: "b", cost: 2, want: ok(0, 2*sec)}, // the cap's one slot is still free
		{at: 0, op: opLen, wantN: 1},
	}},
	// The hostile trial's reproduction: the key's grid has boundaries at 0, 10s,
	// 20s… (base puts it there), and a reclaim must not move them.
	{name: "a reclaimed interval key keeps its grid", keyed: true, cfg: config{limit: atomicbucket.Limit{Tokens: 5, Period: 10 * sec, Burst: 5, Refill: atomicbucket.Interval}}, steps: []step{
		{at: 0, op: opAllowN, key: "k", cost: 1, want: ok(4, 10*sec)},
		{at: 10500 * ms, op: opSweep, wantN: 0}, // full since 10s: not yet for the grace
		{at: 11500 * ms, op: opSweep, wantN: 1},
		{at: 11500 * ms, op: opAllowN, key: "k", cost: 1, want: ok(4, 8500*ms)},
		{at: 20500 * ms, op: opAllowN, key: "k", cost: 1, want: ok(4, 9500*ms)},
		{at: 21600 * ms, op: opAllowN, key: "k", cost: 5, want: no(4, 8400*ms, 8400*ms)},
	}},
	// Stamps out of order (the hostile trial's sequence): each check is judged at
	// its own time against every admission so far; the cost-0 check at 2s leaves
	// no trace, so it neither credits nor charges the earlier-stamped ones.
	{name: "out-of-order stamps at 10/s burst 1", cfg: config{limit: perSecond(10, 1)}, steps: []step{
		{at: 1000 * ms, op: opAllowN, cost: 1, want: ok(0, 100*ms)},
		{at: 2000 * ms, op: opAllowN, cost: 0, want: ok(1, 0)},
		{at: 1500 * ms, op: opAllowN, cost: 1, want: ok(0, 100*ms)},
		{at: 1900 * ms, op: opAllowN, cost: 1, want: ok(0, 100*ms)},
		{at: 1950 * ms, op: opAllowN, cost: 1, want: no(0, 50*ms, 50*ms)},
		{at: 1000 * ms, op: opPeek, cost: 1, want: no(0, 1*sec, 1*sec)},
	}},
	// At the cap a new key sweeps (sweeps there are spaced 256ns a key apart);
	// when nothing can be reclaimed, RetryAfter is the wait until a bucket can
	// be, as the sweep learned it, or, within the spacing after a sweep, as the
	// table knows it from that sweep and the buckets made since.
	{name: "cap 1 reclaims a full key for a new one", keyed: true, cfg: config{limit: perSecond(1, 2), opts: atomicbucket.TableOptions{MaxKeys: 1}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: ok(1, 1*sec)},
		// a is full at 1s and reclaimable a grace later: that is when b can have a bucket.
		{at: 0, op: opAllowN, key: "b", cost: 1, want: reference.Decision{RetryAfter: 2 * sec}},
		{at: 0, op: opAllow, key: "b", want: reference.Decision{}},
		{at: 0, op: opReserve, key: "b", cost: 1, wantRes: reference.Reservation{RetryAfter: 2 * sec}},
		{at: 0, op: opPeek, key: "b", cost: 1, want: ok(1, 1*sec)},
		{at: 0, op: opLen, wantN: 1},
		{at: 1500 * ms, op: opAllowN, key: "b", cost: 2, want: reference.Decision{RetryAfter: 500 * ms}},
		{at: 2 * sec, op: opAllowN, key: "b", cost: 1, want: ok(1, 1*sec)},
		{at: 2 * sec, op: opLen, wantN: 1},
		// Within the spacing after the sweep that freed a: the table knows b from
		// its creation (full, so reclaimable at 3s), not yet that b took a token.
		{at: 2 * sec, op: opAllowN, key: "a", cost: 2, want: reference.Decision{RetryAfter: 1 * sec}},
		{at: 2500 * ms, op: opAllowN, key: "a", cost: 2, want: reference.Decision{RetryAfter: 1500 * ms}}, // swept: exact
		{at: 4 * sec, op: opAllowN, key: "a", cost: 2, want: ok(0, 2*sec)},
	}},
	{name: "cap 1 with new buckets short of the cost", keyed: true, cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: sec, Burst: 2, Initial: 1, InitialSet: true}, opts: atomicbucket.TableOptions{MaxKeys: 1}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: ok(0, 2*sec)},
		// a is full at 2s, reclaimable at 3s: b may have a bucket then. It
		// starts with 1 token, and its first check (made when told) is told
		// the 1s more it needs for 2, after which it is allowed: a client that
		// trusts RetryAfter is served at 4s. (Promising 4s at once made the
		// bucket at 4s, and the client was denied there and served at 5s.)
		{at: 0, op: opAllowN, key: "b", cost: 2, want: reference.Decision{RetryAfter: 3 * sec}},
		{at: 3 * sec, op: opAllowN, key: "b", cost: 2, want: no(1, 1*sec, 1*sec)}, // a reclaimed: b is new
		{at: 4 * sec, op: opAllowN, key: "b", cost: 2, want: ok(0, 2*sec)},
	}},
	{name: "cap 1, a client trusting RetryAfter with initial below the cost", keyed: true, cfg: config{limit: atomicbucket.Limit{Tokens: 1, Period: sec, Burst: 5, Initial: 2, InitialSet: true}, opts: atomicbucket.TableOptions{MaxKeys: 1}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: ok(1, 4*sec)},
		// a is full at 4s, reclaimable at 5s. Before, b was told 7s (the cap,
		// then a new bucket's 3s), made its bucket at 8s and was told 3s more.
		{at: 1 * sec, op: opAllowN, key: "b", cost: 5, want: reference.Decision{RetryAfter: 4 * sec}},
		{at: 5 * sec, op: opAllowN, key: "b", cost: 5, want: no(2, 3*sec, 3*sec)},
		{at: 8 * sec, op: opAllowN, key: "b", cost: 5, want: ok(0, 5*sec)},
	}},
	{name: "cap 1 allows new keys untracked", keyed: true, cfg: config{limit: perSecond(1, 2), opts: atomicbucket.TableOptions{MaxKeys: 1, AllowAtCap: true}}, steps: []step{
		{at: 0, op: opAllowN, key: "a", cost: 1, want: ok(1, 1*sec)},
		{at: 0, op: opAllowN, key: "b", cost: 2, want: ok(0, 2*sec)},
		{at: 0, op: opAllowN, key: "b", cost: 2, want: ok(0, 2*sec)},
		{at: 0, op: opAllowN, key: "b", cost: 3, want: no(2, never, 0)},
		{at: 0, op: opAllow, key: "b", want: ok(0, 0)},
		{at: 0, op: opLen, wantN: 1},
	}},
}

// base is where a case's times start: an hour after the epoch, moved for
// aligned rules to a boundary of their grid, and for anchored interval rules in
// a table so that the first step's key has a boundary at the first step (where
// a single Bucket, created by that step, starts its grid).
func base(tb testing.TB, c stepCase, ref *reference.Reference) int64 {
	b := int64(time.Hour)
	p := int64(c.cfg.limit.Period)
	onGrid := func(a int64) int64 { return a + (b-a+p-1)/p*p }
	switch {
	case c.aligns:
		r := c.cfg.rule(tb)
		b = onGrid(r.GridAnchor())
	case ref.Params().KeyAnchor != nil:
		first := c.steps[0]
		b = onGrid(ref.Params().KeyAnchor(first.key)) - int64(first.at)
	}
	return b
}

// runSteps applies c's steps to im and reports every answer that differs; t0 is
// the case's base.
func runSteps(t *testing.T, c stepCase, im impl, t0 int64) {
	for i, s := range c.steps {
		at := t0 + int64(s.at)
		switch s.op {
		case opAllow:
			if got := im.Allow(s.key, at); got != s.want.Allowed {
				t.Errorf("step %d: Allow(%q) at %v = %v, want %v", i, s.key, s.at, got, s.want.Allowed)
			}
		case opAllowN, opPeek:
			var got reference.Decision
			name := "AllowN"
			if s.op == opAllowN {
				got = im.AllowN(s.key, at, s.cost)
			} else {
				name, got = "Peek", im.Peek(s.key, at, s.cost)
			}
			if got != s.want {
				t.Errorf("step %d: %s(%q, %d) at %v = %s, want %s", i, name, s.key, s.cost, s.at, describe(got), describe(s.want))
			}
		case opRefund:
			im.Refund(s.key, at, s.cost)
		case opReserve:
			got := im.Reserve(s.key, at, s.cost, s.wait)
			if got.OK != s.wantRes.OK || got.Delay != s.wantRes.Delay || got.RetryAfter != s.wantRes.RetryAfter {
				t.Errorf("step %d: Reserve(%q, %d, %v) at %v = {ok=%v delay=%v retry=%v}, want {ok=%v delay=%v retry=%v}",
					i, s.key, s.cost, s.wait, s.at, got.OK, got.Delay, got.RetryAfter, s.wantRes.OK, s.wantRes.Delay, s.wantRes.RetryAfter)
			}
		case opCancel:
			if got := im.Cancel(s.id, at); got != (s.wantN == 1) {
				t.Errorf("step %d: Cancel(#%d) at %v = %v, want %v", i, s.id, s.at, got, s.wantN == 1)
			}
		case opSweep:
			if got := im.Sweep(at); got != s.wantN {
				t.Errorf("step %d: Sweep at %v removed %d, want %d", i, s.at, got, s.wantN)
			}
		case opLen:
			if got := im.Len(); got != s.wantN {
				t.Errorf("step %d: Len at %v = %d, want %d", i, s.at, got, s.wantN)
			}
		}
	}
}

// TestSteps runs the one table of steps against the reference and every
// optimised implementation.
func TestSteps(t *testing.T) {
	for _, c := range stepCases {
		t.Run(c.name, func(t *testing.T) {
			for _, ims := range impls(t, c.cfg, !c.keyed) {
				ref := ims["reference"].(*refImpl).Reference
				t0 := base(t, c, ref)
				for _, name := range implNames {
					if im, ok := ims[name]; ok {
						t.Run("impl="+name, func(t *testing.T) { runSteps(t, c, im, t0) })
					}
				}
			}
		})
	}
}
