package atomicbucket

import (
	"testing"
	"time"
)

// TestTierAt: all or nothing in order, refunds last first on a denial, and the
// most constraining admission reported (hand-computed).
func TestTierAt(t *testing.T) {
	perKey := NewTable[string](mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 3}), TableOptions{})
	global := NewBucketAt(mustRule(t, Limit{Tokens: 10, Period: time.Second, Burst: 2}), hour)
	steps := func(key string, cost int64) []TierStep { return []TierStep{perKey.Step(key, cost), global.Step(cost)} }

	// a: per-key 3 → 2, global 2 → 1: the global rule constrains most.
	if d, i, denied := TierAt(hour, steps("a", 1)...); !d.Allowed || denied || i != 1 || d.Remaining != 1 {
		t.Fatalf("first: %+v index %d denied %v; want allowed by the global rule with 1 left", d, i, denied)
	}
	// b: per-key 3 → 2, global 1 → 0.
	if d, i, _ := TierAt(hour, steps("b", 1)...); !d.Allowed || i != 1 || d.Remaining != 0 {
		t.Fatalf("second: %+v index %d", d, i)
	}
	// c: per-key 3 → 2, then global denies (0 left, 100ms to a token): c's token comes back.
	d, i, denied := TierAt(hour, steps("c", 1)...)
	if d.Allowed || !denied || i != 1 || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("third: %+v index %d denied %v; want denied by the global rule, retry 100ms", d, i, denied)
	}
	if p := perKey.PeekAt("c", hour, 0); p.Remaining != 3 {
		t.Fatalf("c kept the token the tier took before the denial: %d left, want 3", p.Remaining)
	}
	// 300ms later a: per-key 2 (+0.3) → 1, global 0 (+3 → 2) → 1: a tie, the first rule reported.
	if d, i, _ := TierAt(hour+Time(300*time.Millisecond), steps("a", 1)...); !d.Allowed || i != 0 || d.Remaining != 1 {
		t.Fatalf("fourth: %+v index %d; want the first rule on a tie", d, i)
	}
	if d, i, denied := TierAt(hour); !d.Allowed || i != -1 || denied {
		t.Fatalf("no steps: %+v %d %v", d, i, denied)
	}
}

// TestTierAtWindows: a tier of a window (2 a minute, first) and a bucket
// (burst 3): the window is looked at before anything is taken and taken
// last, so a denial by either leaves the other as it was (hand-computed).
func TestTierAtWindows(t *testing.T) {
	win := NewWindowTable[string](MustWindowRule(2, time.Minute), TableOptions{})
	bucket := NewTable[string](mustRule(t, Limit{Tokens: 1, Period: time.Hour, Burst: 3}), TableOptions{})
	steps := func(key string) []TierStep { return []TierStep{win.Step(key, 1), bucket.Step(key, 1)} }
	// Two pass: window 2 → 1 → 0, bucket 3 → 2 → 1.
	for i, want := range []int64{1, 0} {
		if d, idx, denied := TierAt(hour, steps("a")...); !d.Allowed || denied || idx != 0 || d.Remaining != want {
			t.Fatalf("request %d: %+v index %d denied %v; want allowed, the window with %d left", i, d, idx, denied, want)
		}
	}
	// The window denies at its look: the bucket keeps its 1.
	if d, idx, denied := TierAt(hour, steps("a")...); d.Allowed || !denied || idx != 0 || d.RetryAfter != time.Minute+999 {
		t.Fatalf("third: %+v index %d denied %v; want denied by the window until its first unit leaves", d, idx, denied)
	}
	if p := bucket.PeekAt("a", hour, 0); p.Remaining != 1 {
		t.Fatalf("the bucket has %d after the window's denial, want 1", p.Remaining)
	}
	// A minute later the window has room and the bucket 1 token: one more
	// passes; then the bucket denies and the window keeps what it had.
	later := hour + Time(time.Minute+999)
	if d, _, denied := TierAt(later, steps("a")...); !d.Allowed || denied {
		t.Fatalf("a minute later: %+v", d)
	}
	if d, idx, denied := TierAt(later, steps("a")...); d.Allowed || !denied || idx != 1 {
		t.Fatalf("the bucket empty: %+v index %d, want denied by the bucket", d, idx)
	}
	if p := win.PeekAt("a", later, 0); p.Remaining != 1 {
		t.Fatalf("the window has %d left after the bucket's denial, want 1 (the denied request took nothing)", p.Remaining)
	}
}

// TierAt allocates nothing itself (shared's degraded path decides through
// it while a store is down), windows or not, admitting or denying.
func TestTierAtAllocatesNothing(t *testing.T) {
	win := NewWindowTable[string](MustWindowRule(1, time.Minute), TableOptions{})
	bucket := NewTable[string](mustRule(t, Limit{Tokens: 1, Period: time.Hour, Burst: 1 << 20}), TableOptions{})
	win.AllowN("a", 0)
	bucket.AllowN("a", 1)
	steps := []TierStep{bucket.Step("a", 1), win.Step("a", 1), bucket.Step("a", 1)}
	if n := testing.AllocsPerRun(100, func() { TierAt(hour, steps...) }); n != 0 {
		t.Errorf("TierAt: %v allocations", n)
	}
}
