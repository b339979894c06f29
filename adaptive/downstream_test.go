package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitgen/limitgen/adaptive"
	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
)

// downstream is a synthetic service behind the limiter: it serves capacity
// requests a second; what it cannot serve waits in a queue, and a request's
// latency is its base plus the time to serve the queue before it. A request
// whose latency passes the timeout fails.
type downstream struct {
	capacity float64 // requests per second
	base     time.Duration
	timeout  time.Duration
	queue    float64 // requests waiting at the start of the second
}

// second serves admitted requests arriving evenly over one second and
// returns each one's latency and whether it failed.
func (d *downstream) second(admitted int, observe func(time.Duration, bool)) (worst time.Duration) {
	for i := range admitted {
		// The queue at the i-th arrival: what was there, plus arrivals so
		// far, minus what was served meanwhile.
		at := float64(i) / float64(max(admitted, 1))
		q := max(d.queue+float64(i)-d.capacity*at, 0)
		lat := d.base + time.Duration(q/d.capacity*float64(time.Second))
		worst = max(worst, lat)
		observe(lat, lat > d.timeout)
	}
	d.queue = max(d.queue+float64(admitted)-d.capacity, 0)
	return worst
}

// TestSyntheticDownstream: 3000 requests a second offered to a rule of
// 2000/s, in front of a downstream that serves 1000/s. Without a controller
// its queue grows without end; with one, the admitted rate settles near
// the capacity and latency near the target; when the downstream recovers
// the factor climbs back to 1 by additive steps.
func TestSyntheticDownstream(t *testing.T) {
	const offered = 3000
	policy := atomicbucket.Limit{Tokens: 2000, Period: time.Second, Burst: 200}
	run := func(controlled bool, seconds int, capacity func(int) float64, each func(sec, admitted int, worst time.Duration, factor float64)) {
		rule := atomicbucket.MustRule(policy)
		start := int64(time.Hour)
		now := start
		b := atomicbucket.NewBucketAt(rule, atomicbucket.Time(now))
		d := &downstream{base: 20 * time.Millisecond, timeout: 2 * time.Second}
		var c *adaptive.Controller
		if controlled {
			var err error
			c, err = adaptive.New(adaptive.Config{Latency: 100 * time.Millisecond, Errors: 0.01, Min: 0.05},
				func(rate, burst overlay.Factor) error {
					n, err := overlay.ScaleNumbers(overlay.Base{Numbers: atomicbucket.NumbersOf(policy), Cost: 1}, rate, burst)
					if err != nil {
						return err
					}
					return b.SetNumbersAt(atomicbucket.Time(now), n, atomicbucket.CarryAsIs)
				})
			if err != nil {
				t.Fatal(err)
			}
		}
		for sec := range seconds {
			d.capacity = capacity(sec)
			admitted := 0
			for i := range offered {
				now = start + int64(sec)*int64(time.Second) + int64(i)*int64(time.Second)/offered
				if b.AllowAt(atomicbucket.Time(now)) {
					admitted++
				}
			}
			observe := func(time.Duration, bool) {}
			if c != nil {
				observe = c.Observe
			}
			worst := d.second(admitted, observe)
			factor := 1.0
			if c != nil {
				now = start + int64(sec+1)*int64(time.Second)
				s := c.Step(time.Unix(0, now))
				if s.Err != nil {
					t.Fatalf("second %d: %v", sec, s)
				}
				factor = s.Factor.Float()
			}
			each(sec, admitted, worst, factor)
		}
	}
	weak := func(sec int) float64 {
		if sec < 60 {
			return 1000
		}
		return 5000
	}

	var uncontrolled time.Duration
	run(false, 60, weak, func(sec, admitted int, worst time.Duration, _ float64) { uncontrolled = worst })
	if uncontrolled < 20*time.Second {
		t.Fatalf("the synthetic downstream without a controller: worst latency %v after a minute; its queue should grow by 1000 a second", uncontrolled)
	}

	var settled, settledSecs int
	var settledWorst time.Duration
	recovered := -1
	run(true, 90, weak, func(sec, admitted int, worst time.Duration, factor float64) {
		if factor < 0.05 || factor > 1 {
			t.Errorf("second %d: factor %v outside [0.05, 1]", sec, factor)
		}
		// The admitted rate follows the factor (the rule's 2000/s scaled,
		// plus what the bucket held).
		if sec >= 20 && sec < 60 {
			settled += admitted
			settledSecs++
			settledWorst = max(settledWorst, worst)
		}
		if sec >= 60 && recovered < 0 && factor == 1 {
			recovered = sec
		}
		if testing.Verbose() {
			t.Logf("second %d: admitted %d, worst latency %v, factor %.3f", sec, admitted, worst, factor)
		}
	})
	mean := float64(settled) / float64(settledSecs)
	if mean < 600 || mean > 1050 {
		t.Errorf("seconds 20 to 59: %.0f admitted a second on average, want near the capacity of 1000", mean)
	}
	if settledWorst > time.Second {
		t.Errorf("seconds 20 to 59: worst latency %v, want it held near the 100 ms target (uncontrolled: %v)", settledWorst, uncontrolled)
	}
	// From at least 0.05 back to 1 by steps of 0.05: at most 19 healthy seconds.
	if recovered < 0 || recovered > 60+20 {
		t.Errorf("after the downstream recovered at second 60 the factor reached 1 at second %d", recovered)
	}
}

// TestRunScalesGenerated: a Controller running against a generated
// package's ScaleNumbers, in real time: slow observations cut Global's
// numbers, fast ones bring the policy's back.
func TestRunScalesGenerated(t *testing.T) {
	l := limits.New()
	policy, _ := l.Global.NumbersFor()
	c, err := adaptive.New(adaptive.Config{Latency: 50 * time.Millisecond, Interval: 5 * time.Millisecond, MinSamples: 1, Increase: 0.25, Burst: true},
		func(rate, burst overlay.Factor) error { return l.ScaleNumbers("Global", rate, burst) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	steps := make(chan adaptive.Round, 1000)
	go c.Run(ctx, func(s adaptive.Round) { steps <- s })
	wait := func(what string, feed time.Duration, done func(adaptive.Round) bool) {
		deadline := time.After(10 * time.Second)
		for {
			c.Observe(feed, false)
			select {
			case s := <-steps:
				if s.Err != nil {
					t.Fatal(s)
				}
				if done(s) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: not within 10 s; factor %v", what, c.Factor())
			}
		}
	}
	wait("slow calls cut the factor", time.Second, func(s adaptive.Round) bool { return s.Factor <= 250 })
	n, origin := l.Global.NumbersFor()
	if origin != atomicbucket.FromOverride || n.Tokens*4 > policy.Tokens || n.Burst*4 > policy.Burst {
		t.Errorf("Global at factor %v: %v (%v); the policy's %v", c.Factor(), n, origin, policy)
	}
	if s := l.ScaledNumbers("Global"); s.Rate != c.Factor() || s.Burst != c.Factor() {
		t.Errorf("ScaledNumbers %+v, the controller's factor %v", s, c.Factor())
	}
	wait("fast calls restore it", time.Millisecond, func(s adaptive.Round) bool { return s.Factor == overlay.One })
	if n, origin := l.Global.NumbersFor(); n != policy || origin != atomicbucket.FromPolicy {
		t.Errorf("back at factor 1: %v (%v), want the policy's %v", n, origin, policy)
	}
}
