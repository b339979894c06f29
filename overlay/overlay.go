// Package overlay changes a generated package's numbers at run time from a
// source: an overlay file (package overlay/yamlfile), a table (pgstore) or a
// hash (redisstore). A source produces a whole Set, and a generated
// package's ApplyNumbers applies it all or nothing: a bad entry refuses the
// Set, every problem of every entry reported at once with its position, and
// the numbers in force stay. Watch is the one loop every source runs in:
// read the source whole, apply what changed, report each change of state.
//
// A rule, plan or key a Set leaves out has the policy's numbers: applying a
// Set clears what the previous one set and this one does not.
//
// A generated package imports this package; it holds no parser of any
// source's format.
package overlay

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// Entry is one rule's numbers from a source: for every plan (Plan ""), one
// plan, or one key (HasKey; on every plan). Pos says where it came from
// (file:line:col, a row's id), for errors.
//
// Err is a problem the source found reading the entry (a rate that does not
// parse; with Rule "", a problem of the source's form at Pos): a Set with
// such an entry is refused, with this problem beside every other of every
// entry, its rule, plan and key checked all the same.
type Entry struct {
	Rule    string
	Plan    string
	Key     string
	HasKey  bool
	Numbers atomicbucket.Numbers
	Pos     string
	Err     error
	// InFlight is true for numbers given as an in-flight rule's (in_flight
	// and max_hold): an entry so given for another rule is refused, not
	// read as a rate. A Checker says it is an in-flight rule's with a
	// method InFlight() bool.
	InFlight bool
}

// NewEntry is the entry a source's row makes (at pos: "limitgen_numbers id
// 7"): rule's numbers for every plan (plan ""), one plan, or one key (key not
// nil), with rate in the policy's syntax (ReadRate) and burst. A rate that
// does not read is the entry's Err; whether the numbers are good is the
// rule's check, at Apply.
func NewEntry(pos, rule, plan string, key *string, rate string, burst int64) Entry {
	e := Entry{Rule: rule, Plan: plan, Pos: pos}
	if key != nil {
		e.Key, e.HasKey = *key, true
	}
	e.Numbers.Tokens, e.Numbers.Period, e.Err = ReadRate(rate)
	e.Numbers.Burst = burst
	return e
}

// Set is a source's whole numbers: what a reload applies.
type Set []Entry

// ErrInvalid is wrapped by the errors of a Set refused whole.
var ErrInvalid = errors.New("numbers refused, none applied")

// Checker is one rule of a policy as a Set is checked against it: its
// plans' count (0 for a rule without plans), whether it is keyed, and its
// checks of numbers and keys.
type Checker interface {
	// Plans is the rule's number of plans, 0 for a rule without them.
	Plans() int
	// Keyed reports whether the rule has keys.
	Keyed() bool
	// Check says why n cannot be the rule's numbers on plan (-1 for a rule
	// without plans), as the generator and the rule's store would refuse
	// them.
	Check(plan int, n atomicbucket.Numbers) error
	// CheckKey says why key cannot be one of the rule's keys.
	CheckKey(key string) error
}

// Target is a Checker that changes its rule's numbers: key is nil for the
// numbers of a plan (-1 without plans) for every key without its own, and a
// key's are on every plan. Set after a successful Check does not fail, but
// for a store's refusal.
type Target interface {
	Checker
	Set(plan int, key *string, n atomicbucket.Numbers) error
	Clear(plan int, key *string)
	// Base is the policy's numbers on plan (-1 without plans), which
	// scaling multiplies where no Set gives numbers.
	Base(plan int) Base
}

// Policy is a generated package's rules by name, and its plans' names by
// index.
type Policy[T Checker] struct {
	Plans []string
	Rules map[string]T
	// Fixed is the rules whose numbers never change at run time, each with
	// the reason an entry for it is refused.
	Fixed map[string]string
}

// missing says why p has no numbers to change for rule.
func (p Policy[T]) missing(rule string) string {
	if why, ok := p.Fixed[rule]; ok {
		return fmt.Sprintf("rule %q: %s", rule, why)
	}
	return fmt.Sprintf("no rule %q in the policy (its rules: %s)", rule, strings.Join(sortedKeys(p.Rules), ", "))
}

// at is where one entry's numbers go: a rule, a plan (-1: without plans) and
// a key.
type at struct {
	rule   string
	plan   int
	key    string
	hasKey bool
}

