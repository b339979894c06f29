package main

import (
	"context"
	"errors"
	"fmt"

	"example.com/quickstart/limits"
	"github.com/limitgen/limitgen/shared"
)

// The calls the README shows: one rule at its default cost, one with a cost on
// a plan, a tier that takes every rule's tokens or none, and one with a cost.
// PerUser and Global are shared: their checks take the request's context and
// go to the store; lims has none, so each result's Err says so.
func Example_calls() {
	ctx := context.Background() // in a handler: r.Context()
	lims := limits.New()
	ok := lims.Global.Allow(ctx)
	res := lims.PerUser.AllowN(ctx, limits.PlanPro, "carol", 3)
	fmt.Println(ok, res.Allowed, res.Remaining, errors.Is(res.Err, shared.ErrNoStore))

	d := lims.Request(ctx, limits.PlanFree, "dave")
	fmt.Println(d.Allowed, d.Remaining, d.Rule, d.DeniedBy == 0)
	big := lims.RequestN(ctx, limits.PlanFree, "dave", 50) // more than the free burst
	r, ok := big.RetryAfterHeader()
	fmt.Println(big.Allowed, big.DeniedBy, r, ok)
	ok2 := lims.Login.Allow("192.0.2.1")                // a local rule
	local := lims.LocalRequest(limits.PlanFree, "erin") // in this process only, whatever the store
	fmt.Println(ok2, local.Allowed, local.Remaining)
	p, _ := limits.ParsePlan("pro")
	fmt.Println(p, p == limits.PlanPro)
	// Output:
	// true true 97 true
	// true 9 PerUser true
	// false PerUser  false
	// true true 9
	// pro true
}
