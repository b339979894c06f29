package overlay

import "time"

// Numbers is what a generated package's Limits does with numbers given at
// run time, over an Applier of its rules: a generated Limits embeds it.
type Numbers struct{ a *Applier }

// NewNumbers returns the Numbers of p's rules.
func NewNumbers(p Policy[Target]) Numbers { return Numbers{NewApplier(p)} }

// ApplyNumbers makes set's numbers the ones in force (an overlay file, a
// table or a hash), all or nothing: every entry is checked first (its rule,
// plan and key, and its numbers as the generator and the rule's store would
// check them), and a Set with a bad entry is refused whole, its error giving
// each bad entry's position, with the numbers in force unchanged. Then what
// differs from the Set applied before is changed, buckets carried as they
// are (atomicbucket.CarryAsIs), and what that Set gave and this one does not
// goes back to the policy's numbers. A change made with a limiter's own
// SetNumbers or SetKeyNumbers stays until a later Set changes what it gives
// for the same rule, plan or key.
func (n Numbers) ApplyNumbers(set Set) error { return n.a.Apply(set) }

// CheckNumbers says why ApplyNumbers would refuse set (every bad entry, with
// its position), changing nothing: a writer of a numbers source checks a
// change before readers see it (redisstore.PutNumbers).
func (n Numbers) CheckNumbers(set Set) error { return n.a.Check(set) }

// ScaleNumbers multiplies the numbers in force for rule (a rule's name in the
// policy) by a factor: its rate by rate and its burst by burst, in
// thousandths (One leaves it; FactorOf(0.5) is 500), on every plan and for
// every key with numbers of its own, until the next ScaleNumbers of the rule
// (factors do not compound; One and One take the scaling away). It scales
// what ApplyNumbers put in force, and the policy's numbers where no Set gives
// any, so a later Set is scaled too. A scaled burst is at least one
// request's cost, and a factor whose numbers the rule refuses changes
// nothing (an error wrapping ErrInvalid). Package adaptive's controller
// calls it.
func (n Numbers) ScaleNumbers(rule string, rate, burst Factor) error {
	return n.a.Scale(rule, rate, burst)
}

// ScaledNumbers is rule's factors in force (One and One when it is not
// scaled).
func (n Numbers) ScaledNumbers(rule string) Scaled { return n.a.Scaled(rule) }

// NumbersApplied is how many numbers the last Set applied put in force (a
// rule's entry for every plan counted per plan), how many Sets were applied,
// and when the last was.
func (n Numbers) NumbersApplied() (int, int64, time.Time) { return n.a.Applied() }