// resolve checks s against p, all of it, and returns where each of its
// numbers goes, a rule's entry for every plan expanded to each plan not
// given its own; or every problem, each with its entry's position.
func resolve[T Checker](p Policy[T], s Set) (map[at]atomicbucket.Numbers, error) {
	var errs []string
	bad := func(e Entry, format string, args ...any) {
		errs = append(errs, e.Pos+": "+fmt.Sprintf(format, args...))
	}
	out := map[at]atomicbucket.Numbers{}
	planned := map[at]bool{} // plans given numbers of their own
	for _, e := range s {
		if e.Plan != "" && !e.HasKey {
			planned[at{rule: e.Rule, plan: slices.Index(p.Plans, e.Plan)}] = true
		}
	}
	for _, e := range s {
		if e.Err != nil && e.Rule == "" {
			bad(e, "%v", e.Err) // the source's form
			continue
		}
		plans, ok := locate(p, e, bad)
		if e.Err != nil {
			bad(e, "rule %s%s: %v", e.Rule, entryWords(e), e.Err)
			continue
		}
		if !ok {
			continue
		}
		r := p.Rules[e.Rule]
		if ir, _ := any(r).(interface{ InFlight() bool }); e.InFlight && (ir == nil || !ir.InFlight()) {
			bad(e, "rule %s%s: in_flight and max_hold are an in-flight rule's numbers; give this rule a rate and a burst", e.Rule, entryWords(e))
			continue
		}
		if e.HasKey { // one entry, checked on every plan
			a := at{rule: e.Rule, plan: -1, key: e.Key, hasKey: true}
			good := true
			for _, pl := range plans {
				if err := r.Check(pl, e.Numbers); err != nil {
					bad(e, "rule %s, key %q%s: %v", e.Rule, e.Key, planWords(p, pl), err)
					good = false
					break
				}
			}
			if _, dup := out[a]; dup && good {
				bad(e, "rule %s, key %q: given twice", e.Rule, e.Key)
			} else if good {
				out[a] = e.Numbers
			}
			continue
		}
		for _, pl := range plans {
			if e.Plan == "" && planned[at{rule: e.Rule, plan: pl}] {
				continue // the plan's own entry says
			}
			a := at{rule: e.Rule, plan: pl}
			if err := r.Check(pl, e.Numbers); err != nil {
				bad(e, "rule %s%s: %v", e.Rule, planWords(p, pl), err)
				break
			}
			if _, dup := out[a]; dup {
				bad(e, "rule %s%s: given twice", e.Rule, planWords(p, pl))
				break
			}
			out[a] = e.Numbers
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w:\n%s", ErrInvalid, strings.Join(errs, "\n"))
	}
	return out, nil
}

// locate checks where e's numbers go (its rule, plan and key) against p,
// reporting each problem with bad, and returns the plans they go on (-1 for
// a rule without plans).
func locate[T Checker](p Policy[T], e Entry, bad func(Entry, string, ...any)) ([]int, bool) {
	r, ok := p.Rules[e.Rule]
	if !ok {
		bad(e, "%s", p.missing(e.Rule))
		return nil, false
	}
	plans := []int{-1}
	if n := r.Plans(); n > 0 {
		plans = plans[:0]
		for i := range n {
			plans = append(plans, i)
		}
	}
	switch {
	case e.HasKey && e.Plan != "":
		bad(e, "rule %s, key %q: a key's numbers are on every plan; give them without a plan", e.Rule, e.Key)
		return nil, false
	case e.HasKey && !r.Keyed():
		bad(e, "rule %s has no keys", e.Rule)
		return nil, false
	case e.HasKey && e.Key == "":
		bad(e, "rule %s: an empty key: no door checks one (a request without a key is missing_key), so its numbers would never apply", e.Rule)
		return nil, false
	case e.HasKey:
		if err := r.CheckKey(e.Key); err != nil {
			bad(e, "rule %s, key %q: %v", e.Rule, e.Key, err)
			return nil, false
		}
	case e.Plan != "":
		i := slices.Index(p.Plans, e.Plan)
		if i < 0 {
			bad(e, "rule %s: no plan %q in the policy (its plans: %s)", e.Rule, e.Plan, strings.Join(p.Plans, ", "))
			return nil, false
		}
		if r.Plans() == 0 {
			bad(e, "rule %s has the same numbers on every plan: give them without a plan", e.Rule)
			return nil, false
		}
		plans = []int{i}
	}
	return plans, true
}

// entryWords is where in its rule e's numbers go, for messages.
func entryWords(e Entry) string {
	switch {
	case e.HasKey:
		return fmt.Sprintf(", key %q", e.Key)
	case e.Plan != "":
		return ", plan " + e.Plan
	}
	return ""
}

func planWords[T Checker](p Policy[T], plan int) string {
	if plan >= 0 {
		return ", plan " + p.Plans[plan]
	}
	return ""
}

func sortedKeys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Check checks s against p (a policy's rules, as gen's offline check builds
// them), reporting every problem with its position.
func Check[T Checker](p Policy[T], s Set) error {
	_, err := resolve(p, s)
	return err
}

// Applier applies whole Sets to a generated package's rules: each Apply is
// checked all of it first, and then the differences from the Set applied
// before are made (what it set and this one does not is cleared). It also
// scales rules' numbers (Scale). One Apply or Scale at a time.
type Applier struct {
	p  Policy[Target]
	mu sync.Mutex
	// base is the last Set's numbers, resolved; scales the rules' factors;
	// applied what the Applier has put in force (base, scaled).
	base    map[at]atomicbucket.Numbers
	scales  map[string]scaling
	applied map[at]atomicbucket.Numbers
	version int64
	at      time.Time
}

// NewApplier returns an Applier of p's rules, with nothing applied.
func NewApplier(p Policy[Target]) *Applier { return &Applier{p: p} }

// Apply checks s whole and, if every entry is good, makes its numbers the
// ones in force. Each bucket is converted once, directly from the numbers in
// force for it before s to those s gives it, never through the policy's on
// the way: the changes are made in the order that keeps it so (keys given
// numbers of their own first, then rules' and plans', then keys whose own
// numbers s takes away), and a check meanwhile is judged by the numbers
// before or after (docs/numbers.md). A refused Set changes nothing; its
// error lists every bad entry with its position (wrapping ErrInvalid).
//
// A rule scaled by Scale has the Set's numbers scaled; a Set whose scaled
// numbers a rule refuses is refused whole, saying so.
func (a *Applier) Apply(s Set) error {
	want, err := resolve(a.p, s)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	eff, err := a.effective(want, a.scales)
	if err != nil {
		return fmt.Errorf("the Set is good, but scaled by the factors in force: %w", err)
	}
	a.base = want
	a.version++
	a.at = time.Now()
	return a.commit(eff)
}

// Check says why Apply would refuse s now (its entries, and their numbers
// scaled by the factors in force), changing nothing.
func (a *Applier) Check(s Set) error {
	want, err := resolve(a.p, s)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.effective(want, a.scales); err != nil {
		return fmt.Errorf("the Set is good, but scaled by the factors in force: %w", err)
	}
	return nil
}

// commit makes want the numbers in force, converting every bucket directly
// from the numbers in force for it before to those after, never through
// others on the way: keys given numbers of their own (or new ones) first,
// while the rule's numbers they leave are still in force; then the rules'
// and plans' numbers, set or cleared; then keys whose own numbers go, into the
// rule's numbers now in force. Each key's numbers change once, so a check
// meanwhile is judged by its numbers before or after the Set, never by the
// policy's or a plan's on the way.
func (a *Applier) commit(want map[at]atomicbucket.Numbers) error {
	want = maps.Clone(want) // what fails to be set is taken out
	var keysSet, plans, keysGone []at
	for k, n := range want {
		if old, ok := a.applied[k]; ok && old == n {
			continue
		}
		if k.hasKey {
			keysSet = append(keysSet, k)
		} else {
			plans = append(plans, k)
		}
	}
	for k := range a.applied {
		if _, ok := want[k]; ok {
			continue
		}
		if k.hasKey {
			keysGone = append(keysGone, k)
		} else {
			plans = append(plans, k)
		}
	}
	order := func(x, y at) int {
		return cmp.Or(strings.Compare(x.rule, y.rule), cmp.Compare(x.plan, y.plan), strings.Compare(x.key, y.key))
	}
	slices.SortFunc(keysSet, order)
	slices.SortFunc(plans, order)
	slices.SortFunc(keysGone, order)
	var errs []error
	for _, step := range [][]at{keysSet, plans, keysGone} {
		for _, k := range step {
			n, ok := want[k]
			if !ok {
				a.p.Rules[k.rule].Clear(k.plan, keyOf(k))
				continue
			}
			if err := a.p.Rules[k.rule].Set(k.plan, keyOf(k), n); err != nil {
				errs = append(errs, err)
				delete(want, k)
			}
		}
	}
	a.applied = want
	if len(errs) > 0 {
		return fmt.Errorf("numbers checked, but not all applied: %w", errors.Join(errs...))
	}
	return nil
}

func keyOf(k at) *string {
	if !k.hasKey {
		return nil
	}
	key := k.key
	return &key
}

// Applied is how many numbers the last Set put in force (plans and keys,
// a rule's entry for every plan counted per plan), how many Sets were
// applied, and when the last was.
func (a *Applier) Applied() (numbers int, sets int64, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.base), a.version, a.at
}
