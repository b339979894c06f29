package atomicbucket

import (
	"testing"
	"time"
)

// TestSettle walks a bucket of 10 tokens refilling 10 a second through a
// settlement of each kind, with the numbers worked out by hand.
func TestSettle(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 10, Period: time.Second, Burst: 10})
	const t0 = Time(time.Hour)
	ms := func(n int64) Time { return t0 + Time(n*int64(time.Millisecond)) }
	for _, form := range []string{"bucket", "table"} {
		t.Run(form, func(t *testing.T) {
			var allow func(at Time, cost int64) Decision
			var settle func(at Time, estimate, actual int64) int64
			if form == "bucket" {
				b := NewBucketAt(r, t0)
				allow, settle = b.AllowNAt, b.SettleAt
			} else {
				tb := NewTable[string](r, TableOptions{})
				allow = func(at Time, cost int64) Decision { return tb.AllowNAt("k", at, cost) }
				settle = func(at Time, e, a int64) int64 { return tb.SettleAt("k", at, e, a) }
			}
			if d := allow(t0, 8); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("estimate 8: %+v", d)
			}
			// Actual 3: 5 back, 7 held.
			if f := settle(t0, 8, 3); f != 0 {
				t.Fatalf("settling lower forgave %d", f)
			}
			if d := allow(t0, 0); d.Remaining != 7 {
				t.Fatalf("after giving 5 back: %+v, want 7 remaining", d)
			}
			// Take all 7 at an estimate of 7, then settle at 12: 5 below empty.
			if d := allow(t0, 7); !d.Allowed {
				t.Fatalf("estimate 7: %+v", d)
			}
			if f := settle(t0, 7, 12); f != 0 {
				t.Fatalf("a debt within the bound forgave %d", f)
			}
			// At +400ms the bucket holds -1: a request of 1 waits 200ms more,
			// and the bucket is full 1.5s after t0.
			d := allow(ms(400), 1)
			if d.Allowed || d.RetryAfter != 200*time.Millisecond || d.Remaining != 0 || d.Reset != 1100*time.Millisecond {
				t.Fatalf("in debt at +400ms: %+v, want denied, retry 200ms, reset 1.1s", d)
			}
			if d := allow(ms(600), 1); !d.Allowed {
				t.Fatalf("repaid at +600ms: %+v", d)
			}
			// Owe far beyond the bound: the bucket goes to 10 below empty
			// (MaxDebt), and the rest is forgiven. At +600ms it held 0 after the
			// admission: an excess of 100 owes 10 and forgives 90.
			if f := settle(ms(600), 1, 101); f != 90 {
				t.Fatalf("forgave %d, want 90", f)
			}
			if d := allow(ms(600), 1); d.Allowed || d.RetryAfter != 1100*time.Millisecond || d.Reset != 2*time.Second {
				t.Fatalf("at the debt bound: %+v, want retry 1.1s, reset 2s", d)
			}
			// Already at the bound: everything more is forgiven.
			if f := settle(ms(600), 0, 7); f != 7 {
				t.Fatalf("at the bound, forgave %d, want 7", f)
			}
			// Bad numbers settle nothing.
			for _, c := range [][2]int64{{-1, 3}, {3, -1}, {5, 5}} {
				if f := settle(ms(600), c[0], c[1]); f != 0 {
					t.Fatalf("Settle(%d, %d) forgave %d", c[0], c[1], f)
				}
			}
			if d := allow(ms(600), 0); d.Reset != 2*time.Second {
				t.Fatalf("bad settlements changed the bucket: %+v", d)
			}
		})
	}
}

// TestSettleAtCap: a new key at a full table's cap has no bucket to owe an
// excess, and the table says it forgave all of it; an existing key owes.
func TestSettleAtCap(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 5})
	tb := NewTable[string](r, TableOptions{MaxKeys: 1})
	now := Time(time.Hour)
	if !tb.AllowNAt("a", now, 5).Allowed {
		t.Fatal("first key denied")
	}
	if f := tb.SettleAt("b", now, 1, 4); f != 3 {
		t.Fatalf("new key at the cap: forgave %d, want 3", f)
	}
	if f := tb.SettleAt("a", now, 5, 8); f != 0 {
		t.Fatalf("existing key: forgave %d", f)
	}
	if d := tb.PeekAt("a", now, 1); d.RetryAfter != 4*time.Second {
		t.Fatalf("key a after owing 3: %+v, want retry 4s", d)
	}
}

// TestMaxDebt: the burst, or what refills in MaxWait when less.
func TestMaxDebt(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		want int64
	}{
		{Limit{Tokens: 10, Period: time.Second, Burst: 10}, 10},
		{Limit{Tokens: 1, Period: time.Hour, Burst: 100}, 24},
		{Limit{Tokens: 1, Period: 48 * time.Hour, Burst: 3}, 0},
		{Limit{Tokens: 7, Period: 10 * time.Hour, Burst: 1000}, 16},
		{Limit{Tokens: 1, Period: 48 * time.Hour, Burst: 3, Refill: Interval}, 1},
		{Limit{Tokens: 5, Period: time.Hour, Burst: 1000, Refill: Interval}, 125},
	} {
		r := mustRule(t, c.l)
		if got := r.MaxDebt(); got != c.want {
			t.Errorf("%v: MaxDebt %d, want %d", r.String(), got, c.want)
		}
	}
}

// TestSettleAfterNumbersChange: a settlement after the numbers changed
// charges the word in force, in its numbers.
func TestSettleAfterNumbersChange(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 10, Period: time.Second, Burst: 10})
	now := Time(time.Hour)
	b := NewBucketAt(r, now)
	tb := NewTable[string](r, TableOptions{})
	b.AllowNAt(now, 10)
	tb.AllowNAt("k", now, 10)
	n := Numbers{Tokens: 20, Period: time.Second, Burst: 20}
	if err := b.SetNumbersAt(now, n, CarryAsIs); err != nil {
		t.Fatal(err)
	}
	if err := tb.SetNumbersAt(now, n, CarryAsIs); err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]func() Decision{
		"bucket": func() Decision { b.SettleAt(now, 10, 40); return b.PeekAt(now, 1) },
		"table":  func() Decision { tb.SettleAt("k", now, 10, 40); return tb.PeekAt("k", now, 1) },
	} {
		// Carried as is: 0 of 20 held; 30 more owed, bounded at 20 below
		// empty; a token comes after 21 at 20/s.
		if got := d(); got.Allowed || got.RetryAfter != 1050*time.Millisecond {
			t.Errorf("%s: %+v, want denied with retry 1.05s", name, got)
		}
	}
}
