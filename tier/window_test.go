package tier

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
)

// TestTierAtWindows: a tier of a window (2 a minute, first) and a bucket
// (burst 3): the window is looked at before anything is taken and taken
// last, so a denial by either leaves the other as it was (hand-computed).
func TestTierAtWindows(t *testing.T) {
	win := atomicwindow.NewTable[string](atomicwindow.MustRule(2, time.Minute), atomicbucket.TableOptions{})
	bucket := atomicbucket.NewTable[string](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 3}), atomicbucket.TableOptions{})
	steps := func(key string) []Step {
		return []Step{WindowTable(win, key, 1), Table(bucket, key, 1)}
	}
	// Two pass: window 2 → 1 → 0, bucket 3 → 2 → 1.
	for i, want := range []int64{1, 0} {
		if d, idx, denied := At(hour, steps("a")...); !d.Allowed || denied || idx != 0 || d.Remaining != want {
			t.Fatalf("request %d: %+v index %d denied %v; want allowed, the window with %d left", i, d, idx, denied, want)
		}
	}
	// The window denies at its look: the bucket keeps its 1.
	if d, idx, denied := At(hour, steps("a")...); d.Allowed || !denied || idx != 0 || d.RetryAfter != time.Minute+999 {
		t.Fatalf("third: %+v index %d denied %v; want denied by the window until its first unit leaves", d, idx, denied)
	}
	if p := bucket.PeekAt("a", hour, 0); p.Remaining != 1 {
		t.Fatalf("the bucket has %d after the window's denial, want 1", p.Remaining)
	}
	// A minute later the window has room and the bucket 1 token: one more
	// passes; then the bucket denies and the window keeps what it had.
	later := hour + atomicbucket.Time(time.Minute+999)
	if d, _, denied := At(later, steps("a")...); !d.Allowed || denied {
		t.Fatalf("a minute later: %+v", d)
	}
	if d, idx, denied := At(later, steps("a")...); d.Allowed || !denied || idx != 1 {
		t.Fatalf("the bucket empty: %+v index %d, want denied by the bucket", d, idx)
	}
	if p := win.PeekAt("a", later, 0); p.Remaining != 1 {
		t.Fatalf("the window has %d left after the bucket's denial, want 1 (the denied request took nothing)", p.Remaining)
	}
}

// TierAt allocates nothing itself (shared's degraded path decides through
// it while a store is down), windows or not, admitting or denying.
func TestTierAtAllocatesNothing(t *testing.T) {
	win := atomicwindow.NewTable[string](atomicwindow.MustRule(1, time.Minute), atomicbucket.TableOptions{})
	bucket := atomicbucket.NewTable[string](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 1 << 20}), atomicbucket.TableOptions{})
	win.AllowN("a", 0)
	bucket.AllowNAt("a", atomicbucket.Now(), 1)
	steps := []Step{Table(bucket, "a", 1), WindowTable(win, "a", 1), Table(bucket, "a", 1)}
	if n := testing.AllocsPerRun(100, func() { At(hour, steps...) }); n != 0 {
		t.Errorf("TierAt: %v allocations", n)
	}
}
