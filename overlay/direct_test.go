package overlay_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
)

// A Set that moves a key between the rule's numbers and its own converts its
// bucket directly from the numbers in force before to those in force after,
// never through the policy's or the previous Set's on the way (which, with a
// smaller burst there, clamped the bucket, and, when that made it full, gave
// it the whole new burst: 190 admitted at once on burst 100 in the outside
// check). PerEndpoint's policy numbers are 1000/min, burst 200; the Sets' rate
// of 1 an hour adds nothing while the test runs.
func TestApplyConvertsDirectly(t *testing.T) {
	hourly := func(burst int64, key bool) overlay.Entry {
		e := overlay.Entry{Rule: "PerEndpoint", Numbers: per(1, time.Hour, burst), Pos: "t"}
		if key {
			e.Key, e.HasKey = "7", true
		}
		return e
	}
	for _, c := range []struct {
		name          string
		before, after overlay.Set
		want          int64 // key 7's tokens after the second Set, having spent 10 under the first
	}{
		{"key entry added, rule entry dropped", overlay.Set{hourly(500, false)}, overlay.Set{hourly(500, true)}, 490},
		{"key entry added, rule entry changed", overlay.Set{hourly(500, false)}, overlay.Set{hourly(5, false), hourly(300, true)}, 300},
		{"key entry dropped, rule entry changed", overlay.Set{hourly(5, false), hourly(100, true)}, overlay.Set{hourly(100, false)}, 90},
		{"both changed", overlay.Set{hourly(500, false), hourly(500, true)}, overlay.Set{hourly(400, false), hourly(450, true)}, 450},
		{"key entry dropped, rule entry dropped", overlay.Set{hourly(5, false), hourly(300, true)}, nil, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := limits.New()
			if err := l.ApplyNumbers(c.before); err != nil {
				t.Fatal(err)
			}
			if d := l.PerEndpoint.AllowN(7, 10); !d.Allowed {
				t.Fatalf("10 refused on a fresh bucket: %+v", d)
			}
			if err := l.ApplyNumbers(c.after); err != nil {
				t.Fatal(err)
			}
			if got := l.PerEndpoint.Peek(7, 0).Remaining; got != c.want {
				t.Errorf("after the second Set key 7 holds %d, want %d", got, c.want)
			}
		})
	}
}

// The empty key has no numbers of its own: no door checks it (a request
// without a key is missing_key), so numbers given to it would never apply.
// The generated API, the table under it and a Set all refuse it.
func TestEmptyKeyRefused(t *testing.T) {
	l := limits.New()
	n := per(1, time.Second, 10)
	if err := l.PerUser.SetKeyNumbers("", n, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("PerUser.SetKeyNumbers(\"\") = %v, want ErrEmptyKey", err)
	}
	if err := l.Login.SetKeyNumbers("", n, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("Login.SetKeyNumbers(\"\") = %v, want ErrEmptyKey", err)
	}
	tb := atomicbucket.NewTable[string](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 5}), atomicbucket.TableOptions{})
	if err := tb.SetKeyNumbersAt(atomicbucket.Now(), "", n, atomicbucket.CarryAsIs); !errors.Is(err, atomicbucket.ErrEmptyKey) {
		t.Errorf("Table.SetKeyNumbersAt(\"\") = %v, want ErrEmptyKey", err)
	}
	err := l.ApplyNumbers(overlay.Set{{Rule: "PerUser", Key: "", HasKey: true, Numbers: n, Pos: "numbers.yaml:3:5"}})
	if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), "numbers.yaml:3:5: rule PerUser: an empty key") {
		t.Errorf("a Set with an empty key: %v, want it refused at its position", err)
	}
	if _, o := l.PerUser.NumbersFor(limits.PlanFree, ""); o != atomicbucket.FromPolicy {
		t.Errorf("the empty key has numbers from %v", o)
	}
}
