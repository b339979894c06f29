package shared

import (
	"errors"
	"fmt"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// StoreRule is a shared rule prepared for a store: its name (part of its
// keys), its integers on the store's microsecond clock, its failure setting
// and its lease. Build one with NewStoreRule (a store's NewRule).
type StoreRule struct {
	name     string
	n        Integers
	fallback *fallbackRule // decides when the store cannot
	lease    int64         // > 0: checked through Bind from leases of at most lease tokens
	global   bool          // one bucket, key "" (AsGlobal)
}

// AsGlobal returns a copy of r for a rule without keys: its one bucket's key
// is "", and a check with another key is refused. A rule from NewStoreRule
// is keyed: it refuses the empty key.
func (r *StoreRule) AsGlobal() *StoreRule {
	c := *r
	c.global = true
	return &c
}

// MaxKeyLen is the longest key a shared check takes, in bytes: what the
// doors' key sources return at most (verdict.MaxKeyLen). A longer one is
// refused before the store is asked.
const MaxKeyLen = verdict.MaxKeyLen

// checkKey refuses a key the rule cannot have: the empty key for a keyed
// rule (a request without a key must be refused before the check, as the
// middleware's missing_key does, not pooled in one bucket), another than ""
// for a global one, and one longer than MaxKeyLen.
func (c Call) checkKey() error {
	switch {
	case len(c.Key) > MaxKeyLen:
		return fmt.Errorf("%w: a key of %d bytes for rule %s; at most %d", ErrInvalidStep, len(c.Key), c.Rule.name, MaxKeyLen)
	case c.Rule.global && c.Key != "":
		return fmt.Errorf("%w: rule %s has no keys, but a check named key %q", ErrInvalidStep, c.Rule.name, c.Key)
	case !c.Rule.global && c.Key == "":
		return fmt.Errorf("%w: the empty key for rule %s, which is keyed: refuse a request without a key before checking it", ErrInvalidStep, c.Rule.name)
	}
	return nil
}

// NewStoreRule computes the numbers of a shared rule named name (NewIntegers),
// or says why a store on a microsecond clock cannot hold it. It fails over
// to denial (FailDeny) until WithFailure says otherwise.
func NewStoreRule(name string, l atomicbucket.Limit) (*StoreRule, error) {
	if name == "" {
		return nil, errors.New("a shared rule needs a name: it is part of its buckets' keys")
	}
	n, err := NewIntegers(l)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &StoreRule{name: name, n: n, fallback: &fallbackRule{}}, nil
}

// WithFailure returns a copy of r that decides by f when the store cannot
// (newFallbackRule: FailLocal's share never admits more than its share).
func (r *StoreRule) WithFailure(f Failure) (*StoreRule, error) {
	fb, err := newFallbackRule(r.n.Limit, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.name, err)
	}
	c := *r
	c.fallback = fb
	return &c, nil
}

// Name is the rule's name, part of its keys.
func (r *StoreRule) Name() string { return r.name }

// Limit is the limit the rule was built from.
func (r *StoreRule) Limit() atomicbucket.Limit { return r.n.Limit }

// Integers are the rule's integers on the store's clock.
func (r *StoreRule) Integers() *Integers { return &r.n }

// Exact reports whether the units hold the written rate exactly: then every
// decision equals the exact reference's at the server's microsecond times.
func (r *StoreRule) Exact() bool { return r.n.Exact }

// RelativeError is how much lower than written the admitted rate is: 0 for
// an exact rule.
func (r *StoreRule) RelativeError() float64 { return r.n.RelativeError(r.n.Limit) }

// Failure is the rule's failure setting.
func (r *StoreRule) Failure() Failure { return r.fallback.Failure() }

// Clamped is c with a cost outside the rule's range made Burst+1 (denied by
// every backend, taken by none): what a Backend is given.
func (c Call) Clamped() Call {
	if c.Cost < 0 || c.Cost > c.Rule.n.Limit.Burst {
		c.Cost = c.Rule.n.Limit.Burst + 1
	}
	return c
}

// Decision is the Decision a backend's reply describes for c (with its cost
// as the caller gave it: out of range, RetryAfter is Never).
func (c Call) Decision(r Reply) atomicbucket.Decision {
	return c.Rule.n.Decision(r.Allowed, r.Ahead, r.Excess, r.Since, c.Cost)
}

// Granted is the answer a backend's lease reply describes for c.
func (c Call) Granted(lr LeaseReply) Granted {
	d := c.Decision(lr.Reply)
	if !lr.Allowed {
		return Granted{Decision: d}
	}
	return Granted{Decision: d, Size: lr.Excess, Second: lr.Second, Usec: lr.Usec}
}

// repeated is the index of the first call that names a bucket an earlier
// call names, or -1 (each would see the bucket as it was before the check,
// and the last write would win: more admitted than the bucket holds).
func repeated(calls []Call) int {
	for i := 1; i < len(calls); i++ {
		for j := range i {
			if calls[i].Rule.name == calls[j].Rule.name && calls[i].Key == calls[j].Key {
				return i
			}
		}
	}
	return -1
}

// SettleStep is what settling a request of key admitted at estimate whose
// actual cost is actual asks of its bucket under r (as
// atomicbucket.Table.SettleAt settles a local one): a Call in mode
// ModeRefund (the difference back, when at most the burst) or ModeOwe (the
// excess, at most Burst + MaxDebt of it, as debt). ok is false when there is
// nothing to ask: equal or negative numbers, a difference above the burst
// to give back (as a local bucket gives none back); forgiven is then 0.
func (r *StoreRule) SettleStep(key string, estimate, actual int64) (c Call, mode Mode, ok bool, forgiven int64) {
	switch {
	case estimate < 0 || actual < 0 || actual == estimate:
		return Call{}, 0, false, 0
	case actual < estimate:
		d := estimate - actual
		return Call{r, key, d}, ModeRefund, d <= r.n.Limit.Burst, 0
	}
	return Call{r, key, min(actual-estimate, r.n.Limit.Burst+r.n.MaxDebt)}, ModeOwe, true, 0
}

// Forgiven is the tokens of excess a settlement's reply rep to c (in mode,
// from SettleStep) forgave: the units ModeOwe could not charge, in whole
// tokens rounded up, and what SettleStep left out of the call.
func (r *StoreRule) Forgiven(c Call, mode Mode, rep Reply, excess int64) int64 {
	if mode != ModeOwe {
		return 0
	}
	return (rep.Excess+r.n.Emit-1)/r.n.Emit + excess - c.Cost
}
