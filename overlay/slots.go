package overlay

import (
	"errors"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
)

// errKeySlots refuses a key's own numbers for an in-flight rule.
var errKeySlots = errors.New("an in-flight rule's numbers are the rule's (or a plan's), for every key: give them without a key")

// SlotNumbers is one plan's numbers of an in-flight rule as an overlay Set
// changes them: atomicslot.Gate's and Table's methods, a generated in-flight
// limiter's for a rule without plans (local or shared), PlanSlots' for one
// with plans.
type SlotNumbers interface {
	SetNumbers(n atomicbucket.Numbers) error
	ClearNumbers()
	PolicyRule() *atomicslot.Rule
}

// PlannedSlots is a generated in-flight limiter with plans: its numbers
// methods take the plan first.
type PlannedSlots[P any] interface {
	SetNumbers(plan P, n atomicbucket.Numbers) error
	ClearNumbers(plan P)
	PolicyRule(plan P) *atomicslot.Rule
}

// PlanSlots is plan's numbers of l, a limiter with plans.
func PlanSlots[P any](l PlannedSlots[P], plan P) SlotNumbers { return planSlots[P]{l, plan} }

type planSlots[P any] struct {
	l    PlannedSlots[P]
	plan P
}

func (p planSlots[P]) SetNumbers(n atomicbucket.Numbers) error { return p.l.SetNumbers(p.plan, n) }
func (p planSlots[P]) ClearNumbers()                           { p.l.ClearNumbers(p.plan) }
func (p planSlots[P]) PolicyRule() *atomicslot.Rule            { return p.l.PolicyRule(p.plan) }

// SlotTarget is an in-flight rule as a Target: its numbers are its slots
// and their maximum hold (rate "4/10m": 4 slots, each held at most ten
// minutes; the slots as burst), for the whole rule, or for one plan (plans
// in plan order, planned true). Scaling multiplies the slots by the rate
// factor and keeps the hold.
func SlotTarget(keyed, planned bool, plans ...SlotNumbers) Target {
	return slotTarget{s: plans, keyed: keyed, planned: planned}
}

type slotTarget struct {
	s              []SlotNumbers
	keyed, planned bool
}

func (t slotTarget) Plans() int {
	if t.planned {
		return len(t.s)
	}
	return 0
}

func (t slotTarget) Keyed() bool { return t.keyed }

// InFlight says the rule is an in-flight rule's: an entry may give its
// numbers as in_flight and max_hold.
func (t slotTarget) InFlight() bool { return true }

func (t slotTarget) Check(_ int, n atomicbucket.Numbers) error {
	_, err := atomicslot.RuleOf(n)
	return err
}

func (t slotTarget) CheckKey(string) error { return errKeySlots }

func (t slotTarget) Set(plan int, key *string, n atomicbucket.Numbers) error {
	if key != nil {
		return errKeySlots
	}
	return t.s[max(plan, 0)].SetNumbers(n)
}

func (t slotTarget) Clear(plan int, key *string) {
	if key == nil {
		t.s[max(plan, 0)].ClearNumbers()
	}
}

func (t slotTarget) Base(plan int) Base {
	return Base{Numbers: atomicslot.NumbersOf(t.s[max(plan, 0)].PolicyRule()), Cost: 1, Window: true}
}
