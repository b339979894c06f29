// Package overlay changes a generated package's numbers at run time from a
// source: an overlay file in the policy's own syntax for numbers only
// (ParseFile, File), or a table or hash that pgstore and redisstore read. A
// source produces a whole Set, and a generated package's ApplyNumbers
// applies it all or nothing: a bad entry refuses the Set, saying where it
// is, and the numbers in force stay.
//
// An overlay file:
//
//	rules:
//	  PerUser:                          # a rule of the policy, by name
//	    rate: 20/min                    # its numbers on every plan without its own
//	    burst: 20
//	    plans:
//	      pro: {rate: 200/min, burst: 200}
//	    keys:                           # a key's own numbers, on every plan
//	      acme: {rate: 1000/min, burst: 1000}
//	  Global: {rate: 2000/s, burst: 4000}
//
// Each entry gives a rate (rate:, tokens_per_second: or rps:, read as the
// policy reads them) and a burst. A rule, plan or key the Set leaves out has
// the policy's numbers: applying a Set clears what the previous one set and
// this one does not. A file must say rules: — `rules: {}` takes every number
// back to the policy's — so that an empty file (one caught half written, or
// emptied by mistake) is refused rather than clearing every override.
package overlay

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"go.yaml.in/yaml/v3"
)

// Entry is one rule's numbers from a source: for every plan (Plan ""), one
// plan, or one key (HasKey; on every plan). Pos says where it came from
// (file:line:col, a row's id), for errors.
type Entry struct {
	Rule    string
	Plan    string
	Key     string
	HasKey  bool
	Numbers atomicbucket.Numbers
	Pos     string
}

// Set is a source's whole numbers: what a reload applies.
type Set []Entry

// ErrInvalid is wrapped by the errors of a Set refused whole.
var ErrInvalid = errors.New("numbers refused, none applied")

// maxFileBytes bounds an overlay file, as the policy's is bounded.
const maxFileBytes = 16 << 20

// ParseFile reads an overlay file (the package doc's syntax) named name.
// Every problem is reported, each with its line and column.
func ParseFile(name string, src []byte) (Set, error) {
	if len(src) > maxFileBytes {
		return nil, fmt.Errorf("%s: %w: the file has %d bytes, at most %d", name, ErrInvalid, len(src), maxFileBytes)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w: not valid YAML: %s", name, ErrInvalid, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	p := fileParser{name: name}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: %w: the file is empty (written half, or emptied by mistake?); `rules: {}` takes every number back to the policy's", name, ErrInvalid)
	}
	root := doc.Content[0]
	top := p.mapping(root, "the file", "rules")
	rules := top["rules"]
	if rules == nil {
		if len(p.errs) == 0 {
			p.errorf(root, "no rules: (`rules: {}` takes every number back to the policy's)")
		}
		return nil, p.err()
	}
	if rules.Kind == yaml.ScalarNode && rules.Tag == "!!null" {
		return nil, nil // rules: with nothing: the policy's numbers everywhere
	}
	var set Set
	for _, rn := range p.pairs(rules, "rules") {
		name, n := rn[0], rn[1]
		f := p.mapping(n, "rule "+name.Value, "rate", "tokens_per_second", "rps", "burst", "plans", "keys")
		if e, ok := p.entry(n, f, "rule "+name.Value); ok {
			e.Rule = name.Value
			set = append(set, e)
		}
		if f["plans"] != nil {
			for _, pn := range p.pairs(f["plans"], "rule "+name.Value+"'s plans") {
				what := fmt.Sprintf("rule %s, plan %s", name.Value, pn[0].Value)
				if e, ok := p.entry(pn[1], p.mapping(pn[1], what, "rate", "tokens_per_second", "rps", "burst"), what); ok {
					e.Rule, e.Plan = name.Value, pn[0].Value
					set = append(set, e)
				}
			}
		}
		if f["keys"] != nil {
			for _, kn := range p.pairs(f["keys"], "rule "+name.Value+"'s keys") {
				what := fmt.Sprintf("rule %s, key %q", name.Value, kn[0].Value)
				if e, ok := p.entry(kn[1], p.mapping(kn[1], what, "rate", "tokens_per_second", "rps", "burst"), what); ok {
					e.Rule, e.Key, e.HasKey = name.Value, kn[0].Value, true
					set = append(set, e)
				}
			}
		}
	}
	if len(p.errs) > 0 {
		return nil, p.err()
	}
	return set, nil
}

// fileParser collects an overlay file's problems.
type fileParser struct {
	name string
	errs []string
}

