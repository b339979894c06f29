package atomicbucket

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewRuleRejects(t *testing.T) {
	cases := []struct {
		name string
		l    Limit
		msg  string
	}{
		{"rate 0", Limit{Tokens: 0, Period: time.Second, Burst: 1}, "a rate of 0 never refills"},
		{"negative tokens", Limit{Tokens: -5, Period: time.Second, Burst: 1}, "at least 1"},
		{"period 0", Limit{Tokens: 1, Period: 0, Burst: 1}, "period 0s: must be at least 1ns"},
		{"burst 0", Limit{Tokens: 1, Period: time.Second, Burst: 0}, "burst 0 admits nothing"},
		{"initial above burst", Limit{Tokens: 1, Period: time.Second, Burst: 2, Initial: 3, InitialSet: true}, "initial 3"},
		{"negative initial", Limit{Tokens: 1, Period: time.Second, Burst: 2, Initial: -1, InitialSet: true}, "initial -1"},
		{"aligned greedy", Limit{Tokens: 1, Period: time.Second, Burst: 2, Aligned: true}, "aligned applies to interval"},
		{"unknown refill", Limit{Tokens: 1, Period: time.Second, Burst: 2, Refill: 7}, "unknown refill"},
		// golang/go#71154: a tiny rate must not overflow; with a huge burst it cannot fit.
		{"tiny rate, huge burst", Limit{Tokens: 1, Period: 100 * 365 * 24 * time.Hour, Burst: 1 << 40}, "does not fit 64-bit fixed point"},
		{"huge interval", Limit{Tokens: 1 << 40, Period: 1, Burst: 1, Refill: Interval}, "does not fit"},
		{"inexact fast rate", Limit{Tokens: 999_999, Period: time.Second, Burst: 10}, "such as 800000 per 1s"},
		// Found by FuzzRule: 2·Burst overflowed before reaching math/big, and the rule was accepted.
		{"burst near MaxInt64", Limit{Tokens: 1<<63 - 3, Period: 1<<63 - 3, Burst: 1<<63 - 3}, "does not fit"},
		{"interval burst near MaxInt64", Limit{Tokens: 1, Period: time.Second, Burst: 1<<63 - 3, Refill: Interval}, "does not fit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRule(c.l)
			if err == nil {
				t.Fatalf("NewRule(%+v) = nil error, want one containing %q", c.l, c.msg)
			}
			if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("NewRule(%+v) = %v, want ErrInvalidLimit containing %q", c.l, err, c.msg)
			}
		})
	}
}

func TestNewRuleUnits(t *testing.T) {
	cases := []struct {
		l          Limit
		exact      bool
		scale      int64
		emit       int64
		maxRelErr  float64
		wantString string
	}{
		{Limit{Tokens: 100, Period: time.Second, Burst: 10}, true, 1, 10_000_000, 0, "100 per 1s, burst 10, greedy refill"},
		{Limit{Tokens: 3, Period: time.Second, Burst: 1}, true, 3, 1_000_000_000, 0, ""},
		{Limit{Tokens: 10, Period: 13 * time.Second, Burst: 1}, true, 1, 1_300_000_000, 0, ""},
		{Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1}, true, 1, 1000, 0, ""},
		{Limit{Tokens: 29, Period: time.Second, Burst: 1}, true, 29, 1_000_000_000, 0, ""},
		// 31 per second needs 1/31 ns, beyond the 10-year budget: rounded, error ≈ 1/(scale·T).
		{Limit{Tokens: 31, Period: time.Second, Burst: 1}, false, 0, 0, 1e-6, ""},
		{Limit{Tokens: 997, Period: time.Hour, Burst: 5}, false, 0, 0, 1e-9, ""},
		{Limit{Tokens: 5, Period: 10 * time.Second, Burst: 20, Refill: Interval}, true, 0, 1, 0, "5 per 10s, burst 20, interval refill"},
		// a tiny rate (golang/go#71154) fits when the burst is modest
		{Limit{Tokens: 1, Period: 20 * 365 * 24 * time.Hour, Burst: 2}, true, 1, int64(20 * 365 * 24 * time.Hour), 0, ""},
	}
	for _, c := range cases {
		r, err := NewRule(c.l)
		if err != nil {
			t.Fatalf("NewRule(%+v): %v", c.l, err)
		}
		if r.Exact() != c.exact {
			t.Errorf("%+v: Exact() = %v, want %v", c.l, r.Exact(), c.exact)
		}
		if c.scale != 0 && (r.scale != c.scale || r.emit != c.emit) {
			t.Errorf("%+v: scale %d emit %d, want %d %d", c.l, r.scale, r.emit, c.scale, c.emit)
		}
		if e := r.RelativeError(); e < 0 || e > c.maxRelErr {
			t.Errorf("%+v: RelativeError() = %g, want in [0, %g]", c.l, e, c.maxRelErr)
		}
		if !c.exact && r.RelativeError() == 0 {
			t.Errorf("%+v: inexact rule reports no error", c.l)
		}
		if c.wantString != "" && r.String() != c.wantString {
			t.Errorf("String() = %q, want %q", r.String(), c.wantString)
		}
	}
}

// TestRuleBudget checks, for rules at the edge of what NewRule accepts, that the
// largest values a bucket can reach stay inside an int64.
func TestRuleBudget(t *testing.T) {
	limits := []Limit{
		{Tokens: 1, Period: 20 * 365 * 24 * time.Hour, Burst: 2},
		{Tokens: 1_000_000_000, Period: time.Second, Burst: 1 << 30},
		{Tokens: 7, Period: 1, Burst: 1 << 40},
		{Tokens: 1 << 20, Period: time.Second, Burst: 1 << 20, Refill: Interval},
	}
	for _, l := range limits {
		r, err := NewRule(l)
		if err != nil {
			t.Logf("%+v rejected: %v", l, err)
			continue
		}
		b := NewBucketAt(r, 0)
		end := Time(MaxUptime)
		// Run the bucket to the end of its budget: take the burst ahead by the
		// longest reservation, then check decisions still make sense.
		res := b.ReserveAt(end, l.Burst, MaxWait)
		if !res.OK {
			t.Fatalf("%+v: reserve of the burst at MaxUptime refused: %+v", l, res)
		}
		d := b.AllowNAt(end, l.Burst)
		if d.Allowed || d.RetryAfter <= 0 || d.Reset <= 0 || d.Remaining != 0 {
			t.Fatalf("%+v: after taking the burst ahead, AllowN(burst) = %+v", l, d)
		}
	}
}
