package verdict

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// A denial's wait is the decision's, rounded up to the millisecond: a 5/s
// rule's empty bucket says 200 ms, not a second; never earlier than the
// decision's wait. Retry is the same wait in whole seconds, at least t.
func TestVerdictWaitToTheMillisecond(t *testing.T) {
	p := MustPolicy("R", atomicbucket.Limit{Tokens: 5, Period: time.Second, Burst: 5})
	b := atomicbucket.NewBucketAt(atomicbucket.MustRule(p.Limit), 0)
	var j Judge
	for range 5 {
		b.AllowAt(0)
	}
	for _, c := range []struct {
		at   time.Duration
		wait time.Duration
	}{
		{0, 200 * time.Millisecond},
		{time.Millisecond, 199 * time.Millisecond},
		{1500 * time.Microsecond, 199 * time.Millisecond}, // 198.5 ms, rounded up
		{199*time.Millisecond + 1, time.Millisecond},      // 1 ns less than a millisecond: a whole one
	} {
		res := Result{Decision: b.PeekAt(atomicbucket.Time(c.at), 1), Policy: &p, Policies: p.Item, Cost: 1}
		v := j.Verdict(Enforce, &res, "k")
		if v.Outcome != Denied || v.Wait != c.wait || v.Retry != 1 {
			t.Errorf("at %v: %+v, want Denied, wait %v, retry 1 s (decision %+v)", c.at, v, c.wait, res.Decision)
		}
	}
	// Allowed and shadow-denied requests have no wait.
	res := Result{Decision: b.PeekAt(atomicbucket.Time(time.Second), 1), Policy: &p, Policies: p.Item, Cost: 1}
	if v := j.Verdict(Enforce, &res, "k"); v.Outcome != Allowed || v.Wait != 0 || v.Retry != -1 {
		t.Errorf("allowed: %+v", v)
	}
	res = Result{Decision: b.PeekAt(0, 1), Policy: &p, Policies: p.Item, Cost: 1}
	if v := j.Verdict(Shadow, &res, "k"); v.Outcome != ShadowDenied || v.Wait != 0 || v.Retry != -1 {
		t.Errorf("shadow: %+v", v)
	}
	res = Result{Decision: b.PeekAt(0, 6), Policy: &p, Policies: p.Item, Cost: 6}
	if v := j.Verdict(Enforce, &res, "k"); v.Outcome != TooCostly || v.Wait != 0 || v.Retry != -1 {
		t.Errorf("too costly: %+v", v)
	}
	res = Result{Decision: b.PeekAt(0, 1), Policy: &p, Policies: p.Item, Cost: 1, Outage: true, Degraded: true}
	if v := j.Verdict(Enforce, &res, "k"); v.Outcome != Denied || !v.Outage || v.Wait != 200*time.Millisecond {
		t.Errorf("outage: %+v", v)
	}
}

// A wait of a second or more is said to three significant digits, rounded
// up: never early, at most 1% late, and the same for a while (a 1/h rule's
// wait changes every 10 s, not every millisecond), with and without jitter.
func TestVerdictLongWaitThreeDigits(t *testing.T) {
	p := MustPolicy("R", atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 1})
	b := atomicbucket.NewBucketAt(atomicbucket.MustRule(p.Limit), 0)
	b.AllowAt(0)
	for _, c := range []struct {
		at   time.Duration
		wait time.Duration
	}{
		{0, time.Hour},
		{63 * time.Millisecond, time.Hour},                              // 3,599,937 ms
		{10 * time.Second, 3590 * time.Second},                          // exactly 3,590,000 ms
		{10*time.Second + 1, 3590 * time.Second},                        // 3,589,999.999… ms
		{20*time.Second - 1, 3590 * time.Second},                        // 3,580,000.000… ms: 3,580,001 up to 3,590,000
		{time.Hour - 998765*time.Microsecond, 999 * time.Millisecond},   // below a second: to the ms
		{time.Hour - 1998765*time.Microsecond, 2000 * time.Millisecond}, // 1,998.765 ms: 1,999 → 2,000
		{time.Hour - 12345678*time.Microsecond, 12400 * time.Millisecond},
	} {
		res := Result{Decision: b.PeekAt(atomicbucket.Time(c.at), 1), Policy: &p, Policies: p.Item, Cost: 1}
		var j Judge
		if v := j.Verdict(Enforce, &res, "k"); v.Wait != c.wait {
			t.Errorf("at %v (decision's wait %v): wait %v, want %v", c.at, res.Decision.RetryAfter, v.Wait, c.wait)
		}
	}
	j := Judge{Jitter: 0.5}
	for at := time.Duration(0); at < time.Hour; at += 7*time.Second + 13*time.Millisecond {
		res := Result{Decision: b.PeekAt(atomicbucket.Time(at), 1), Policy: &p, Policies: p.Item, Cost: 1}
		for _, key := range []string{"a", "b", "client-17"} {
			v := j.Verdict(Enforce, &res, key)
			ra := res.Decision.RetryAfter
			if v.Wait < ra || float64(v.Wait) > float64(ra)*1.5*1.01+float64(time.Millisecond) {
				t.Fatalf("at %v, key %s: wait %v for a decision's %v (jitter at most 50%%, then 1%%)", at, key, v.Wait, ra)
			}
			if ms := v.Wait.Milliseconds(); ms >= 1000 {
				digits := len(strconv.FormatInt(ms, 10))
				if unit := int64(math.Pow10(digits - 3)); ms%unit != 0 {
					t.Fatalf("at %v, key %s: wait %d ms has more than three significant digits", at, key, ms)
				}
			}
		}
	}
}

// The Judge's events carry the door and route the Result names, the outcome
// (degraded when the store did not decide) and the store error's class.
func TestJudgeEvents(t *testing.T) {
	var got []Event
	j := Judge{Observer: ObserverFunc(func(e Event) { got = append(got, e) })}
	p := MustPolicy("R", atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1})
	res := Result{Decision: atomicbucket.Decision{Allowed: true}, Policy: &p, Cost: 1, Door: DoorGRPC, Route: "/pkg.S/M",
		Degraded: true, Err: errors.New("down")}
	j.Verdict(Enforce, &res, "alice")
	res.Err = fmt.Errorf("checking: %w", classed{errors.New("deadline"), "timeout"})
	res.Decision = atomicbucket.Decision{RetryAfter: time.Second}
	j.Verdict(Enforce, &res, "")
	want := []Event{
		{Door: DoorGRPC, Route: "/pkg.S/M", Rule: "R", Cost: 1, Outcome: DegradedAllowed, StoreError: "store", Key: "alice"},
		{Door: DoorGRPC, Route: "/pkg.S/M", Rule: "R", Cost: 1, Outcome: DegradedDenied, RetryAfter: time.Second, StoreError: "timeout"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		l    atomicbucket.Limit
		want string
	}{
		{atomicbucket.Limit{Tokens: 30, Period: time.Minute, Burst: 10}, "30/min, burst 10"},
		{atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5}, "5 per 10s, burst 5"},
		{atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 100}, "100/d, burst 100"},
	} {
		if got := describe(c.l); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.l, got, c.want)
		}
	}
}

// classed is a store error that names its class (ClassedError).
type classed struct {
	error
	class string
}

func (c classed) ErrorClass() string { return c.class }
