package shared

import (
	"errors"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

func TestMicroUnits(t *testing.T) {
	for _, c := range []struct {
		l    atomicbucket.Limit
		want Units
	}{
		{atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}, Units{PerMicro: 1, Emit: 100_000, Exact: true}},
		{atomicbucket.Limit{Tokens: 3, Period: time.Second, Burst: 5}, Units{PerMicro: 3, Emit: 1_000_000, Exact: true}},
		{atomicbucket.Limit{Tokens: 7, Period: 3 * time.Second, Burst: 1_000_000}, Units{PerMicro: 7, Emit: 3_000_000, Exact: true}},
		{atomicbucket.Limit{Tokens: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000}, Units{PerMicro: 1000, Emit: 1, Exact: true}},
		{atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5, Refill: atomicbucket.Interval}, Units{}},
	} {
		got, err := MicroUnits(c.l)
		if err != nil || got != c.want {
			t.Errorf("%+v: %+v, %v; want %+v", c.l, got, err, c.want)
		}
		if err == nil && got.Exact && got.Emit*c.l.Tokens*1000 != int64(c.l.Period)*got.PerMicro {
			t.Errorf("%+v: %+v does not hold the rate exactly", c.l, got)
		}
	}
	// Too fine for 2^53 at any scale within the error bound.
	_, err := MicroUnits(atomicbucket.Limit{Tokens: 1_000_000_000, Period: time.Second, Burst: 5_000_000_000_000_000})
	if !errors.Is(err, ErrMicroUnits) {
		t.Errorf("a burst of 5e15 at 1e9/s: %v", err)
	}
	// Not exact, but held within the bound: at 3/s a burst of 5e9 does not
	// fit 2^53 in thirds of a µs; halves of a third do, 5e-7 slow.
	l := atomicbucket.Limit{Tokens: 3, Period: time.Second, Burst: 5_000_000_000}
	if _, err := atomicbucket.NewRule(l); err != nil {
		t.Fatalf("the local runtime refuses %+v: %v", l, err)
	}
	u, err := MicroUnits(l)
	if err != nil || u.Exact || u.RelativeError(l) <= 0 || u.RelativeError(l) > atomicbucket.MaxRelativeError {
		t.Errorf("%+v: %+v (error %g), %v", l, u, u.RelativeError(l), err)
	}
}
