package limits_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
)

// Numbers given at run time never make a request the policy admits too
// costly: POST /v1/upload admits a declared cost up to 1000 units (Upload's
// burst), so a burst of 500 for Upload, by its SetNumbers or a key's own,
// or from an overlay Set, is refused naming the route (requests of 600
// units would have been answered 400 for good); 1000 and above are taken.
// The generator refuses the same of the policy's own numbers.
func TestNumbersKeepRouteCosts(t *testing.T) {
	lims := limits.New()
	cut := atomicbucket.Numbers{Tokens: 500, Period: 10 * time.Second, Burst: 500}
	want := `burst 500 is below 1000, the most a request of route "POST /v1/upload" may cost`
	for name, err := range map[string]error{
		"SetNumbers":    lims.Upload.SetNumbers(cut, atomicbucket.CarryAsIs),
		"SetKeyNumbers": lims.Upload.SetKeyNumbers("alice", cut, atomicbucket.CarryAsIs),
		"ApplyNumbers":  lims.ApplyNumbers(overlay.Set{{Rule: "Upload", Numbers: cut, Pos: "test:1"}}),
	} {
		if !errors.Is(err, atomicbucket.ErrInvalidLimit) && !errors.Is(err, overlay.ErrInvalid) || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s with burst 500: %v, want a refusal saying %q", name, err, want)
		}
	}
	if n, _ := lims.Upload.NumbersFor("alice"); n.Burst != 1000 {
		t.Errorf("after the refusals Upload's numbers are %v, want the policy's", n)
	}
	if err := lims.Upload.SetNumbers(atomicbucket.Numbers{Tokens: 2000, Period: 10 * time.Second, Burst: 1000}, atomicbucket.CarryAsIs); err != nil {
		t.Errorf("a burst of 1000, the route's most: %v", err)
	}
}
