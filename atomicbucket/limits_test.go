package atomicbucket

import (
	"context"
	"errors"
	"testing"
	"time"
)

func mustRule(t *testing.T, l Limit) Rule {
	t.Helper()
	r, err := NewRule(l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const hour = Time(time.Hour)

// TestTimeBackwards: a time earlier than one already seen creates no tokens
// (golang/go#56287). GCRA evaluates a stale now as is, which is stricter: the
// backward check is denied, and the bucket later answers as if it never happened.
func TestTimeBackwards(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 1})
	b, control := NewBucketAt(r, hour), NewBucketAt(r, hour)
	for _, x := range []*Bucket{b, control} {
		if !x.AllowAt(hour + 10*Time(time.Second)) {
			t.Fatal("first request denied")
		}
	}
	for _, back := range []Time{hour + 5*Time(time.Second), hour, 0, -hour} {
		if d := b.AllowNAt(back, 1); d.Allowed {
			t.Fatalf("request at an earlier time %d allowed: %+v", back, d)
		}
		if d := b.PeekAt(back, 0); d.Remaining != 0 {
			t.Fatalf("an earlier time shows %d tokens, want 0", d.Remaining)
		}
	}
	for _, at := range []Time{10*Time(time.Second) + 500*Time(time.Millisecond), 11 * Time(time.Second), 11*Time(time.Second) + 1} {
		got, want := b.AllowNAt(hour+at, 1), control.AllowNAt(hour+at, 1)
		if got != want {
			t.Fatalf("at +%v after going backwards: %+v, a bucket that never saw it: %+v", time.Duration(at), got, want)
		}
	}
}

// TestHugeIdleGap: after the longest idle gap a process can have, a bucket is
// full and nothing overflows (bucket4j#51).
func TestHugeIdleGap(t *testing.T) {
	for _, l := range []Limit{
		{Tokens: 1_000_000, Period: time.Second, Burst: 1_000},
		{Tokens: 3, Period: time.Second, Burst: 5},
		{Tokens: 5, Period: 10 * time.Second, Burst: 20, Refill: Interval},
		{Tokens: 1, Period: time.Minute, Burst: 2, Refill: Interval, Aligned: true},
	} {
		r := mustRule(t, l)
		b := NewBucketAt(r, 0)
		b.AllowNAt(0, l.Burst)
		for _, at := range []Time{Time(MaxUptime) - 1, Time(MaxUptime), Time(MaxUptime) + hour, 1<<63 - 1} {
			d := b.PeekAt(at, l.Burst)
			if full := b.PeekAt(at, 0); !d.Allowed || d.Remaining != 0 || full.Reset != 0 || full.Remaining != l.Burst {
				t.Fatalf("%v: after idling to %d, Peek(burst) = %+v, want allowed with 0 left", r.String(), at, d)
			}
		}
		if d := b.AllowNAt(Time(MaxUptime), l.Burst); !d.Allowed {
			t.Fatalf("%v: burst at MaxUptime denied: %+v", r.String(), d)
		}
		// Past MaxUptime time stops: no more refill, so no overflow and no over-admission.
		if d := b.AllowNAt(1<<63-1, 1); d.Allowed {
			t.Fatalf("%v: refilled after MaxUptime: %+v", r.String(), d)
		}
	}
}

// TestCostLimits covers costs 0, negative, above the burst and huge.
func TestCostLimits(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 10, Period: time.Second, Burst: 5})
	b := NewBucketAt(r, hour)
	tb := NewTable[string](r, TableOptions{})
	for _, cost := range []int64{-1, 6, 1 << 62, -1 << 63, 1<<63 - 1} {
		for name, d := range map[string]Decision{
			"bucket":        b.AllowNAt(hour, cost),
			"table":         tb.AllowNAt("k", hour, cost),
			"peek":          b.PeekAt(hour, cost),
			"table peek":    tb.PeekAt("k", hour, cost),
			"reserve":       {Allowed: b.ReserveAt(hour, cost, time.Hour).OK, RetryAfter: b.ReserveAt(hour, cost, time.Hour).RetryAfter, Remaining: 5},
			"table reserve": {Allowed: tb.ReserveAt("k", hour, cost, time.Hour).OK, RetryAfter: tb.ReserveAt("k", hour, cost, time.Hour).RetryAfter, Remaining: 5},
		} {
			if d.Allowed || d.RetryAfter != Never || d.Remaining != 5 {
				t.Fatalf("%s cost %d: %+v, want denied, retry never, 5 left", name, cost, d)
			}
		}
		b.RefundAt(hour, cost)
	}
	if d := b.AllowNAt(hour, 0); !d.Allowed || d.Remaining != 5 {
		t.Fatalf("cost 0 on a full bucket: %+v", d)
	}
	if d := b.AllowNAt(hour, 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost = burst on a full bucket: %+v", d)
	}
	if d := b.AllowNAt(hour, 0); !d.Allowed {
		t.Fatalf("cost 0 on an empty bucket must be allowed (0 ≤ 0 tokens): %+v", d)
	}
	if res := b.ReserveAt(hour, 1, time.Second); !res.OK {
		t.Fatal("reserve ahead refused")
	}
	if d := b.AllowNAt(hour, 0); d.Allowed {
		t.Fatalf("cost 0 while in debt from a reservation must be denied: %+v", d)
	}
}

