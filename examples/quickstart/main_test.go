package main

import (
	"fmt"

	"example.com/quickstart/limits"
)

// The calls the README shows: one rule at its default cost, one with a cost on
// a plan, a tier that takes every rule's tokens or none, and one with a cost.
func Example_calls() {
	ok := limits.Global.Allow()
	d2 := limits.PerUser.AllowN(limits.PlanPro, "carol", 3)
	fmt.Println(ok, d2.Allowed, d2.Remaining)

	d := limits.Request(limits.PlanFree, "dave")
	fmt.Println(d.Allowed, d.Remaining, d.Rule, d.DeniedBy == 0)
	big := limits.RequestN(limits.PlanFree, "dave", 50) // more than the free burst
	r, ok := big.RetryAfterHeader()
	fmt.Println(big.Allowed, big.DeniedBy, r, ok)
	p, _ := limits.ParsePlan("pro")
	fmt.Println(p, p == limits.PlanPro)
	// Output:
	// true true 97
	// true 9 PerUser true
	// false PerUser  false
	// pro true
}
