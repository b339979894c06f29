package tier

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

const hour = atomicbucket.Time(time.Hour)

// TestTierAt: all or nothing in order, refunds last first on a denial, and the
// most constraining admission reported (hand-computed).
func TestAt(t *testing.T) {
	perKey := atomicbucket.NewTable[string](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 3}), atomicbucket.TableOptions{})
	global := atomicbucket.NewBucketAt(atomicbucket.MustRule(atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 2}), hour)
	steps := func(key string, cost int64) []Step { return []Step{Table(perKey, key, cost), Bucket(global, cost)} }

	// a: per-key 3 → 2, global 2 → 1: the global rule constrains most.
	if d, i, denied := At(hour, steps("a", 1)...); !d.Allowed || denied || i != 1 || d.Remaining != 1 {
		t.Fatalf("first: %+v index %d denied %v; want allowed by the global rule with 1 left", d, i, denied)
	}
	// b: per-key 3 → 2, global 1 → 0.
	if d, i, _ := At(hour, steps("b", 1)...); !d.Allowed || i != 1 || d.Remaining != 0 {
		t.Fatalf("second: %+v index %d", d, i)
	}
	// c: per-key 3 → 2, then global denies (0 left, 100ms to a token): c's token comes back.
	d, i, denied := At(hour, steps("c", 1)...)
	if d.Allowed || !denied || i != 1 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("third: %+v index %d denied %v; want denied by the global rule, retry 100ms", d, i, denied)
	}
	if p := perKey.PeekAt("c", hour, 0); p.Remaining != 3 {
		t.Fatalf("c kept the token the tier took before the denial: %d left, want 3", p.Remaining)
	}
	// 300ms later a: per-key 2 (+0.3) → 1, global 0 (+3 → 2) → 1: a tie, the first rule reported.
	if d, i, _ := At(hour+atomicbucket.Time(300*time.Millisecond), steps("a", 1)...); !d.Allowed || i != 0 || d.Remaining != 1 {
		t.Fatalf("fourth: %+v index %d; want the first rule on a tie", d, i)
	}
	if d, i, denied := At(hour); !d.Allowed || i != -1 || denied {
		t.Fatalf("no steps: %+v %d %v", d, i, denied)
	}
}