// TestDeniedChangesNothing: a denied request leaves the word as it was (golang/go#52584).
func TestDeniedChangesNothing(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 3})
	b := NewBucketAt(r, hour)
	b.AllowNAt(hour, 3)
	before := b.tat.Load()
	for i := range 100 {
		at := hour + Time(i)*Time(time.Millisecond)
		if b.AllowNAt(at, 2).Allowed || b.AllowAt(at) || b.ReserveAt(at, 3, time.Second).OK {
			t.Fatalf("allowed at +%dms", i)
		}
	}
	if after := b.tat.Load(); after != before {
		t.Fatalf("denied requests moved the TAT from %d to %d", before, after)
	}
}

func TestZeroAllocs(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1_000_000})
	b := NewBucketAt(r, Now())
	tb := NewTable[string](r, TableOptions{})
	ti := NewTable[int64](r, TableOptions{})
	tb.Allow("key")
	ti.Allow(42)
	ctx := context.Background()
	scale, emit, tau, _ := r.Units() // what generated code passes as constants
	for name, f := range map[string]func(){
		"Bucket.Allow":                          func() { b.Allow() },
		"Bucket.AllowN":                         func() { b.AllowNAt(Now(), 2) },
		"Bucket.Peek":                           func() { b.PeekAt(Now(), 1) },
		"Bucket.Reserve":                        func() { res := b.ReserveAt(Now(), 1, 0); res.CancelAt(Now()) },
		"Bucket.Refund":                         func() { b.RefundAt(Now(), 1) },
		"Bucket.Wait":                           func() { _ = b.Wait(ctx, 1) },
		"Table.Allow":                           func() { tb.Allow("key") },
		"Table.AllowN":                          func() { tb.AllowNAt("key", Now(), 2) },
		"Table.Peek":                            func() { tb.PeekAt("key", Now(), 1) },
		"Table.Reserve":                         func() { tb.ReserveAt("key", Now(), 1, 0) },
		"Table.Refund":                          func() { tb.RefundAt("key", Now(), 1) },
		"Table.Settle":                          func() { tb.SettleAt("key", Now(), 2, 3); tb.SettleAt("key", Now(), 3, 1) },
		"Bucket.Settle":                         func() { b.SettleAt(Now(), 2, 3); b.SettleAt(Now(), 3, 1) },
		"Table[int64].Allow":                    func() { ti.Allow(42) },
		"Table.Wait":                            func() { _ = tb.Wait(ctx, "key", 1) },
		"Bucket.AllowGreedyAt (generated code)": func() { b.AllowGreedyAt(Now(), scale, emit, tau) },
		"Table.AllowGreedyAt (generated code)":  func() { tb.AllowGreedyAt("key", Now(), scale, emit, tau) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs per call, want 0", name, n)
		}
	}
}

func TestWait(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 100, Period: time.Second, Burst: 1}) // one token per 10ms
	b := NewBucketAt(r, Now())
	ctx := context.Background()
	if err := b.Wait(ctx, 1); err != nil {
		t.Fatalf("Wait on a full bucket: %v", err)
	}
	if err := b.Wait(ctx, 1); err != nil { // waits about 10ms
		t.Fatalf("Wait for the next token: %v", err)
	}
	if d := b.PeekAt(Now(), 1); d.Allowed {
		t.Fatalf("the waited-for token was not taken: %+v", d)
	}
	if err := b.Wait(ctx, 2); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("Wait(cost 2 > burst 1) = %v, want ErrCostExceedsBurst", err)
	}

	// A deadline too close: fails at once, wrapping DeadlineExceeded, taking nothing.
	slow := NewBucketAt(mustRule(t, Limit{Tokens: 1, Period: time.Hour, Burst: 1}), Now())
	slow.Allow()
	before := slow.tat.Load()
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := slow.Wait(dctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past the deadline = %v, want DeadlineExceeded", err)
	}
	if slow.tat.Load() != before {
		t.Fatal("a Wait refused for its deadline took tokens")
	}

	// Cancelled while waiting: wraps Canceled and gives the tokens back.
	mid := NewBucketAt(mustRule(t, Limit{Tokens: 1, Period: 2 * time.Second, Burst: 1}), Now())
	mid.Allow()
	before = mid.tat.Load()
	cctx, cancel2 := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel2() }()
	if err := mid.Wait(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait cancelled = %v, want Canceled", err)
	}
	if got := mid.tat.Load(); got != before {
		t.Fatalf("a cancelled Wait kept its tokens: TAT %d, was %d", got, before)
	}
	if err := mid.Wait(cctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a done context = %v, want Canceled", err)
	}

	// Tables: same contract.
	tb := NewTable[string](r, TableOptions{})
	if err := tb.Wait(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.Wait(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if err := tb.Wait(ctx, "k", 5); !errors.Is(err, ErrCostExceedsBurst) {
		t.Fatalf("table Wait(cost > burst) = %v", err)
	}
	capped := NewTable[string](r, TableOptions{MaxKeys: 1})
	if err := capped.Wait(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := capped.Wait(ctx, "b", 1); !errors.Is(err, ErrAtCap) {
		t.Fatalf("Wait for a new key at the cap = %v, want ErrAtCap", err)
	}
}
