package pace

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

func TestParseRateLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		r, t int64
		ok   bool
	}{
		{`"PerUser";r=17;t=4`, 17, 4, true},
		{`"a;r=9\";t=1";r=0;t=60`, 0, 60, true}, // a name holding what looks like parameters
		{`token;t=3;r=2, "Other";r=9;t=9`, 2, 3, true},
		{` "X";r=1;t=0`, 1, 0, true},
		{`"X";r=1`, 0, 0, false},
		{`"X";r=-1;t=1`, 0, 0, false},
		{`"X";r=x;t=1`, 0, 0, false},
		{`"unterminated;r=1;t=1`, 0, 0, false},
		{``, 0, 0, false},
	} {
		r, tt, ok := ParseRateLimit(c.in)
		if r != c.r || tt != c.t || ok != c.ok {
			t.Errorf("ParseRateLimit(%q) = %d, %d, %v; want %d, %d, %v", c.in, r, tt, ok, c.r, c.t, c.ok)
		}
	}
}

// fakeTime is a clock that sleeping moves.
type fakeTime struct{ now time.Time }

func (f *fakeTime) pacer() *Pacer {
	return &Pacer{
		Now:   func() time.Time { return f.now },
		Sleep: func(_ context.Context, d time.Duration) error { f.now = f.now.Add(d); return nil },
	}
}

// A client that obeys the fields of a real bucket (20/s, burst 20, judged
// by Judge.Verdict as a server's door does) for 10 s of its time is never
// denied and sends at least 95% of what the bucket admits in that time; with
// a denial's wait it waits exactly that.
func TestPacerObeysBucket(t *testing.T) {
	ft := &fakeTime{now: time.Unix(1000, 0)}
	p := ft.pacer()
	pol := verdict.MustPolicy("R", testLimit(20, time.Second, 20))
	b := newTestBucket(pol)
	start := ft.now
	sent, denied := 0, 0
	for ft.now.Sub(start) < 10*time.Second {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		d := b.AllowNAt(at(ft.now, start), 1)
		sent++
		v := (&verdict.Judge{}).Verdict(verdict.Enforce, &verdict.Result{Decision: d, Policy: &pol, Cost: 1}, "")
		r, tt := v.R, v.T
		if !d.Allowed {
			denied++
			p.Observe(pol.Item, string(verdict.AppendRateLimit(nil, &pol, r, tt)), true, d.RetryAfter)
			continue
		}
		p.Observe(pol.Item, string(verdict.AppendRateLimit(nil, &pol, r, tt)), false, 0)
		ft.now = ft.now.Add(time.Millisecond) // a request's round trip
	}
	quota := 20 + 20*int(ft.now.Sub(start)/time.Second)
	if denied != 0 || sent < quota*95/100 {
		t.Errorf("%d sent, %d denied in %v; want 0 denied and at least 95%% of %d", sent, denied, ft.now.Sub(start), quota)
	}
	t.Logf("%d sent of %d admissible in %v, %d denied", sent, quota, ft.now.Sub(start), denied)
	// A denial's wait is waited, to the nanosecond.
	p.Observe("", "", true, 1234*time.Millisecond)
	before := ft.now
	p.Wait(context.Background())
	if got := ft.now.Sub(before); got != 1234*time.Millisecond {
		t.Errorf("after a denial of 1.234 s, waited %v", got)
	}
	// A context that ends first ends the wait.
	p.Observe("", "", true, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Sleep = nil
	if err := p.Wait(ctx); err != context.Canceled {
		t.Errorf("Wait with an ended context: %v", err)
	}
}

func testLimit(tokens int64, period time.Duration, burst int64) atomicbucket.Limit {
	return atomicbucket.Limit{Tokens: tokens, Period: period, Burst: burst}
}

func newTestBucket(p verdict.Policy) *atomicbucket.Bucket {
	return atomicbucket.NewBucketAt(atomicbucket.MustRule(p.Limit), 0)
}

func at(now, start time.Time) atomicbucket.Time { return atomicbucket.Time(now.Sub(start)) }

func TestPolicyOf(t *testing.T) {
	for _, c := range []struct {
		policy, name string
		q, w         int64
		ok           bool
	}{
		{`"A";q=50;w=5, "B";q=2;w=1`, `"B"`, 2, 1, true},
		{`"A";q=50;w=5, "B";q=2;w=1`, `"A"`, 50, 5, true},
		{`"A,x";q=3;w=4, "B";q=2;w=1`, `"A,x"`, 3, 4, true}, // a comma inside a name
		{`"A";q=50`, `"A"`, 0, 0, false},
		{`"A";q=50;w=5`, `"C"`, 0, 0, false},
		{`"A;q=1;w=1`, `"A"`, 0, 0, false},
	} {
		q, w, ok := policyOf(c.policy, c.name)
		if q != c.q && c.ok || w != c.w && c.ok || ok != c.ok {
			t.Errorf("policyOf(%q, %q) = %d, %d, %v; want %d, %d, %v", c.policy, c.name, q, w, ok, c.q, c.w, c.ok)
		}
	}
}
