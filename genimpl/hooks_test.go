package genimpl

import (
	"fmt"
	"testing"
)

// A generated constructor given nil hooks names every one, not the first.
func TestNilHooks(t *testing.T) {
	for _, c := range []struct {
		nils []bool
		want string
	}{
		{[]bool{false, false, false}, ""},
		{[]bool{false, true, false}, "limits: NewMiddleware: Hooks.UserID is nil"},
		{[]bool{true, false, true}, "limits: NewMiddleware: Hooks.PlanOf and Hooks.TenantOf are nil"},
		{[]bool{true, true, true}, "limits: NewMiddleware: Hooks.PlanOf, Hooks.UserID and Hooks.TenantOf are nil"},
	} {
		err := NilHooks("limits: NewMiddleware: Hooks.", []string{"PlanOf", "UserID", "TenantOf"}, c.nils...)
		if got := fmt.Sprint(err); c.want == "" && err != nil || c.want != "" && got != c.want {
			t.Errorf("NilHooks(%v) = %v, want %q", c.nils, err, c.want)
		}
	}
}