func (p *fileParser) errorf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf("%s:%d:%d: %s", p.name, n.Line, n.Column, fmt.Sprintf(format, args...)))
}

func (p *fileParser) err() error {
	return fmt.Errorf("%w:\n%s", ErrInvalid, strings.Join(p.errs, "\n"))
}

// pairs are a mapping's key and value nodes, in order.
func (p *fileParser) pairs(n *yaml.Node, what string) [][2]*yaml.Node {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must be a mapping", what)
		return nil
	}
	var out [][2]*yaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if seen[k.Value] {
			p.errorf(k, "%s: %q is given twice", what, k.Value)
			continue
		}
		seen[k.Value] = true
		out = append(out, [2]*yaml.Node{k, n.Content[i+1]})
	}
	return out
}

// mapping reads a mapping's fields, refusing the ones not in known.
func (p *fileParser) mapping(n *yaml.Node, what string, known ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	for _, kv := range p.pairs(n, what) {
		if !slices.Contains(known, kv[0].Value) {
			p.errorf(kv[0], "%s: unknown field %q; an overlay gives numbers only: %s", what, kv[0].Value, strings.Join(known, ", "))
			continue
		}
		out[kv[0].Value] = kv[1]
	}
	return out
}

// entry reads one entry's rate and burst; ok is false when n gives neither
// (a rule with only plans or keys) or has a problem (recorded).
func (p *fileParser) entry(n *yaml.Node, f map[string]*yaml.Node, what string) (Entry, bool) {
	var rates []string
	for _, k := range []string{"rate", "tokens_per_second", "rps"} {
		if f[k] != nil {
			rates = append(rates, k)
		}
	}
	if len(rates) == 0 && f["burst"] == nil {
		return Entry{}, false
	}
	e := Entry{Pos: fmt.Sprintf("%s:%d:%d", p.name, n.Line, n.Column)}
	ok := true
	switch {
	case len(rates) > 1:
		p.errorf(f[rates[1]], "%s: give the rate once: %s and %s both set it", what, rates[0], rates[1])
		ok = false
	case len(rates) == 0:
		p.errorf(n, "%s: no rate: an overlay entry gives both a rate and a burst", what)
		ok = false
	default:
		v := f[rates[0]]
		var err error
		if rates[0] == "rate" {
			e.Numbers.Tokens, e.Numbers.Period, err = ParseRate(v.Value, false)
		} else {
			e.Numbers.Tokens, e.Numbers.Period, err = ParsePerSecond(v.Value, false)
		}
		if err != nil {
			p.errorf(v, "%s: %v", what, err)
			ok = false
		}
	}
	if b := f["burst"]; b == nil {
		p.errorf(n, "%s: no burst: an overlay entry gives both a rate and a burst", what)
		ok = false
	} else if v, err := strconv.ParseInt(strings.ReplaceAll(b.Value, "_", ""), 10, 64); err != nil || b.Kind != yaml.ScalarNode {
		p.errorf(b, "%s: burst %q is not a whole number", what, b.Value)
		ok = false
	} else if v < 1 {
		p.errorf(b, "%s: burst %d admits nothing; burst must be at least 1", what, v)
		ok = false
	} else {
		e.Numbers.Burst = v
	}
	return e, ok
}

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
		r, ok := p.Rules[e.Rule]
		if !ok {
			bad(e, "no rule %q in the policy (its rules: %s)", e.Rule, strings.Join(sortedKeys(p.Rules), ", "))
			continue
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
			continue
		case e.HasKey && !r.Keyed():
			bad(e, "rule %s has no keys", e.Rule)
			continue
		case e.HasKey && e.Key == "":
			bad(e, "rule %s: an empty key: no door checks one (a request without a key is missing_key), so its numbers would never apply", e.Rule)
			continue
		case e.HasKey:
			if err := r.CheckKey(e.Key); err != nil {
				bad(e, "rule %s, key %q: %v", e.Rule, e.Key, err)
				continue
			}
		case e.Plan != "":
			i := slices.Index(p.Plans, e.Plan)
			if i < 0 {
				bad(e, "rule %s: no plan %q in the policy (its plans: %s)", e.Rule, e.Plan, strings.Join(p.Plans, ", "))
				continue
			}
			if r.Plans() == 0 {
				bad(e, "rule %s has the same numbers on every plan: give them without a plan", e.Rule)
				continue
			}
			plans = []int{i}
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
// ones in force: keys' numbers cleared first, then plans', then what s sets.
// A refused Set changes nothing; its error lists every bad entry with its
// position (wrapping ErrInvalid).
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

func joinKeys[T any](m map[string]T) string { return strings.Join(sortedKeys(m), ", ") }
