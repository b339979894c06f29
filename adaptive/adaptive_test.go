package adaptive

import (
	"errors"
	"github.com/limitgen/limitgen/overlay"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBuckets: every latency falls in a bucket whose upper bound is at least
// it and at most 1/16 above it, and buckets are in order.
func TestBuckets(t *testing.T) {
	prev := -1
	for _, v := range []int64{0, 1, 15, 16, 17, 31, 32, 33, 63, 64, 1000, 999_999, 1_000_000, 123_456_789, 1 << 40, 1<<62 + 12345, math.MaxInt64} {
		i := bucketOf(v)
		if i < prev || i >= numBuckets {
			t.Errorf("bucketOf(%d) = %d after %d (of %d)", v, i, prev, numBuckets)
		}
		prev = i
		ub := upperBound(i)
		if ub < v || float64(ub-v) > float64(v)/16 {
			t.Errorf("bucket %d of %d has upper bound %d", i, v, ub)
		}
		if i > 0 && upperBound(i-1) >= v {
			t.Errorf("%d is in bucket %d, but bucket %d reaches %d", v, i, i-1, upperBound(i-1))
		}
	}
	if bucketOf(-5) != 0 {
		t.Errorf("a negative latency: bucket %d", bucketOf(-5))
	}
}

// TestDrain: the quantile of a known set of latencies is the sorted value at
// its rank, reported at most 1/16 above; errors are a ratio; the window
// starts again empty.
func TestDrain(t *testing.T) {
	var w window
	var all []int64
	for i := range 1000 {
		v := int64(i*i*37%100_000) * 1000 // 0 to 100 ms, scattered
		all = append(all, v)
		w.observe(time.Duration(v), i%10 == 0)
	}
	slices.Sort(all)
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		w2 := window{}
		for _, v := range all {
			w2.observe(time.Duration(v), false)
		}
		h := w2.drain(q)
		want := all[int(math.Ceil(q*1000))-1]
		if got := int64(h.Latency); got < want || float64(got-want) > float64(want)/16 {
			t.Errorf("q=%v: %v, the %d-th latency is %v", q, h.Latency, int(math.Ceil(q*1000)), time.Duration(want))
		}
	}
	h := w.drain(0.99)
	if h.Samples != 1000 || h.Errors != 0.1 {
		t.Errorf("drained %+v, want 1000 samples, errors 0.1", h)
	}
	if h := w.drain(0.99); h != (Health{}) {
		t.Errorf("a drained window drained again: %+v", h)
	}
}

func TestObserveAllocates(t *testing.T) {
	c, err := New(Config{Latency: time.Second}, func(overlay.Factor, overlay.Factor) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(1000, func() { c.Observe(3*time.Millisecond, true) }); n != 0 {
		t.Errorf("Observe allocates %v times", n)
	}
}

// TestAIMD: a step table of health and the factor after it.
func TestAIMD(t *testing.T) {
	var applied [][2]overlay.Factor
	c, err := New(Config{Latency: 100 * time.Millisecond, Errors: 0.05, Min: 0.2, Max: 1.2, Increase: 0.1, Decrease: 0.5, MinSamples: 10, Burst: true},
		func(rate, burst overlay.Factor) error {
			applied = append(applied, [2]overlay.Factor{rate, burst})
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	good := Health{Samples: 100, Latency: 50 * time.Millisecond}
	slow := Health{Samples: 100, Latency: 101 * time.Millisecond}
	failing := Health{Samples: 100, Latency: time.Millisecond, Errors: 0.06}
	few := Health{Samples: 9, Latency: time.Hour, Errors: 1}
	for i, row := range []struct {
		h       Health
		verdict Verdict
		factor  overlay.Factor // thousandths
	}{
		{good, Healthy, 1200}, // starts at Max; held there
		{slow, Unhealthy, 600},
		{few, TooFew, 600},
		{failing, Unhealthy, 300},
		{slow, Unhealthy, 200}, // 150, held at Min
		{slow, Unhealthy, 200},
		{good, Healthy, 300},
		{good, Healthy, 400},
		{Health{Samples: 10, Latency: 100 * time.Millisecond, Errors: 0.05}, Healthy, 500}, // at the targets: healthy
		{failing, Unhealthy, 250},
		{good, Healthy, 350},
	} {
		s := c.Judge(time.Unix(int64(i), 0), row.h)
		if s.Verdict != row.verdict || s.Factor != row.factor || s.Err != nil {
			t.Errorf("row %d (%+v): %v, want %v and factor %v", i, row.h, s, row.verdict, row.factor)
		}
	}
	want := [][2]overlay.Factor{{1200, 1200}, {600, 600}, {300, 300}, {200, 200}, {300, 300}, {400, 400}, {500, 500}, {250, 250}, {350, 350}}
	if !slices.Equal(applied, want) {
		t.Errorf("applied %v\nwant    %v", applied, want)
	}
}

// TestRefusedFactor: a factor apply refuses is reported and the factor stays.
func TestRefusedFactor(t *testing.T) {
	refuse := false
	c, err := New(Config{Errors: 0.01, MinSamples: 1}, func(rate, _ overlay.Factor) error {
		if refuse {
			return errors.New("no")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refuse = true
	s := c.Judge(time.Time{}, Health{Samples: 5, Errors: 1})
	if s.Err == nil || s.Factor != overlay.One || c.Factor() != overlay.One || !strings.Contains(s.String(), "not applied: no") {
		t.Errorf("a refused factor: %v (factor %v)", s, c.Factor())
	}
	refuse = false
	if s := c.Judge(time.Time{}, Health{Samples: 5, Errors: 1}); s.Err != nil || s.Factor != 500 {
		t.Errorf("then accepted: %v", s)
	}
}

func TestConfigRefused(t *testing.T) {
	ok := func(overlay.Factor, overlay.Factor) error { return nil }
	for _, c := range []struct {
		cfg Config
		msg string
	}{
		{Config{}, "no target"},
		{Config{Latency: -time.Second}, "Latency -1s is negative"},
		{Config{Errors: 2}, "Errors 2 is not a ratio"},
		{Config{Latency: time.Second, Quantile: 1.5}, "Quantile 1.5"},
		{Config{Latency: time.Second, Min: 0.5, Max: 0.4}, "Min 0.5 and Max 0.4"},
		{Config{Latency: time.Second, Decrease: 1}, "Decrease 1 is not in (0, 1)"},
		{Config{Latency: time.Second, Increase: -1}, "Increase -1"},
		{Config{Latency: time.Second, Interval: -1}, "Interval -1ns"},
		{Config{Latency: time.Second, MinSamples: -3}, "MinSamples -3"},
		{Config{Latency: time.Second, Start: 2}, "Start 2 is outside [Min, Max] = [0.1, 1]"},
	} {
		if _, err := New(c.cfg, ok); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.msg)
		}
	}
	if _, err := New(Config{Latency: time.Second}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no apply: %v", err)
	}
	start := errors.New("unknown rule")
	if _, err := New(Config{Latency: time.Second}, func(overlay.Factor, overlay.Factor) error { return start }); !errors.Is(err, start) {
		t.Errorf("a starting factor refused: %v", err)
	}
}
